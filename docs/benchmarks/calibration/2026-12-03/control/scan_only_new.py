import json
import kit.calibrate as c
print("kit.calibrate from", c.__file__)
from kit.settings import load_settings
numbers, detail = c.measure_scan(load_settings().database_url)
print(json.dumps({"per_class": {k: {"cpu": v["cpu_per_fire"]*1e6, "db": (v["advance"]+v["insert"])*1e6} for k, v in detail["per_class"].items()}, "cron_cpu": detail["per_kind"]["cron"]["cpu_per_fire"]*1e6, "err": [detail["model_error_median"], detail["model_error_max"]]}, indent=1))
