"""`python -m loadtest SUITE --host URL --out DIR [suite and Locust options]`

Runs Locust headless with the suite's file and user count, writing Locust's CSV
(`DIR/locust_*.csv`) and HTML report (`DIR/locust.html`) beside the suite's
`summary.md`, `summary.json` and plots. Exits with the suite's verdict (0 pass, 1 fail,
2 the test could not be run as asked). Anything after the suite's own options goes to
Locust as is (e.g. `--loglevel WARNING`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITES = {
    "storm": "storm.py",
    "steady": "steady.py",
    "api": "api_mix.py",
    "queue": "task_queue.py",
    "noisy": "noisy_tenant.py",
}


def _users(suite: str, rest: list[str]) -> list[str]:
    """-u/-r for the suite when not given: the queue's users are its producers, pull
    workers and one monitor; storm and steady are one user that drives the test."""
    if any(a in ("-u", "--users") for a in rest):
        return []
    if suite == "queue":
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument("--producers", type=int, default=4)
        parser.add_argument("--consumers", type=int, default=8)
        known, _ = parser.parse_known_args(rest)
        users = known.producers + known.consumers + 1
        return ["-u", str(users), "-r", str(users)]
    if suite == "api":
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument("--api-users", type=int, default=20)
        known, _ = parser.parse_known_args(rest)
        return ["-u", str(known.api_users), "-r", str(known.api_users)]
    if suite == "noisy":
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument("--calm-users", type=int, default=10)
        parser.add_argument("--noisy-users", type=int, default=4)
        known, _ = parser.parse_known_args(rest)
        users = known.calm_users + known.noisy_users
        return ["-u", str(users), "-r", str(users)]
    return ["-u", "1", "-r", "1"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--host", default="http://127.0.0.1:8080", help="the kit's API")
    parser.add_argument("--out", default="", help="directory for CSV, HTML, summary, plots")
    args, rest = parser.parse_known_args(argv)
    out = Path(args.out or f"out/loadtest/{args.suite}")
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(HERE / SUITES[args.suite]),
        "--headless",
        "--host",
        args.host,
        "--csv",
        str(out / "locust"),
        "--html",
        str(out / "locust.html"),
        "--summary-dir",
        str(out),
        "--only-summary",
        *_users(args.suite, rest),
        *rest,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE.parent), env.get("PYTHONPATH", "")) if p
    )
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
