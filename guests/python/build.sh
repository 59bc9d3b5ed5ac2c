#!/usr/bin/env bash
# Builds a Python reconciler into a wasm component:
#
#   guests/python/build.sh <app dir> <module> <out.wasm>
#
# 1. installs the pinned toolchain (requirements.txt) into guests/python/.venv when it changed;
# 2. componentizes <module> (found in <app dir>, with this SDK, `reconciled_guest`, beside it)
#    against the `reconciler` world with componentize-py, which embeds CPython and snapshots
#    the interpreter after the module is imported.
#
# Skipped when the sources, the WIT and the toolchain are those of the last build of <out.wasm>.
# Progress goes to stderr.
set -euo pipefail

if [[ $# -ne 3 ]]; then
    echo "usage: guests/python/build.sh <app dir> <module> <out.wasm>" >&2
    exit 2
fi
app="$(cd "$1" && pwd)"
module="$2"
# Absolute: componentize-py runs in the SDK's folder.
mkdir -p "$(dirname "$3")"
out="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if ! command -v python3 >/dev/null; then
    echo "guests/python/build.sh: python3 is not installed; Python guests need Python 3.10 or later" >&2
    exit 1
fi
venv="$here/.venv"
req_sum="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ "$(cat "$venv/.reconciled-requirements" 2>/dev/null)" != "$req_sum" ]]; then
    echo "guests/python/build.sh: installing the toolchain into guests/python/.venv (componentize-py, about 50 MB)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
    echo "$req_sum" >"$venv/.reconciled-requirements"
fi

# Every .py of the app, subpackages included, in a stable order.
sources=$(cd "$app" && find . -name '*.py' -not -path '*/__pycache__/*' -not -path './.*' | LC_ALL=C sort)
sum="$( { cat "$root/wit/runtime.wit" "$here/reconciled_guest/"*.py
          for f in $sources; do printf '%s\n' "$f"; cat "$app/$f"; done; } | sha256sum | cut -d' ' -f1)-$req_sum"
stamp="$(dirname "$out")/.$(basename "$out").sum"
if [[ -f "$out" && "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
    echo "guests/python/build.sh: $(basename "$out") is up to date" >&2
    exit 0
fi
echo "guests/python/build.sh: componentizing $module into $(basename "$out")" >&2
# Relative to the root: componentize-py reads the WIT and sources through its own paths.
(cd "$root" && "$venv/bin/componentize-py" -d wit -w reconciler componentize "$module" \
    -p "$app" -p "$here" -o "$out.tmp" >&2)
mv -f "$out.tmp" "$out"
echo "$sum" >"$stamp"
