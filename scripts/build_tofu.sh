#!/usr/bin/env bash
# OpenTofu, the Terraform the tests check terraform/ with (fmt, init up to the providers,
# every module loaded), built from its Go module: no binary download, only the Go module
# proxy. `bash scripts/build_tofu.sh VERSION OUT` writes OUT (the tofu binary).
#
# The module's go.mod has replace directives, so `go install ...@VERSION` refuses it:
# its source is fetched with `go mod download` and built in a copy. About 10 minutes on
# the 2-core development machine with an empty Go cache; scripts/test.sh keeps the result
# by version in $CRONFLEET_HOME/tools and builds it once.
set -euo pipefail
version="${1:?usage: build_tofu.sh VERSION OUT}"
out="${2:?usage: build_tofu.sh VERSION OUT}"
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null || { echo "build_tofu: needs Go (https://go.dev/dl, or your distribution's golang package, 1.24 or newer)" >&2; exit 1; }
dir="$(go mod download -json "github.com/opentofu/opentofu@v$version" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
cp -r "$dir/." "$src"
chmod -R u+w "$src"
mkdir -p "$(dirname "$out")"
(cd "$src" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$out.part" ./cmd/tofu)
mv "$out.part" "$out"
"$out" version | head -1
