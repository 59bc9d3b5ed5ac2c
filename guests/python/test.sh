#!/usr/bin/env bash
# Unit tests of the Python SDK, with no wasm and no cluster:
#
#   guests/python/test.sh
#
# installs the pinned toolchain as build.sh does (requirements.txt into .venv, when it
# changed), has componentize-py write the real bindings for wit/ so that unit/test_bindings.py
# can hold the fake (unit/fake_wit.py) to their names and shapes, and runs unit/test_*.py with
# unittest under plain CPython, the SDK's imports answered by the fake.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if ! command -v python3 >/dev/null; then
    echo "guests/python/test.sh: python3 is not installed; the Python SDK needs Python 3.10 or later" >&2
    exit 1
fi
venv="$here/.venv"
req_sum="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
if [[ "$(cat "$venv/.reconciled-requirements" 2>/dev/null)" != "$req_sum" ]]; then
    echo "guests/python/test.sh: installing the toolchain into guests/python/.venv (componentize-py)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
    echo "$req_sum" >"$venv/.reconciled-requirements"
fi

bindings="$(mktemp -d)"
trap 'rm -rf "$bindings"' EXIT
# Relative to the root: componentize-py reads the WIT through its own paths.
(cd "$root" && "$venv/bin/componentize-py" -d wit -w reconciler bindings "$bindings" >&2)
cd "$here"
RECONCILED_PY_BINDINGS="$bindings" PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m unittest discover -s unit -t unit -v
