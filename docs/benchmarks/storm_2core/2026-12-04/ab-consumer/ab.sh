#!/usr/bin/env bash
# A/B of the storm as run on 2026-12-04, 18:50-18:57 UTC, under scripts/quiet (this machine's
# paths): the code before the consumer change (8f8ae9e) and after (95cb7bb), alternated,
# unsampled bursts; the chaos stack's broker stopped first.
set -u
OUT=/tmp/ab; mkdir -p $OUT
(cd /work/main && python -c "from chaos.stack import ChaosStack, default_home; ChaosStack(default_home()).down()") >> $OUT/summary.txt 2>&1
sleep 30
for i in 1 2 3; do
  for arm in old new; do
    dir=/tmp/ab-$arm; [ $arm = new ] && dir=/tmp/sit8
    (cd $dir && PYTHONPATH=$dir python benchmarks/life_of_a_run.py --mode burst --jobs 50000 \
      --workers 2 --concurrency 1024 --out $OUT/$arm$i > $OUT/$arm$i.log 2>&1)
    echo "$arm$i $(date -u +%T) $(grep 'start lag' $OUT/$arm$i.log)" >> $OUT/summary.txt
  done
done
