#!/usr/bin/env bash
# The main job: the top-of-hour capacity simulation (10 million schedules, 50,000
# runs/s at the peak) with the shipped calibration profile. Needs no services.
# Prints a short table and writes a Markdown report with plots to out/top-of-hour/.
# Extra arguments go to `cronfleet sim` (e.g. `--seed 7` or `--set workers=400`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

echo "==> installing cronfleet with the model (the sim extra)"
python3 -m pip install -q -e ".[sim]"

python3 -m kit.cli sim top-of-hour --out out/top-of-hour "$@"
echo "==> report: out/top-of-hour/report.md"
