#!/usr/bin/env bash
# Builds dev/{{name}}.wasm with the reconciled Python SDK's toolchain (componentize-py).
set -euo pipefail
cd "$(dirname "$0")"
"{{sdk}}/guests/python/build.sh" "$PWD" app "$PWD/dev/{{name}}.wasm"
echo "built dev/{{name}}.wasm" >&2
