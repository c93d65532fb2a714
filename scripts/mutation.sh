#!/usr/bin/env bash
# Mutation testing of kit/core (issue 15): mutmut mutates the pure core and judges each
# mutant by the core's unit and property tests only ([tool.mutmut] in pyproject.toml).
# CPU-heavy (tens of minutes on 2 cores): not part of scripts/test.sh; on a shared machine
# run it as `/work/tools/busy bash scripts/mutation.sh`. Result: docs/mutation.md.
#   bash scripts/mutation.sh [MAX_CHILDREN] [MUTANT_GLOB...]
#   MUTATION_TIMEOUT_S=1500 bash scripts/mutation.sh 2   # bounded; MUTATION_RESUME=1 goes on
set -euo pipefail
cd "$(dirname "$0")/.."
children="${1:-2}"
shift || true
# mutmut from the dev extra; installed only if missing (never re-points the editable
# install of the kit at this checkout: other checkouts on the machine share it)
python3 -c "import importlib.metadata as m; assert m.version('mutmut') == '3.8.1'" 2>/dev/null \
  || python3 -m pip install -q "mutmut==3.8.1"
if [ "$#" -eq 0 ] && [ -z "${MUTATION_RESUME:-}" ]; then rm -rf mutants; fi  # a full run starts clean
export HYPOTHESIS_PROFILE=cronfleet
# every property test at most this many examples per mutant (tests/conftest.py)
export CRONFLEET_HYPOTHESIS_MAX_EXAMPLES="${CRONFLEET_HYPOTHESIS_MAX_EXAMPLES:-100}"
# MUTATION_TIMEOUT_S bounds the run (on a shared machine); mutants not reached stay "not
# checked", and MUTATION_RESUME=1 runs them without starting over.
if [ -n "${MUTATION_TIMEOUT_S:-}" ]; then
  timeout --signal=INT --kill-after=30 "$MUTATION_TIMEOUT_S" \
    mutmut run --max-children "$children" "$@" || true
else
  mutmut run --max-children "$children" "$@" || true  # survivors make it exit non-zero
fi
mutmut results --all true > mutants/results.txt || true
python3 - <<'PY'
import collections, pathlib, re
lines = pathlib.Path("mutants/results.txt").read_text().splitlines()
status = collections.Counter()
for line in lines:
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m:
        status[m.group(2).strip()] += 1
total = sum(status.values())
killed = status.get("killed", 0)
print(dict(status))
caught = killed + status.get("timeout", 0)
judged = total - status.get("not checked", 0)
print(f"mutants {total}, judged {judged}, killed (or timed out) {caught}:"
      f" {caught / max(judged, 1):.1%} of those judged; not checked {total - judged}")
PY
