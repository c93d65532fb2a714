#!/usr/bin/env bash
# The release artefact the fleet installs: the wheel of this commit and its SHA-256.
#
#   bash scripts/release.sh [--worktree] [--out DIR]
#
# writes DIR/cronfleet-<version>-py3-none-any.whl and DIR/<that>.sha256 (`sha256sum`
# format; DIR defaults to dist/). The wheel is built from the commit's files alone (git
# archive HEAD), or with --worktree from the work tree's tracked and new files (the
# deployment test's way), never from a `build/` a previous build left. Its file times are
# the commit's (SOURCE_DATE_EPOCH), so the same commit builds the same bytes. The Terraform
# examples upload it (terraform/modules/release) and every machine checks the hash.
set -euo pipefail
out=dist
from=commit
while [ $# -gt 0 ]; do
  case "$1" in
    --worktree) from=worktree ;;
    --out) out="$2"; shift ;;
    *) echo "usage: bash scripts/release.sh [--worktree] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."

src="$(mktemp -d)"
built="$(mktemp -d)"
trap 'rm -rf "$src" "$built"' EXIT
if [ "$from" = commit ]; then
  if ! git diff --quiet HEAD --; then
    echo "release: uncommitted changes are not in the wheel (--worktree takes them)" >&2
  fi
  git archive HEAD | tar -x -C "$src"
else
  git ls-files -z --cached --others --exclude-standard |
    tar --null -T - -c --ignore-failed-read 2>/dev/null | tar -x -C "$src"
fi
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
python3 -m pip wheel -q --no-deps --disable-pip-version-check -w "$built" "$src"
wheel="$(cd "$built" && ls cronfleet-*-py3-none-any.whl)"
mv "$built/$wheel" "$out/$wheel"
(cd "$out" && sha256sum "$wheel" >"$wheel.sha256")
echo "$out/$wheel"
echo "$out/$wheel.sha256: $(cut -d' ' -f1 "$out/$wheel.sha256")"
