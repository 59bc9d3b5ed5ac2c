#!/usr/bin/env bash
# Builds the wasm guests (the SDK, the test guests and the examples, in Rust, TypeScript, Python and Go) as
# components for wasm32-wasip2, into one shared target dir, and prints the path of each .wasm,
# one a line.
#
#   guests/build.sh                     # all of them
#   guests/build.sh --bench             # and the benchmark-only ones (stamp_big.wasm, ~12 MB;
#                                       # configmap_generator_go_typed.wasm, 16 MB)
#   CARGO_TARGET_DIR=/elsewhere guests/build.sh
#
# Progress goes to stderr; stdout holds only the paths, so that tests can read them (they find
# a guest by file stem: probe, stamp_v2, wrong_world, ...).
set -euo pipefail

bench=false
for arg in "$@"; do
    case "$arg" in
        --bench) bench=true ;;
        *)
            echo "build.sh: unknown argument $arg (usage: build.sh [--bench])" >&2
            exit 2
            ;;
    esac
done

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/wasm-guests}"
target=wasm32-wasip2
out="$CARGO_TARGET_DIR/$target/release"

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "build.sh: adding the $target target" >&2
    rustup target add "$target" >&2
fi

# The stamp (and hostile) variants all come out of cargo as stamp.wasm (hostile.wasm), each
# build overwriting the last, so two build.sh runs at once (test binaries in parallel) could copy
# each other's variant. One at a time per target dir.
mkdir -p "$CARGO_TARGET_DIR"
if command -v flock >/dev/null; then
    exec 9>"$CARGO_TARGET_DIR/.build-sh.lock"
    flock 9
fi

# Each workspace, and the cdylib crates it produces (lib names: dashes become underscores).
builds=(
    "$here:probe"
    # The same workspace again (cargo finds nothing to do): the line lists its second cdylib.
    "$here:chaos_bugs"
    "$root/examples/configmap-generator:configmap_generator"
    "$root/examples/reservation:reservation"
)
# Modules built against older reconciled:runtime versions are not built here: guests/compat/
# keeps each as the component it was, with its provenance.

# Test guests copied out of cargo's output under the name tests know: output, then cargo's name.
copies=(
    "wrong_world.wasm:wrong-world.wasm"
)

# Feature variants: output name, crate, then cargo features. `-p <crate>`, so only that crate
# recompiles; the workspace build already built the default one.
variants=(
    "stamp_v1:stamp:"
    "stamp_v2:stamp:v2"
    "stamp_trap:stamp:trap-describe"
    "stamp_greedy:stamp:greedy"
    "stamp_cluster:stamp:cluster-scoped"
    "stamp_burn:stamp:burn"
    "stamp_spin:stamp:spin"
    "stamp_mark:stamp:mark"
    "hostile_calls:hostile:"
    "hostile_map:hostile:map"
    "hostile_bad_namespace:hostile:describe-namespace"
    "hostile_bad_kind:hostile:describe-kind"
    "hostile_bad_selector:hostile:describe-selector"
    "hostile_bad_index:hostile:describe-index"
    "hostile_escalate:hostile:escalate"
)
if $bench; then
    variants+=("stamp_big:stamp:big")
fi

# Copies cargo's $1 to $2 (both in $out), through a temporary name and a rename, so that a
# reader never sees half a file. An identical copy is left alone (its mtime too).
copy_out() {
    local from="$out/$1" to="$out/$2"
    if cmp -s "$from" "$to"; then
        return
    fi
    cp "$from" "$out/.$2.tmp.$$"
    mv -f "$out/.$2.tmp.$$" "$to"
}

# The Rust guests are skipped as a whole when nothing they are built from changed since their
# last build into this target dir: cargo decides by file times, and a new clone (CI's) gives
# every file a new one, so its fat-LTO builds would all run again for nothing. The inputs: the
# content of every file of their workspaces and of wit/ (tracked, or new and not ignored), the
# list of builds, this script, the toolchain and the flags. Without git they are always built.
rust_inputs() {
    local files
    files=$(cd "$root" && git ls-files -z --cached --others --exclude-standard -- wit \
        examples/configmap-generator examples/reservation guests \
        ':!guests/js' ':!guests/python' ':!guests/go' ':!guests/compat' 2>/dev/null \
        | xargs -0 -r sha256sum 2>/dev/null) || return 0
    [ -n "$files" ] || return 0
    # The build list names folders by absolute path: relative to the checkout, so that another
    # clone of the same sources hashes alike.
    { rustc -vV; cargo -V; echo "${RUSTFLAGS:-} ${CARGO_ENCODED_RUSTFLAGS:-}"; cat "$0"
      printf '%s\n' "${builds[@]}" "${copies[@]}" "${variants[@]}" | sed "s|^$root/|./|"
      echo "$files"; } | sha256sum | cut -d' ' -f1
}
rust_up_to_date() {
    local build variant copy
    [ -n "$rust_sum" ] && [ "$(cat "$rust_stamp" 2>/dev/null)" = "$rust_sum" ] || return 1
    for build in "${builds[@]}"; do [ -f "$out/${build##*:}.wasm" ] || return 1; done
    for variant in "${variants[@]}"; do [ -f "$out/${variant%%:*}.wasm" ] || return 1; done
    for copy in "${copies[@]}"; do [ -f "$out/${copy%%:*}" ] || return 1; done
}
rust_stamp="$out/.rust-guests.sum"
rust_sum="$(rust_inputs)"

