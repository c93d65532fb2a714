#!/usr/bin/env bash
# The load tests at full size on this machine (docs/loadtest.md): a kit from
# `cronfleet run-all` (2 workers x 1024 slots, each claiming up to PREFETCH runs ahead of
# their second, an execution journal, loopback allowed for http tasks), then the phases
# asked for: noop (the storm suite 3 times in a row at 50,000 noop runs), http (once with
# http tasks at HTTP_JOBS), steady (2,000 runs/s for STEADY_S). Summaries land in OUT/<name>/.
# Usage: bash scripts/loadtest_full.sh [OUT] [noop|http|steady ...]   (default: all three)
# Run each phase alone on the machine: /work/tools/quiet bash scripts/loadtest_full.sh OUT noop
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-out/loadtest-full}"
shift || true
PHASES="${*:-noop http steady}"
NOOP_JOBS="${NOOP_JOBS:-50000}"
HTTP_JOBS="${HTTP_JOBS:-5000}"
STEADY_RATE="${STEADY_RATE:-2000}"
STEADY_S="${STEADY_S:-180}"
PREFETCH="${PREFETCH:-26000}"  # a worker's share of the 50,000 storm, claimed ahead
PORT="${PORT:-18090}"
mkdir -p "$OUT"
JOURNAL="$(mktemp -d /tmp/cf-journal.XXXXXX)"
export CRONFLEET_EXECUTION_JOURNAL_DIR="$JOURNAL" CRONFLEET_HTTP_ALLOW_HOSTS=127.0.0.1
python3 -m kit.cli run-all --workers 2 --concurrency 1024 --prefetch "$PREFETCH" \
  --api-port "$PORT" --metrics-base-port 0 > "$OUT/run-all.log" 2>&1 &
KIT=$!
trap 'kill -TERM $KIT 2>/dev/null; wait $KIT; rm -rf "$JOURNAL"' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 1; done
sleep 5  # the workers join their consumer groups
HOST="http://127.0.0.1:$PORT"
for phase in $PHASES; do
  case "$phase" in
    noop)
      for i in 1 2 3; do
        python3 -m loadtest storm --host "$HOST" --jobs "$NOOP_JOBS" --journal-dir "$JOURNAL" \
          --out "$OUT/storm-noop-$i" --loglevel WARNING > "$OUT/storm-noop-$i.txt" 2>&1
        echo "storm noop $i ($NOOP_JOBS runs) exit $?"
        sleep 5
      done ;;
    http)
      python3 -m loadtest storm --host "$HOST" --jobs "$HTTP_JOBS" --task http \
        --journal-dir "$JOURNAL" --drain-s 120 --out "$OUT/storm-http-$HTTP_JOBS" \
        --loglevel WARNING > "$OUT/storm-http-$HTTP_JOBS.txt" 2>&1
      echo "storm http ($HTTP_JOBS runs) exit $?" ;;
    steady)
      python3 -m loadtest steady --host "$HOST" --rate "$STEADY_RATE" --duration "$STEADY_S" \
        --journal-dir "$JOURNAL" --out "$OUT/steady" --loglevel WARNING > "$OUT/steady.txt" 2>&1
      echo "steady ($STEADY_RATE/s for $STEADY_S s) exit $?" ;;
    *) echo "unknown phase $phase (noop, http, steady)" >&2; exit 2 ;;
  esac
done
