for i in 1 2; do
  (cd /work/main && scripts/quiet python /tmp/wtm/scan_only_old.py) > /tmp/wtm/ab_main$i.log 2>&1
  (cd /work/wt-model && PYTHONPATH=/work/wt-model scripts/quiet python /tmp/wtm/scan_only_new.py) > /tmp/wtm/ab_new$i.log 2>&1
done
