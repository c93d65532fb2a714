#!/usr/bin/env bash
# Build the Go HTTP targets (standard library only): the load tests' ledger endpoint
# (loadtest/ledger/bin/ledger) and the soak's (chaos/ledgerd/bin/ledgerd). Uses the machine's Go toolchain; installs Debian's golang-go
# when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  else
    echo "==> installing golang-go from Debian's packages (the load tests' ledger endpoint)"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go
  fi
fi
(cd loadtest/ledger && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o bin/ledger .)
echo "loadtest/ledger/bin/ledger"
(cd chaos/ledgerd && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o bin/ledgerd .)
echo "chaos/ledgerd/bin/ledgerd"
