#!/usr/bin/env bash
# Builds {{name}}.wasm into dev/ (or into $RECONCILED_OUT_DIR, which `reconciled dev --build .`
# sets) with the reconciled Python SDK's toolchain (componentize-py).
set -euo pipefail
cd "$(dirname "$0")"
out="${RECONCILED_OUT_DIR:-$PWD/dev}"
# Built in a folder of its own beside its place, always the same one, so that the SDK finds
# its last build there and, when nothing it reads changed, keeps it as it is (componentize-py
# does not give the same bytes twice); then copied into place and renamed, so a watcher never
# reads half a module, and only when it changed.
build="$out/.{{name}}.build"
mkdir -p "$build"
"{{sdk}}/guests/python/build.sh" "$PWD" app "$build/{{name}}.wasm"
if ! cmp -s "$build/{{name}}.wasm" "$out/{{name}}.wasm"; then
  cp "$build/{{name}}.wasm" "$build/.{{name}}.wasm.tmp"
  mv -f "$build/.{{name}}.wasm.tmp" "$out/{{name}}.wasm"
  echo "built $out/{{name}}.wasm" >&2
else
  echo "$out/{{name}}.wasm is up to date" >&2
fi
