#!/usr/bin/env bash
# The storm model's calibration and its comparison, in one sitting, alone on the machine:
#   scripts/quiet docs/benchmarks/storm_2core/2026-12-03/series.sh OUT_DIR [RUNS]
# from the worktree's root (the services import the kit from the working directory).
# The calibration run samples with py-spy: pip install -e '.[bench]' first.
# 1. the calibration run: a burst sampled thread by thread (benchmarks/burst_at_t.py,
#    every 100 ms from T - 11 s to T + 6 s), not one of the compared runs;
# 2. the profile from it (cronfleet calibrate --only-worker-starts: the worker's start,
#    fence and lag paths timed on kit.worker, the storm's steps from the sampled run);
# 3. RUNS (default 5) compared bursts, unsampled, one after the other.
set -u
OUT=$1
RUNS=${2:-5}
mkdir -p "$OUT"
snapshot() { { date -u +%FT%TZ; cat /proc/loadavg; ps -eo pid,pcpu,etime,args --sort=-pcpu | head -8; } >> "$OUT/machine.log"; }
snapshot
python benchmarks/burst_at_t.py --before 11 --after 6 --period-ms 100 --out "$OUT/calibration" \
  > "$OUT/calibration.txt" 2>&1
cp sim/profiles/default.toml "$OUT/profile.toml"
PYTHONPATH=$PWD python -m kit.cli calibrate --only-worker-starts \
  --storm-cpu "$OUT/calibration/burst-1node.json" --storm-at-t "$OUT/calibration/all_at_t.json" \
  --out "$OUT/profile.toml" > "$OUT/calibrate.log" 2>&1
for i in $(seq 1 "$RUNS"); do
  snapshot
  python benchmarks/life_of_a_run.py --mode burst --jobs 50000 --workers 2 --concurrency 1024 \
    --out "$OUT/run$i" > "$OUT/run$i.log" 2>&1
done
snapshot
