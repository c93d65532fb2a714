#!/usr/bin/env bash
# The load tests at full size on this machine (docs/loadtest.md): a kit from
# `cronfleet run-all` on a database and run topics of its own (made here, dropped at the end,
# as benchmarks/life_of_a_run.py does; logs at WARNING) (2 workers x 1024 slots, each claiming up to PREFETCH runs ahead of
# their second, an execution journal, loopback allowed for http tasks), then the phases
# asked for: noop (the storm suite 3 times in a row at 50,000 noop runs), http (once with
# http tasks at HTTP_JOBS), steady (2,000 runs/s for STEADY_S). Summaries land in OUT/<name>/.
# Usage: bash scripts/loadtest_full.sh [OUT] [noop|http|steady ...]   (default: all three)
# STORM_ARGS="--schedule cron": the noop storms with hourly cron jobs instead of one-offs.
# Run each phase with nothing else loading the machine: its figures are the machine's.
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
TAG="$(date +%s)"
DB="cf_loadtest_$TAG"
PREFIX="cf_loadtest.$TAG"
export CRONFLEET_DATABASE_URL
CRONFLEET_DATABASE_URL="$(python3 -m scripts.fresh_database create "$DB")" || exit 2
export CRONFLEET_EXECUTION_JOURNAL_DIR="$JOURNAL" CRONFLEET_HTTP_ALLOW_HOSTS=127.0.0.1
export CRONFLEET_LOG_LEVEL=WARNING
python3 -m kit.cli run-all --workers 2 --concurrency 1024 --prefetch "$PREFETCH" \
  --topic-prefix "$PREFIX" --group-id "g-$PREFIX" --api-port "$PORT" \
  --metrics-base-port 0 > "$OUT/run-all.log" 2>&1 &
KIT=$!
trap 'kill -TERM $KIT 2>/dev/null; wait $KIT; rm -rf "$JOURNAL"; python3 -m scripts.fresh_database drop "$DB"' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 1; done
HOST="http://127.0.0.1:$PORT"
COMMON=(--host "$HOST" --journal-dir "$JOURNAL" --topic-prefix "$PREFIX" --loglevel WARNING)
# warm-up (not reported): 100 runs through the whole path, so topics, consumer groups and
# the database's caches are up, as benchmarks/life_of_a_run.py's warm_up does
python3 -m loadtest storm "${COMMON[@]}" --jobs 100 --target-p99 60 --out "$OUT/warm-up" \
  > "$OUT/warm-up.txt" 2>&1
echo "warm-up exit $?"
for phase in $PHASES; do
  case "$phase" in
    noop)
      for i in 1 2 3; do
        # shellcheck disable=SC2086  # STORM_ARGS: extra storm options, e.g. --schedule cron
        python3 -m loadtest storm "${COMMON[@]}" --jobs "$NOOP_JOBS" ${STORM_ARGS:-} \
          --out "$OUT/storm-noop-$i" > "$OUT/storm-noop-$i.txt" 2>&1
        echo "storm noop $i ($NOOP_JOBS runs) exit $?"
        sleep 5
      done ;;
    http)
      python3 -m loadtest storm "${COMMON[@]}" --jobs "$HTTP_JOBS" --task http --drain-s 120 \
        --out "$OUT/storm-http-$HTTP_JOBS" > "$OUT/storm-http-$HTTP_JOBS.txt" 2>&1
      echo "storm http ($HTTP_JOBS runs) exit $?" ;;
    steady)
      python3 -m loadtest steady "${COMMON[@]}" --rate "$STEADY_RATE" --duration "$STEADY_S" \
        --out "$OUT/steady" > "$OUT/steady.txt" 2>&1
      echo "steady ($STEADY_RATE/s for $STEADY_S s) exit $?" ;;
    *) echo "unknown phase $phase (noop, http, steady)" >&2; exit 2 ;;
  esac
done
