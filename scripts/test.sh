#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what it needs, then runs every check.
# Integration tests start a real kube-apiserver and etcd on loopback; they fail, never skip,
# when that control plane cannot start.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "test: \`$1\` is not on PATH; $2" >&2; exit 1; }
}
need cargo "install Rust 1.95+ with rustup"
need go "install Go 1.26+: kube-apiserver is built from Go modules"
need node "install Node 20+ with npm: TypeScript guests are built with componentize-js"
need npm "install npm (with Node 20+): it installs the TypeScript guest toolchain"
need python3 "install Python 3.10+: Python guests are built with componentize-py"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  step "rustup target add wasm32-wasip2 (wasm guests)"
  rustup target add wasm32-wasip2
fi

step "control-plane and registry binaries (built once per machine, then cached)"
cargo run --quiet -p testenv -- prepare

step "wasm guests (guests/build.sh: the SDK's test guests and the examples in Rust, TypeScript and Python)"
# Built once here; the test binaries take the paths instead of running build.sh each.
RECONCILED_GUEST_WASMS="$(guests/build.sh)"
export RECONCILED_GUEST_WASMS

step "cargo fmt --check"
cargo fmt --all --check
(cd guests && cargo fmt --all --check)
(cd examples/configmap-generator && cargo fmt --all --check)

# fault-injection lets tests make a host worker panic on purpose (tests/worker_faults.rs); the
# shipped binary is built without it.
features=(--features reconciled/fault-injection)

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets "${features[@]}" --quiet -- -D warnings

step "cargo test"
cargo test --workspace "${features[@]}"
