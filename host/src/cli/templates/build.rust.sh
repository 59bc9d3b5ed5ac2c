#!/usr/bin/env bash
# Builds dev/{{name}}.wasm in the profile `reconciled dev dev --build .` rebuilds it in on every
# edit (release without link-time optimisation, incremental), so that the first edit there
# compiles this crate alone; `./build.sh --release` builds the release profile instead (smaller,
# slower to build), for what you publish.
set -euo pipefail
cd "$(dirname "$0")"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
profile=reconciled-dev
args=({{dev_profile}})
if [ "${1:-}" = --release ]; then
  profile=release
  args=(--release)
fi
cargo build --target wasm32-wasip2 "${args[@]}"
mkdir -p dev
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/$profile/{{crate}}.wasm" dev/.{{name}}.wasm.tmp
mv -f dev/.{{name}}.wasm.tmp dev/{{name}}.wasm
echo "built dev/{{name}}.wasm ($profile profile)" >&2
