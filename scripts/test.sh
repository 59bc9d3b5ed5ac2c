#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what it needs, then runs every check.
# Integration tests start a real kube-apiserver and etcd on loopback; they fail, never skip,
# when that control plane cannot start.
#
#   scripts/test.sh           # everything, as CI runs it
#   scripts/test.sh --quick   # the edit loop: fmt, clippy and unit tests; no control plane,
#                             # no guests, no image
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

quick=false
case "${1:-}" in
  "") ;;
  --quick) quick=true ;;
  *) echo "test: unknown argument $1 (usage: scripts/test.sh [--quick])" >&2; exit 2 ;;
esac

started=$SECONDS
step() { printf '\n==> %s (%ds)\n' "$*" "$((SECONDS - started))" >&2; }
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "test: \`$1\` is not on PATH; $2" >&2; exit 1; }
}
# fault-injection lets tests make a host worker panic on purpose (tests/integration/worker_faults.rs);
# the shipped binary is built without it.
features=(--features reconciled/fault-injection)

need cargo "install Rust 1.95+ with rustup"
if $quick; then
  step "cargo fmt --check"
  cargo fmt --all --check
  step "cargo clippy --all-targets -- -D warnings"
  cargo clippy --workspace --all-targets "${features[@]}" --quiet -- -D warnings
  step "unit tests (the library, the binary and tests/layout.rs)"
  cargo test --workspace "${features[@]}" --lib --bins --test layout
  exit 0
fi

# CI checks out a new clone for every run on a machine it keeps: its build trees (the host's,
# the image's musl build, the guests') stay in the machine's cache between runs, as the
# control-plane binaries do, so that a run rebuilds only what changed. Cargo's fingerprints
# decide what that is; delete the folder to reclaim its space. A developer's checkout keeps
# its own target/.
if [ "${CI:-}" = true ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  cache="${RECONCILED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciled}"
  export CARGO_TARGET_DIR="$cache/ci-target"
  step "build trees kept between CI runs in $CARGO_TARGET_DIR"
fi
target_dir="${CARGO_TARGET_DIR:-$root/target}"

need go "install Go 1.26+: kube-apiserver is built from Go modules"
need node "install Node 20+ with npm: TypeScript guests are built with componentize-js"
need npm "install npm (with Node 20+): it installs the TypeScript guest toolchain"
need python3 "install Python 3.10+: Python guests are built with componentize-py"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  step "rustup target add wasm32-wasip2 (wasm guests)"
  rustup target add wasm32-wasip2
fi

step "control-plane, registry, helm and Jaeger binaries (built once per machine, then cached)"
cargo run --quiet -p testenv -- prepare

step "wasm guests (guests/build.sh: the SDK's test guests and the examples in Rust, TypeScript, Python and Go)"
# Built once here; the test binaries take the paths instead of running build.sh each.
RECONCILED_GUEST_WASMS="$(CARGO_TARGET_DIR="$target_dir/wasm-guests" guests/build.sh)"
export RECONCILED_GUEST_WASMS

step "podman, runc, musl-tools and the arm64 cross compiler (the images and their container test)"
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v musl-gcc >/dev/null 2>&1 || missing+=(musl-tools)
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
[ -s /usr/lib/aarch64-linux-musl/musl-gcc.specs ] || missing+=(musl-dev:arm64)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # musl-dev:arm64 is arm64's own package: dpkg must know the architecture first.
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }
  else
    echo "test: ${missing[*]} missing; install them (Debian: dpkg --add-architecture arm64; apt-get update; apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

step "the image (scripts/image.sh: a static binary on an empty root, as deploy/ runs it)"
RECONCILED_IMAGE="$(scripts/image.sh)"
export RECONCILED_IMAGE
step "the arm64 image (scripts/image.sh --arch arm64, cross-built; the release test lists it)"
scripts/image.sh --arch arm64 >/dev/null

step "cargo fmt --check"
cargo fmt --all --check
(cd guests && cargo fmt --all --check)
(cd examples/configmap-generator && cargo fmt --all --check)
(cd examples/reservation && cargo fmt --all --check)
(cd guests/go/adapter && cargo fmt --check)
unformatted="$(gofmt -l guests/go examples/configmap-generator-go examples/reservation-go)"
[ -z "$unformatted" ] || { echo "gofmt: these files need gofmt -w: $unformatted" >&2; exit 1; }

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets "${features[@]}" --quiet -- -D warnings

step "cargo doc (warnings denied: a broken doc link fails)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items --quiet

step "the guest workspaces: clippy for wasm32-wasip2, and the Rust SDK's own tests"
for ws in guests examples/configmap-generator examples/reservation; do
  (cd "$ws" && CARGO_TARGET_DIR="$target_dir/wasm-guests" \
    cargo clippy --workspace --all-targets --target wasm32-wasip2 --quiet -- -D warnings)
done
(cd guests && CARGO_TARGET_DIR="$target_dir/wasm-guests" cargo test -p reconciled-guest --quiet)

step "the TypeScript, Python and Go SDKs' own tests, and their examples' (no wasm, no cluster)"
guests/js/test.sh
guests/python/test.sh
guests/go/bindings.sh --check
(cd guests/go && go vet ./... && go test ./...)
for m in examples/configmap-generator-go examples/reservation-go guests/go/bench/typed; do
  (cd "$m" && go vet ./... && go test ./...)
done

step "cargo test"
cargo test --workspace "${features[@]}"
step "done"
