#!/usr/bin/env bash
# Builds the wasm guests (the SDK, the probe test guest and the examples) as components for
# wasm32-wasip2, into one shared target dir, and prints the path of each .wasm, one a line.
#
#   guests/build.sh                     # all of them
#   CARGO_TARGET_DIR=/elsewhere guests/build.sh
#
# Progress goes to stderr; stdout holds only the paths, so that tests can read them.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/wasm-guests}"
target=wasm32-wasip2

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "build.sh: adding the $target target" >&2
    rustup target add "$target" >&2
fi

# Each workspace, and the cdylib crates it produces (lib names: dashes become underscores).
builds=(
    "$here:probe"
    "$root/examples/configmap-generator:configmap_generator"
)

for build in "${builds[@]}"; do
    dir="${build%%:*}"
    echo "build.sh: building $dir" >&2
    (cd "$dir" && cargo build --release --target "$target" >&2)
done

out="$CARGO_TARGET_DIR/$target/release"
for build in "${builds[@]}"; do
    wasm="$out/${build##*:}.wasm"
    # A component starts with the wasm magic and version 0x0d 0x00 0x01 0x00 (layer 1); a core
    # module has version 1 0 0 0 instead.
    if [[ "$(head -c 8 "$wasm" | od -An -tx1 | tr -d ' \n')" != "0061736d0d000100" ]]; then
        echo "build.sh: $wasm is not a component" >&2
        exit 1
    fi
    echo "$wasm"
done
