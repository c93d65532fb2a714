#!/usr/bin/env bash
# The load tests at full size on this machine (docs/loadtest.md): a kit from
# `cronfleet run-all` (2 workers x 1024 slots, an execution journal, loopback allowed for
# http tasks), then the storm suite 3 times at 50,000 noop runs, once with http tasks at
# HTTP_JOBS, and the steady suite at 2,000 runs/s. Each summary lands in OUT/<name>/.
# Usage: bash scripts/loadtest_full.sh [OUT] (run it alone: /work/tools/quiet bash ...)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-out/loadtest-full}"
HTTP_JOBS="${HTTP_JOBS:-2000}"
STEADY_S="${STEADY_S:-180}"
PORT="${PORT:-18090}"
mkdir -p "$OUT"
JOURNAL="$(mktemp -d /tmp/cf-journal.XXXXXX)"
export CRONFLEET_EXECUTION_JOURNAL_DIR="$JOURNAL" CRONFLEET_HTTP_ALLOW_HOSTS=127.0.0.1
python3 -m kit.cli run-all --workers 2 --concurrency 1024 --api-port "$PORT" \
  --metrics-base-port 0 > "$OUT/run-all.log" 2>&1 &
KIT=$!
trap 'kill -TERM $KIT 2>/dev/null; wait $KIT; rm -rf "$JOURNAL"' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 1; done
sleep 5  # the workers join their consumer groups
HOST="http://127.0.0.1:$PORT"
for i in 1 2 3; do
  python3 -m loadtest storm --host "$HOST" --jobs 50000 --journal-dir "$JOURNAL" \
    --out "$OUT/storm-noop-$i" --loglevel WARNING | tee "$OUT/storm-noop-$i.txt" | head -3
  echo "storm noop $i exit ${PIPESTATUS[0]}"
  sleep 10
done
python3 -m loadtest storm --host "$HOST" --jobs "$HTTP_JOBS" --task http --journal-dir "$JOURNAL" \
  --drain-s 300 --out "$OUT/storm-http" --loglevel WARNING | head -3
echo "storm http exit ${PIPESTATUS[0]}"
sleep 10
python3 -m loadtest steady --host "$HOST" --rate 2000 --duration "$STEADY_S" \
  --journal-dir "$JOURNAL" --out "$OUT/steady" --loglevel WARNING | head -3
echo "steady exit ${PIPESTATUS[0]}"
