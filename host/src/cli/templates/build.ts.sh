#!/usr/bin/env bash
# Builds dev/{{name}}.wasm with the reconciled TypeScript SDK's toolchain (componentize-js).
set -euo pipefail
cd "$(dirname "$0")"
"{{sdk}}/guests/js/build.sh" "$PWD/src/index.ts" "$PWD/dev/{{name}}.wasm"
echo "built dev/{{name}}.wasm" >&2
