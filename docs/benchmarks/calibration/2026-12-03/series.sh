#!/usr/bin/env bash
# three calibrations, each alone under scripts/quiet, from the worktree's code
cd /work/wt-model
for i in 1 2 3; do
  cp /tmp/wtm/default.orig.toml /tmp/wtm/cal/run$i.toml
  echo "start run$i $(date -u +%FT%TZ)" >> /tmp/wtm/cal/progress.log
  PYTHONPATH=/work/wt-model scripts/quiet python -m kit.cli calibrate --keep-worker-starts --out /tmp/wtm/cal/run$i.toml > /tmp/wtm/cal/run$i.log 2>&1
  echo "rc=$?" >> /tmp/wtm/cal/run$i.log
  echo "end run$i $(date -u +%FT%TZ) $(tail -1 /tmp/wtm/cal/run$i.log)" >> /tmp/wtm/cal/progress.log
done
