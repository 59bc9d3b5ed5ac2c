#!/usr/bin/env bash
# Builds dev/{{name}}.wasm with the reconciled Go SDK's toolchain (go build for wasip1, then
# wasm-tools).
set -euo pipefail
cd "$(dirname "$0")"
"{{sdk}}/guests/go/build.sh" "$PWD" "$PWD/dev/{{name}}.wasm"
echo "built dev/{{name}}.wasm" >&2
