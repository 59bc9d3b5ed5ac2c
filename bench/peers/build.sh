#!/usr/bin/env bash
# Builds the controller-runtime peer (bench/peers/controller-runtime) and prints the path of the
# binary on stdout; progress goes to stderr.
#
#   bench/peers/build.sh
#
# The binary is cached outside the source tree, as testenv caches kube-apiserver: under
# $RECONCILED_CACHE_DIR, else $XDG_CACHE_HOME/reconciled, else ~/.cache/reconciled, in
# peers/controller-runtime/<hash>/, where <hash> covers go.mod, go.sum and every *.go file of the
# peer (main.go, bench.go, ...), in name order. An edit to any of them, or a new or removed Go
# file, builds a new binary; an unchanged peer is not rebuilt, nor even handed to Go.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="$here/controller-runtime"

cache="${RECONCILED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciled}"
# Each file's name goes into the hash with its content, so that moving code from one file to
# another, or renaming one, still changes it. The glob sorts by LC_ALL=C, the same on every
# machine; a glob rather than find -printf or mapfile, which macOS's find and bash 3 lack.
hash="$(
    cd "$src"
    LC_ALL=C
    for f in go.mod go.sum *.go; do
        printf '%s\n' "$f"
        cat "$f"
    done | sha256sum | cut -c1-16
)"
dir="$cache/peers/controller-runtime/$hash"
bin="$dir/controller-runtime-peer"

if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

if ! command -v go >/dev/null; then
    echo "build.sh: the controller-runtime peer is written in Go, but \`go\` is not on PATH: install Go 1.26 or newer and retry" >&2
    exit 1
fi

mkdir -p "$dir"
# Two benches at once build once: the second waits here, then finds the binary.
if command -v flock >/dev/null; then
    exec 9>"$dir.lock"
    flock 9
    if [[ -x "$bin" ]]; then
        echo "$bin"
        exit 0
    fi
fi

echo "build.sh: building the controller-runtime peer into $dir (the first build downloads modules through the Go module proxy)" >&2
started=$SECONDS
# Into a temporary name and renamed, so nobody ever runs half a binary.
(cd "$src" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -o "$bin.tmp.$$" . >&2)
mv -f "$bin.tmp.$$" "$bin"
echo "build.sh: built $bin in $((SECONDS - started)) s" >&2
echo "$bin"
