"""What the API's strict body parser (kit/api/body.py) costs over json.loads, on the
largest bodies the API takes: a batch of 5,000 jobs and a queue payload of 0.37 MB with
27,000 numbers. Every run of the series is printed, each with its baseline.

    python benchmarks/strict_json.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kit.api.body import loads_strict

JOB = {
    "name": "n",
    "schedule": {"cron": "*/5 * * * *", "timezone": "Europe/Paris"},
    "task": {
        "type": "http",
        "url": "https://example.org/hook",
        "method": "POST",
        "headers": {"X-A": "1", "X-B": "2"},
        "body": "x" * 200,
    },
    "retry": {"max_attempts": 5, "base_s": 2, "cap_s": 300},
    "priority": "high",
}


def bodies() -> dict[str, bytes]:
    batch = {"jobs": [dict(JOB, name=f"n{i}") for i in range(5000)]}
    payload = {"payload": {"rows": [[i, str(i) * 3, i / 7] for i in range(9000)]}}
    return {
        "batch of 5,000 jobs": json.dumps(batch).encode(),
        "queue payload": json.dumps(payload).encode(),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"command: python benchmarks/strict_json.py --runs {args.runs}")
    for name, raw in bodies().items():
        for run in range(1, args.runs + 1):
            started = time.perf_counter()
            json.loads(raw)
            base_ms = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            loads_strict(raw)
            strict_ms = (time.perf_counter() - started) * 1000
            print(
                f"{name} ({len(raw) / 1e6:.2f} MB) run {run}: json.loads {base_ms:.1f} ms, "
                f"loads_strict {strict_ms:.1f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
