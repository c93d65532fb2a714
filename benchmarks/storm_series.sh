#!/usr/bin/env bash
# A sitting of the storm model against the kit: several sampled bursts interleaved with the
# compared ones, then the profile from the sampled ones (docs/sim-storm.md):
#   bash benchmarks/storm_series.sh OUT_DIR [SAMPLED] [RUNS] [ARG ...]
# from the repository's root (the services import the kit from the working directory),
# with nothing else loading the machine. The sampled runs use py-spy: pip install -e '.[bench]'.
# 1. SAMPLED (default 3) calibration runs, each a burst sampled thread by thread
#    (benchmarks/burst_at_t.py, every 100 ms from T - 11 s to T + 6 s), interleaved with
#    2. RUNS (default 5) compared bursts, unsampled: s1 c1 s2 c2 s3 c3 c4 c5;
# 3. the profile from the sampled runs (cronfleet calibrate --only-worker-starts, one
#    --storm-cpu/--storm-at-t pair per sampled run: each storm key the median over them).
# Sampled runs are spread through the sitting so that one disturbed run (an autovacuum at
# T) moves one key of several, not the whole profile.
# ARGs after RUNS go to every burst, after its own (a small sitting for a test:
# `--jobs 200 --lead-s 16`; the sampler names the threads at T - 13 s).
set -u
OUT=$1
SAMPLED=${2:-3}
RUNS=${3:-5}
shift $(($# < 3 ? $# : 3))
EXTRA=("$@")
mkdir -p "$OUT"
snapshot() { { date -u +%FT%TZ; cat /proc/loadavg; ps -eo pid,pcpu,etime,args --sort=-pcpu | head -8; } >> "$OUT/machine.log"; }
pairs=()
for i in $(seq 1 $((SAMPLED > RUNS ? SAMPLED : RUNS))); do
  if [ "$i" -le "$SAMPLED" ]; then
    snapshot
    python benchmarks/burst_at_t.py --before 11 --after 6 --period-ms 100 \
      --out "$OUT/calibration$i" "${EXTRA[@]}" > "$OUT/calibration$i.txt" 2>&1
    pairs+=(--storm-cpu "$OUT/calibration$i/burst-1node.json"
            --storm-at-t "$OUT/calibration$i/all_at_t.json")
  fi
  if [ "$i" -le "$RUNS" ]; then
    snapshot
    python benchmarks/life_of_a_run.py --mode burst --jobs 50000 --workers 2 --concurrency 1024 \
      --out "$OUT/run$i" "${EXTRA[@]}" > "$OUT/run$i.log" 2>&1
  fi
done
snapshot
cp sim/profiles/default.toml "$OUT/profile.toml"
PYTHONPATH=$PWD python -m kit.cli calibrate --only-worker-starts "${pairs[@]}" \
  --out "$OUT/profile.toml" > "$OUT/calibrate.log" 2>&1