if rust_up_to_date; then
    echo "build.sh: the Rust guests are up to date (their sources are those of the last build)" >&2
else
    rm -f "$rust_stamp"
    for build in "${builds[@]}"; do
        dir="${build%%:*}"
        echo "build.sh: building $dir" >&2
        (cd "$dir" && cargo build --release --target "$target" >&2)
    done
    for copy in "${copies[@]}"; do
        copy_out "${copy#*:}" "${copy%%:*}"
    done
    for variant in "${variants[@]}"; do
        name="${variant%%:*}" rest="${variant#*:}"
        crate="${rest%%:*}" features="${rest#*:}"
        echo "build.sh: building $name ($crate, features: ${features:-default})" >&2
        (cd "$here" && cargo build --release --target "$target" -p "$crate" \
            ${features:+--features "$features"} >&2)
        copy_out "$crate.wasm" "$name.wasm"
    done
    # The same source with a different version string: identical files mean a copy went wrong.
    if cmp -s "$out/stamp_v1.wasm" "$out/stamp_v2.wasm"; then
        echo "build.sh: stamp_v1.wasm and stamp_v2.wasm are identical" >&2
        exit 1
    fi
    [ -z "$rust_sum" ] || echo "$rust_sum" >"$rust_stamp"
fi

# TypeScript guests: the SDK in guests/js, built by componentize-js (about 11 MB each).
ts_builds=(
    "$root/examples/configmap-generator-ts/src/index.ts:configmap_generator_ts"
    "$root/examples/reservation-ts/src/index.ts:reservation_ts"
    "$here/js/test/errors.ts:errors_ts"
)
for build in "${ts_builds[@]}"; do
    echo "build.sh: building ${build##*:} (TypeScript)" >&2
    "$here/js/build.sh" "${build%%:*}" "$out/${build##*:}.wasm"
done

# Python guests: the SDK in guests/python, built by componentize-py (about 18 MB each).
py_builds=(
    "$root/examples/configmap-generator-py:app:configmap_generator_py"
    "$root/examples/reservation-py:app:reservation_py"
    "$here/python/test:errors:errors_py"
)
for build in "${py_builds[@]}"; do
    dir="${build%%:*}" rest="${build#*:}"
    echo "build.sh: building ${rest#*:} (Python)" >&2
    "$here/python/build.sh" "$dir" "${rest%%:*}" "$out/${rest#*:}.wasm"
done

# Go guests: the SDK in guests/go, built with the standard Go toolchain (wasip1) and made into
# components by wasm-tools (about 4 MB each).
go_builds=(
    "$root/examples/configmap-generator-go:configmap_generator_go"
    "$root/examples/reservation-go:reservation_go"
    "$here/go/test/errors:errors_go"
)
# The example with k8s.io/api types instead of the SDK's own, for the languages benchmark (16 MB).
if $bench; then
    go_builds+=("$here/go/bench/typed:configmap_generator_go_typed")
fi
for build in "${go_builds[@]}"; do
    echo "build.sh: building ${build##*:} (Go)" >&2
    "$here/go/build.sh" "${build%%:*}" "$out/${build##*:}.wasm"
done

wasms=()
for build in "${ts_builds[@]}"; do
    wasms+=("${build##*:}.wasm")
done
for build in "${py_builds[@]}"; do
    wasms+=("${build##*:}.wasm")
done
for build in "${go_builds[@]}"; do
    wasms+=("${build##*:}.wasm")
done
for build in "${builds[@]}"; do
    wasms+=("${build##*:}.wasm")
done
for variant in "${variants[@]}"; do
    wasms+=("${variant%%:*}.wasm")
done
for copy in "${copies[@]}"; do
    wasms+=("${copy%%:*}")
done

for name in "${wasms[@]}"; do
    wasm="$out/$name"
    # A component starts with the wasm magic and version 0x0d 0x00 0x01 0x00 (layer 1); a core
    # module has version 1 0 0 0 instead.
    if [[ "$(head -c 8 "$wasm" | od -An -tx1 | tr -d ' \n')" != "0061736d0d000100" ]]; then
        echo "build.sh: $wasm is not a component" >&2
        exit 1
    fi
    echo "$wasm"
done
