#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install cronfleet and its test
# dependencies, start the local stack (real PostgreSQL and Kafka), lint, test.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/unit -q`); without any,
# the run ends with the mutation of what the change touched.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

need_apt=()
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need_apt+=(maven)
# the console's browser test runs in Debian's Chromium (Playwright drives it)
[ -x /usr/bin/chromium ] || need_apt+=(chromium chromium-driver)
# the chaos drills cut a scheduler's link in a network namespace (ip, nftables) and skew
# clocks with libfaketime; a drill that cannot set up its fault fails, it never passes
# the http task's TLS test makes a self-signed certificate with openssl
command -v openssl >/dev/null || need_apt+=(openssl)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v nft >/dev/null || need_apt+=(nftables)
compgen -G "/usr/lib/*/faketime/libfaketimeMT.so.1" >/dev/null || need_apt+=(libfaketime)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing ${need_apt[*]} from Debian's packages (Kafka runs on Java; Maven fetches its jars; the console test needs a browser; the chaos drills need namespaces, nftables and libfaketime)"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
fi

echo "==> installing cronfleet with its test dependencies"
python3 -m pip install -q -e ".[dev]"

# checkov (terraform/'s security checks) pins libraries the project's own tools need newer
# (packaging, a fork of hcl2), so it lives in a virtualenv of its own, reused across runs.
CHECKOV_VENV="${CRONFLEET_HOME:-$HOME/.cronfleet}/tools/checkov-$(sha256sum terraform/checkov-requirements.txt | cut -c1-12)"
if [ ! -x "$CHECKOV_VENV/bin/checkov" ]; then
  echo "==> installing checkov into $CHECKOV_VENV"
  python3 -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/pip" install -q -r terraform/checkov-requirements.txt
fi
export CRONFLEET_CHECKOV="$CHECKOV_VENV/bin/checkov"

# OpenTofu (terraform/'s fmt and init checks in tests/deploy): built from its Go module once
# per version into $CRONFLEET_HOME/tools (about 10 minutes the first time), reused after.
TOFU_VERSION=1.10.6
TOFU="${CRONFLEET_HOME:-$HOME/.cronfleet}/tools/tofu-$TOFU_VERSION/tofu"
if [ ! -x "$TOFU" ]; then
  echo "==> building OpenTofu $TOFU_VERSION into $(dirname "$TOFU") (once)"
  bash scripts/build_tofu.sh "$TOFU_VERSION" "$TOFU"
fi
export CRONFLEET_TOFU="$TOFU"

echo "==> building the Go HTTP targets (loadtest/ledger, chaos/ledgerd)"
bash scripts/build_ledger.sh

echo "==> starting the local stack (PostgreSQL, Kafka)"
python3 -m kit.cli stack up

echo "==> ruff"
python3 -m ruff check .
python3 -m ruff format --check .

echo "==> mypy (strict on kit/core and sim/, pyproject.toml [tool.mypy])"
python3 -m mypy

echo "==> pytest"
python3 -m pytest --durations=30 "$@"

# The whole suite (no pytest arguments, as CI runs it): mutation testing of what the change
# touched (the kit/core modules and store files of the last commit, or of the branch since
# main), bounded in time; fails on a surviving mutant docs/testing.md does not list.
if [ "$#" -eq 0 ]; then
  echo "==> mutation of what the change touched (scripts/mutation.sh --changed, docs/mutation.md)"
  bash scripts/mutation.sh --changed
fi
