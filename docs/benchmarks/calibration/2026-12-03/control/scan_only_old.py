"""The scan only, with the calibrate of the code it is run from (main's: its per-class
fits and `peak`); run from /work/main under scripts/quiet."""

import json

import kit.calibrate as c
from kit.settings import load_settings

print("kit.calibrate from", c.__file__)
numbers, detail = c.measure_scan(load_settings().database_url)
per_class = {
    k: {"cpu": v["cpu_per_fire"] * 1e6, "db": (v["advance"] + v["insert"]) * 1e6}
    for k, v in detail["per_class"].items()
}
out = {
    "per_class": per_class,
    "peak_cpu": detail["peak"]["cpu_per_fire"] * 1e6,
    "err": [detail["model_error_median"], detail["model_error_max"]],
}
print(json.dumps(out, indent=1))
