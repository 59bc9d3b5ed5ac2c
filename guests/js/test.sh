#!/usr/bin/env bash
# Unit tests of the TypeScript SDK, with no wasm and no cluster:
#
#   guests/js/test.sh
#
# installs the pinned toolchain as build.sh does (npm ci, when the lockfile changed),
# type-checks the tests and their fake host (unit/tsconfig.json), bundles each unit/*.test.ts
# with the SDK, its `reconciled:runtime/*` imports answered by unit/fake (unit/bundle.mjs), and
# runs them with `node --test`.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
for tool in node npm; do
    if ! command -v "$tool" >/dev/null; then
        echo "guests/js/test.sh: $tool is not installed; the TypeScript SDK needs Node 20 or later with npm" >&2
        exit 1
    fi
done
lock_sum="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ "$(cat "$here/node_modules/.reconciled-lock" 2>/dev/null)" != "$lock_sum" ]]; then
    echo "guests/js/test.sh: installing the toolchain (npm ci)" >&2
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$lock_sum" >"$here/node_modules/.reconciled-lock"
fi

"$here/node_modules/.bin/tsc" -p "$here/unit/tsconfig.json" >&2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
(cd "$here" && node unit/bundle.mjs "$out")
node --test "$out"/*.test.mjs
