"""`exp.py CLASSES WINDOW_MS`: the branch's scan measurement with only some job classes
and another scan window; prints each class's (CPU, database wait) per fire in µs."""

import json
import sys

import kit.calibrate as c
from kit.settings import load_settings

classes = sys.argv[1].split(",")
c.SCAN_WINDOW_MS = int(sys.argv[2])
c.JOB_CLASSES = {k: v for k, v in c.JOB_CLASSES.items() if k in classes}


def per_class(samples, empty, claims, statement):
    out = {}
    for k in c.JOB_CLASSES:
        mine = [s for s in samples if s.job_class == k]
        out[k] = (
            round(c._fit_raw([(s.fires, s.cpu_s) for s in mine])[1] * 1e6, 1),
            round(c._fit_raw([(s.fires, s.wait_s) for s in mine])[1] * 1e6, 1),
        )
    return out, {}


c._scan_numbers = per_class
print(sys.argv[1:], json.dumps(c.measure_scan(load_settings().database_url)[0]))
