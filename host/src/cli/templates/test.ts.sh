#!/usr/bin/env bash
# Type-checks the reconciler and runs its tests with node (the SDK's toolchain, no cluster).
set -euo pipefail
cd "$(dirname "$0")"
bin="{{sdk}}/guests/js/node_modules/.bin"
[[ -x "$bin/tsc" ]] || (cd "{{sdk}}/guests/js" && npm ci --no-audit --no-fund --loglevel=error >&2)
"$bin/tsc" -p tsconfig.json
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$bin/esbuild" test/*.test.ts --bundle --format=esm --platform=node --outdir="$out" --out-extension:.js=.mjs --log-level=warning
node --test "$out"/*.mjs
