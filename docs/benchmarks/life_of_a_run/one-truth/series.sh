#!/usr/bin/env bash
# issue 9's "no slower": the 50,000 burst and the sustained run, baseline (b8e513e, start of
# the session) and candidate (main HEAD) alternated, every run kept.
set -u
OUT=/tmp/speed; mkdir -p $OUT
run() { # kind src n mode
  local kind=$1 src=$2 n=$3 mode=$4
  cd "$src"
  if [ "$mode" = burst ]; then
    PYTHONPATH="$src" timeout 600 python benchmarks/life_of_a_run.py --mode burst --jobs 50000 --workers 2 --concurrency 1024 --out $OUT/tmp-$kind-$n > $OUT/burst-$kind-$n.log 2>&1
    cp $OUT/tmp-$kind-$n/*burst*.json $OUT/burst-$kind-$n.json 2>/dev/null
  else
    PYTHONPATH="$src" timeout 600 python benchmarks/life_of_a_run.py --mode sustain --rate 2000 --sustain-s 60 --workers 2 --concurrency 256 --out $OUT/tmp-s-$kind-$n > $OUT/sustain-$kind-$n.log 2>&1
    cp $OUT/tmp-s-$kind-$n/*sustain*.json $OUT/sustain-$kind-$n.json 2>/dev/null
  fi
  echo "$mode $kind $n rc=$? $(date -u +%T)" >> $OUT/progress.log
}
for n in 1 2 3; do
  run base /tmp/base-src $n burst
  run new /work/main $n burst
done
run base /tmp/base-src 1 sustain
run new /work/main 1 sustain
