#!/usr/bin/env bash
# Builds dev/{{name}}.wasm. (`reconciled dev dev --build .` does this on every edit.)
set -euo pipefail
cd "$(dirname "$0")"
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
cargo build --release --target wasm32-wasip2
mkdir -p dev
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" dev/{{name}}.wasm.tmp
mv -f dev/{{name}}.wasm.tmp dev/{{name}}.wasm
echo "built dev/{{name}}.wasm" >&2
