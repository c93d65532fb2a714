# issue 9's "no slower", sustained: baseline b8e513e and main alternated, 3 each
OUT=/work/main/docs/benchmarks/life_of_a_run/one-truth
run() { local kind=$1 src=$2 n=$3
  cd "$src"
  PYTHONPATH="$src" timeout 600 python benchmarks/life_of_a_run.py --mode sustain --rate 2000 --sustain-s 60 --workers 2 --concurrency 256 --out /tmp/sus9/tmp-s-$kind-$n > $OUT/sustain-$kind-$n.log 2>&1
  cp /tmp/sus9/tmp-s-$kind-$n/*sustain*.json $OUT/sustain-$kind-$n.json 2>/dev/null
  echo "sustain $kind $n rc=$? $(date -u +%T) $(git -C /work/main rev-parse --short HEAD)" >> $OUT/progress.log
}
for n in 2 3 4; do run base /tmp/base-src $n; run new /work/main $n; done
