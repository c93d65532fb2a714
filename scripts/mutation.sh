#!/usr/bin/env bash
# Mutation testing: mutmut 3.8.1 over kit/core (each module judged by the tests that
# import it: scripts/mutation_run.py), and the store's SQL guards mutated by hand
# (tests/plants.py GUARDS, judged by the contract and store tests: python -m scripts.plants).
#
#   bash scripts/mutation.sh [MAX_CHILDREN]           # everything, from a clean mutants/;
#                                                     # the score into docs/testing.md
#   bash scripts/mutation.sh --changed [MAX_CHILDREN] # what the change touched (CI): its
#                                                     # kit/core modules and its store files,
#                                                     # bounded by MUTATION_TIMEOUT_S (240);
#                                                     # fails on a survivor the page lacks
#   MUTATION_RESUME=1 bash scripts/mutation.sh [MAX_CHILDREN] NAME...  # re-judge mutants
#
# The guards need the local stack (PostgreSQL, Kafka); MUTATION_NO_GUARDS=1 leaves them out.
set -euo pipefail
cd "$(dirname "$0")/.."
changed=""
if [ "${1:-}" = "--changed" ]; then changed=1; shift; fi
children="${1:-2}"
shift || true
# mutmut from the dev extra; installed only if missing (never re-points the editable
# install of the kit at this checkout: other checkouts on the machine share it)
python3 -c "import importlib.metadata as m; assert m.version('mutmut') == '3.8.1'" 2>/dev/null \
  || python3 -m pip install -q "mutmut==3.8.1"
export HYPOTHESIS_PROFILE=cronfleet
# every property test at most this many examples per mutant (tests/conftest.py)
export CRONFLEET_HYPOTHESIS_MAX_EXAMPLES="${CRONFLEET_HYPOTHESIS_MAX_EXAMPLES:-100}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

bounded() {  # run "$@" for at most $1 seconds (none: unbounded); mutants not reached stay
  local limit="$1"; shift  # "not checked", and MUTATION_RESUME=1 runs them later
  if [ -n "$limit" ]; then
    timeout --signal=INT --kill-after=30 "$limit" "$@" || true
  else
    "$@" || true
  fi
}

if [ -n "$changed" ]; then
  limit="${MUTATION_TIMEOUT_S:-240}"
  mapfile -t found < <(python3 -m scripts.mutation_run changed)
  base="${found[0]:-}" modules="${found[1]:-}"
  if [ -z "$base" ]; then
    echo "mutation: nothing to compare with (a single commit): nothing to mutate"
    exit 0
  fi
  stores=$(git diff --name-only "$base" HEAD -- kit/store | tr '\n' ',' | sed 's/,$//')
  echo "mutation: the change since ${base:0:12}: kit/core modules [${modules}], store files [${stores}]"
  status=0
  if [ -n "$modules" ]; then
    rm -rf mutants
    started=$(date +%s)
    bounded "$limit" python3 -m scripts.mutation_run run --max-children "$children" --modules "$modules"
    python3 -m scripts.mutation_report --check ${modules//,/ } || status=1
    limit=$(( limit - ($(date +%s) - started) ))
  fi
  if [ -n "$stores" ] && [ -z "${MUTATION_NO_GUARDS:-}" ] && [ "$limit" -gt 0 ]; then
    python3 -m scripts.plants --guards --files "$stores" --budget-s "$limit" || status=1
  fi
  exit $status
fi

if [ "$#" -eq 0 ] && [ -z "${MUTATION_RESUME:-}" ]; then rm -rf mutants; fi  # a full run starts clean
bounded "${MUTATION_TIMEOUT_S:-}" python3 -m scripts.mutation_run run --max-children "$children" "$@"
python3 -m scripts.mutation_report --write
if [ -z "${MUTATION_NO_GUARDS:-}" ] && [ "$#" -eq 0 ]; then
  python3 -m scripts.plants --guards --write
fi
