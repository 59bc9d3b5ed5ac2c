#!/usr/bin/env bash
# Installs the tools that turn a Go package into a reconciler component, once per version, into
# ~/.cache/reconciled/tools/<tool>-<version> (or $RECONCILED_TOOLS_DIR/<tool>-<version>), and
# prints their paths as shell assignments:
#
#   eval "$(guests/go/tools.sh)"   # WIT_BINDGEN=... WASM_TOOLS=... WASI_ADAPTER=...
#
# - wit-bindgen (wit-bindgen-cli, only its `go` generator): the Go bindings of wit/. The same
#   release as the Rust SDK's wit-bindgen crate, so both SDKs read the WIT alike.
# - wasm-tools: `component embed` and `component new`. 1.258.x: the wit-component release that
#   wit-bindgen 0.61 itself is built on.
# - the WASI preview-1 reactor adapter of wasmtime 48 (the host's), written out of the crate
#   wasi-preview1-component-adapter-provider by guests/go/adapter: `go build` makes a wasip1
#   module, and the adapter maps its WASI calls onto the WASI 0.2 imports the host links.
#
# Everything is built from crates.io with `cargo install --locked`, into one build tree so that
# the crates wit-bindgen and wasm-tools share are compiled once; the first run takes several
# minutes, later runs only check that the files are there. Progress goes to stderr.
#
# The folder is the machine's, not a host's: RECONCILED_CACHE_DIR (where a host keeps compiled
# modules, which tests set per test) does not move it, so the tools are never installed twice.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${RECONCILED_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciled/tools}"

wit_bindgen_version=0.61.1
wasm_tools_version=1.258.3
adapter_version=48.0.8

if ! command -v cargo >/dev/null; then
    echo "guests/go/tools.sh: cargo is not installed; the Go guest tools are built with Rust's cargo" >&2
    exit 1
fi
mkdir -p "$cache"
# Two builds at once (test binaries in parallel) would install into the same folder.
if command -v flock >/dev/null; then
    exec 8>"$cache/.go-tools.lock"
    flock 8
fi

# install <dir name> <binary> <cargo install arguments...>: skipped when the binary is there.
install() {
    local dir="$cache/$1" bin="$2"
    shift 2
    if [[ -x "$dir/bin/$bin" ]]; then
        return
    fi
    echo "guests/go/tools.sh: installing $bin into $dir (cargo install; minutes, once)" >&2
    # Into a temporary root first: an interrupted install must not look finished.
    rm -rf "$dir.tmp"
    CARGO_TARGET_DIR="$cache/.build" cargo install --locked --quiet --root "$dir.tmp" "$@" >&2
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
}

install "wit-bindgen-cli-$wit_bindgen_version" wit-bindgen \
    wit-bindgen-cli --version "$wit_bindgen_version" --no-default-features --features go
install "wasm-tools-$wasm_tools_version" wasm-tools \
    wasm-tools --version "$wasm_tools_version" --no-default-features \
    --features component,validate,print,metadata,strip

adapter_dir="$cache/wasi-adapter-$adapter_version"
adapter="$adapter_dir/wasi_snapshot_preview1.reactor.wasm"
if [[ ! -f "$adapter" ]]; then
    # Built outside the source tree: a --path install would use adapter/target.
    install "wasi-adapter-$adapter_version" write-wasi-adapter --path "$here/adapter"
    "$adapter_dir/bin/write-wasi-adapter" "$adapter"
fi
rm -rf "$cache/.build"

printf "WIT_BINDGEN=%q\n" "$cache/wit-bindgen-cli-$wit_bindgen_version/bin/wit-bindgen"
printf "WASM_TOOLS=%q\n" "$cache/wasm-tools-$wasm_tools_version/bin/wasm-tools"
printf "WASI_ADAPTER=%q\n" "$adapter"
