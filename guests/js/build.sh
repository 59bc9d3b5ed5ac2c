#!/usr/bin/env bash
# Builds a TypeScript reconciler into a wasm component:
#
#   guests/js/build.sh <entry.ts> <out.wasm>
#
# 1. installs the pinned toolchain (npm ci, from package-lock.json) when the lockfile changed;
# 2. checks that src/generated still matches wit/ (jco guest-types), then type-checks the SDK
#    and every TypeScript example (tsc);
# 3. bundles the entry with the SDK into one ES module (esbuild; the WIT imports stay imports);
# 4. componentizes it against the `reconciler` world (componentize-js, through jco), without
#    wasi:http or fetch-event, which the host does not provide.
#
# Step 4 takes about half a minute, so it is skipped when the bundle, the WIT and the toolchain
# are those of the last build of <out.wasm>. Progress goes to stderr.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: guests/js/build.sh <entry.ts> <out.wasm>" >&2
    exit 2
fi
entry="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
# Absolute: jco runs in the SDK's folder.
mkdir -p "$(dirname "$2")"
out="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

for tool in node npm; do
    if ! command -v "$tool" >/dev/null; then
        echo "guests/js/build.sh: $tool is not installed; TypeScript guests need Node 20 or later with npm" >&2
        exit 1
    fi
done

lock_sum="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ "$(cat "$here/node_modules/.reconciled-lock" 2>/dev/null)" != "$lock_sum" ]]; then
    echo "guests/js/build.sh: installing the toolchain (npm ci; about 200 MB the first time)" >&2
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$lock_sum" >"$here/node_modules/.reconciled-lock"
fi
bin="$here/node_modules/.bin"

# jco reads the WIT through its own WASI sandbox, which sees paths relative to the working dir.
generated="$(mktemp -d)"
trap 'rm -rf "$generated"' EXIT
(cd "$root" && "$bin/jco" guest-types wit --world-name reconciler -o "$generated" >/dev/null)
if ! diff -r "$generated" "$here/src/generated" >&2; then
    echo "guests/js/build.sh: guests/js/src/generated is out of date with wit/; run (cd guests/js && npm run types)" >&2
    exit 1
fi
echo "guests/js/build.sh: type-checking the SDK and the TypeScript examples" >&2
"$bin/tsc" -p "$here/tsconfig.json" >&2

bundle="$out.js"
# Projects outside this repository (`reconciled new --lang ts`) import the SDK as
# 'reconciled-guest'.
# From the SDK's folder: the bundle names its sources relative to where esbuild runs, and must
# not change with the caller's (its hash is what says a build is up to date).
(cd "$here" && "$bin/esbuild" "$entry" --bundle --format=esm --platform=neutral \
    --alias:reconciled-guest="$here/src/index.ts" \
    --external:'reconciled:runtime/*' --outfile="$bundle" --log-level=warning >&2)
sum="$(cat "$bundle" "$root/wit/runtime.wit" | sha256sum | cut -d' ' -f1)-$lock_sum"
stamp="$(dirname "$out")/.$(basename "$out").sum"
if [[ -f "$out" && "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
    echo "guests/js/build.sh: $(basename "$out") is up to date" >&2
    exit 0
fi
echo "guests/js/build.sh: componentizing $(basename "$entry") into $(basename "$out") (about 30 s)" >&2
(cd "$root" && "$bin/jco" componentize "$bundle" --wit wit -n reconciler \
    -d http -d fetch-event -o "$out.tmp" >&2)
mv -f "$out.tmp" "$out"
echo "$sum" >"$stamp"
