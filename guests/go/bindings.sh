#!/usr/bin/env bash
# Generates the Go bindings of wit/ (world `reconciler`) into internal/wit, with wit-bindgen's
# `go` generator, or with --check only says whether the committed ones are current:
#
#   guests/go/bindings.sh           # regenerate internal/wit (after a change to wit/)
#   guests/go/bindings.sh --check   # exit 1, with a diff, when internal/wit is out of date
#
# Two changes are made to what the generator writes:
# - every file gets `//go:build wasip1`, so that `go vet ./...` and `go test ./...` run natively
#   (the bindings' //go:wasmimport functions compile only for wasm);
# - the export return area is allocated with its size rounded up to its alignment: wit-bindgen
#   0.61's Go generator takes the largest size and the largest alignment of all exports apart
#   (describe's 68-byte record, reconcile's 8-aligned result), and the runtime's Allocate
#   panics at init on a size that is not a multiple of the alignment ("size 68 is not
#   compatible with alignment 8").
#
# internal/wit/export_wit_world is written by hand (the exports' implementation) and left alone.
# Progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
check=false
case "${1:-}" in
    "") ;;
    --check) check=true ;;
    *) echo "usage: guests/go/bindings.sh [--check]" >&2; exit 2 ;;
esac

if [[ -z "${WIT_BINDGEN:-}" ]]; then
    eval "$("$here/tools.sh")"
fi

out="$(mktemp -d)"
trap 'rm -rf "$out" "$out.log"' EXIT
# It names every file it writes on stderr: kept for a failure only.
if ! "$WIT_BINDGEN" go --world reconciler --pkg-name reconciled.dev/guest/internal/wit \
    --out-dir "$out" "$root/wit" >"$out.log" 2>&1; then
    cat "$out.log" >&2
    exit 1
fi
for f in $(cd "$out" && find . -name '*.go' -o -name '*.s' | sort); do
    { printf '//go:build wasip1\n\n'; cat "$out/$f"; } >"$out/$f.tmp"
    mv "$out/$f.tmp" "$out/$f"
done
sed -i -E 's/witRuntime\.Allocate\(&staticPinner, (.+), ([0-9]+)\)\)$/witRuntime.Allocate(\&staticPinner, ((\1)+\2-1)\/\2*\2, \2))/' \
    "$out/wit_exports/wit_exports.go"
if ! grep -q 'Allocate(&staticPinner, ((' "$out/wit_exports/wit_exports.go"; then
    echo "guests/go/bindings.sh: the export return area line changed shape; see the comment at the top of this script" >&2
    exit 1
fi
gofmt -w "$out"

if $check; then
    if ! diff -r -x export_wit_world "$out" "$here/internal/wit" >&2; then
        echo "guests/go/bindings.sh: guests/go/internal/wit is out of date with wit/; run guests/go/bindings.sh" >&2
        exit 1
    fi
    exit 0
fi
# Everything but the hand-written export_wit_world is replaced.
find "$here/internal/wit" -mindepth 1 -maxdepth 1 -not -name export_wit_world -exec rm -rf {} +
cp -r "$out"/. "$here/internal/wit/"
echo "guests/go/bindings.sh: wrote guests/go/internal/wit" >&2
