#!/usr/bin/env bash
# Mutation testing of kit/core (issue 15): mutmut mutates the pure core and judges each
# mutant by the core's unit and property tests only ([tool.mutmut] in pyproject.toml).
# CPU-heavy (tens of minutes on 2 cores): not part of scripts/test.sh. Result:
# docs/mutation.md.
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
# per module: every mutant counts; killed % is of ALL mutants (not checked = not killed)
lines = pathlib.Path("mutants/results.txt").read_text().splitlines()
by_module: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
for line in lines:
    m = re.match(r"\s*kit\.core\.(\w+)\.\S+: (.+)$", line)
    if m:
        by_module[m.group(1)][m.group(2).strip()] += 1
cols = ["killed", "survived", "no tests", "timeout", "not checked"]
print("| module | mutants | " + " | ".join(cols) + " | killed % |")
print("| --- | ---: | " + " | ".join("---:" for _ in cols) + " | ---: |")
total: collections.Counter[str] = collections.Counter()
for module in sorted(by_module):
    c = by_module[module]
    total.update(c)
    n = sum(c.values())
    caught = c["killed"] + c["timeout"]
    print(f"| {module} | {n} | " + " | ".join(str(c[k]) for k in cols) + f" | {caught / n:.1%} |")
n = sum(total.values())
caught = total["killed"] + total["timeout"]
print(f"| **all** | {n} | " + " | ".join(str(total[k]) for k in cols) + f" | **{caught / max(n, 1):.1%}** |")
other = {k: v for k, v in total.items() if k not in cols}
if other:
    print("other statuses:", other)
print(f"mutants {n}, killed (or timed out) {caught}: {caught / max(n, 1):.1%} of all;"
      f" not checked {total['not checked']}")
PY
