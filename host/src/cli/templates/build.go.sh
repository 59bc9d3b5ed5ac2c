#!/usr/bin/env bash
# Builds {{name}}.wasm into dev/ (or into $RECONCILED_OUT_DIR, which `reconciled dev --build .`
# sets) with the reconciled Go SDK's toolchain (go build for wasip1, then wasm-tools).
set -euo pipefail
cd "$(dirname "$0")"
out="${RECONCILED_OUT_DIR:-$PWD/dev}"
mkdir -p "$out"
# Built beside its place and renamed into it, so a watcher never reads half a module.
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
"{{sdk}}/guests/go/build.sh" "$PWD" "$tmp/{{name}}.wasm"
mv -f "$tmp/{{name}}.wasm" "$out/{{name}}.wasm"
echo "built $out/{{name}}.wasm" >&2
