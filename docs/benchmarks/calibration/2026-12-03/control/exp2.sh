for r in 1 2; do
  (cd /work/main && scripts/quiet python /tmp/wtm/scan_only_old.py) > /tmp/wtm/p_main$r.log 2>&1
  (cd /work/wt-model && PYTHONPATH=/work/wt-model scripts/quiet python /tmp/wtm/exp.py hourly,minute,sparse 1000) > /tmp/wtm/p_wtcron$r.log 2>&1
  (cd /work/wt-model && PYTHONPATH=/work/wt-model scripts/quiet python /tmp/wtm/exp.py hourly,minute,sparse,interval,one_off 500) > /tmp/wtm/p_wtall$r.log 2>&1
done
