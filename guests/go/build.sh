#!/usr/bin/env bash
# Builds a Go reconciler (a package main that calls reconciled.Export) into a wasm component:
#
#   guests/go/build.sh <package dir> <out.wasm>
#
# 1. installs the tools once per version (tools.sh: wit-bindgen, wasm-tools, the WASI adapter);
# 2. checks that the committed bindings in internal/wit still match wit/ (bindings.sh --check);
# 3. builds the package with the standard Go toolchain as a WASI preview-1 reactor
#    (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared: no main runs; the host calls the exports);
# 4. embeds the `reconciler` world's WIT and makes a component (wasm-tools component embed and
#    component new, with wasmtime 48's preview-1 reactor adapter).
#
# Step 4 is skipped when the core module, the WIT and the tools are those of the last build of
# <out.wasm>. Progress goes to stderr.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: guests/go/build.sh <package dir> <out.wasm>" >&2
    exit 2
fi
pkg="$(cd "$1" && pwd)"
# Absolute: go build runs in the package's folder.
mkdir -p "$(dirname "$2")"
out="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if ! command -v go >/dev/null; then
    echo "guests/go/build.sh: go is not installed; Go guests need Go 1.25 or later" >&2
    exit 1
fi
eval "$("$here/tools.sh")"
export WIT_BINDGEN
"$here/bindings.sh" --check

name="$(basename "$out" .wasm)"
work="$(dirname "$out")/.$name.go"
mkdir -p "$work"
echo "guests/go/build.sh: go build $pkg" >&2
# -checklinkname=0: the bindings' runtime package reaches runtime.sbrk through go:linkname, to
# allocate for the host before the Go runtime is up.
(cd "$pkg" && GOOS=wasip1 GOARCH=wasm go build -trimpath -buildvcs=false -buildmode=c-shared \
    -ldflags=-checklinkname=0 -o "$work/core.wasm" .)

sum="$(cat "$work/core.wasm" "$root/wit/runtime.wit" "$WASI_ADAPTER" | sha256sum | cut -d' ' -f1)-$(basename "$(dirname "$(dirname "$WASM_TOOLS")")")"
stamp="$(dirname "$out")/.$(basename "$out").sum"
if [[ -f "$out" && "$(cat "$stamp" 2>/dev/null)" == "$sum" ]]; then
    echo "guests/go/build.sh: $(basename "$out") is up to date" >&2
    exit 0
fi
echo "guests/go/build.sh: componentizing into $(basename "$out")" >&2
"$WASM_TOOLS" component embed --world reconciler "$root/wit" "$work/core.wasm" -o "$work/embedded.wasm"
"$WASM_TOOLS" component new "$work/embedded.wasm" \
    --adapt "wasi_snapshot_preview1=$WASI_ADAPTER" -o "$out.tmp"
mv -f "$out.tmp" "$out"
echo "$sum" >"$stamp"
