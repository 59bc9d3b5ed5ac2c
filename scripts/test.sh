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

# Each step is timed, and where the time went is printed at the end, passed or failed: the
# README's table of suite times is this summary, copied from a run.
started=$SECONDS
names=() took=() current="" current_started=$SECONDS
end_step() {
  if [ -n "$current" ]; then
    names+=("$current")
    took+=("$((SECONDS - current_started))")
  fi
  current=""
}
# step LABEL [WHAT]: LABEL names the step in the summary; WHAT says more as it starts.
step() {
  end_step
  current=$1 current_started=$SECONDS
  printf '\n==> %s (%ds)\n' "${2:-$1}" "$((SECONDS - started))" >&2
  background_progress
}
profile() {
  local status=$? i
  end_step
  stop_background
  mmss() { printf '%d:%02d' "$(($1 / 60))" "$(($1 % 60))"; }
  {
    printf '\ntest: where the time went (%s)\n' "$([ "$status" = 0 ] && echo passed || echo "FAILED, exit $status")"
    for i in "${!names[@]}"; do
      printf '  %6s  %s\n' "$(mmss "${took[$i]}")" "${names[$i]}"
    done
    printf '  %6s  total\n' "$(mmss "$((SECONDS - started))")"
  } >&2
}
# Tools and the control plane are built in the background (below), beside the steps that do not
# need them: fetching and building Go modules leaves a core idle as often as Rust builds do.
background_pid="" background_log="" background_ready="" background_took=""
background_progress() {
  [ -n "$background_pid" ] && [ -s "$background_log" ] || return 0
  printf '    (in the background: %s)\n' "$(tail -n 1 "$background_log" | cut -c1-150)" >&2
}
stop_background() {
  if [ -n "$background_pid" ] && kill -0 "$background_pid" 2>/dev/null; then
    kill -- "-$background_pid" 2>/dev/null || true
  fi
  if [ -n "$background_ready" ]; then
    names+=("control plane built (in the background, from the start)")
    took+=("$background_ready")
  fi
  if [ -n "$background_took" ]; then
    names+=("tools and control plane (in the background, from the start)")
    took+=("$background_took")
  fi
}
trap profile EXIT
need() {
  command -v "$1" >/dev/null 2>&1 || { echo "test: \`$1\` is not on PATH; $2" >&2; exit 1; }
}
# fault-injection lets tests make a host worker panic on purpose (tests/integration/worker_faults.rs);
# the shipped binary is built without it.
features=(--features reconciled/fault-injection)

need cargo "install Rust 1.95+ with rustup"
# The benchmarks have no tests (clippy checks them): linking their eighteen test binaries would
# only cost the test build a minute or more.
tests=(--workspace --exclude reconciled-bench "${features[@]}")
if $quick; then
  step "cargo fmt --check"
  cargo fmt --all --check
  step "clippy" "cargo clippy --all-targets -- -D warnings"
  cargo clippy --workspace --all-targets "${features[@]}" --quiet -- -D warnings
  step "unit tests" "unit tests (the library, the binary and tests/layout.rs)"
  cargo test "${tests[@]}" --lib --bins --test layout
  exit 0
fi

# CI checks out a new clone for every run on a machine it keeps: its build trees (the host's and
# the guests') stay in the machine's cache between runs, as the control-plane binaries do, so
# that a run rebuilds only what changed. Cargo's fingerprints decide what that is; delete the
# folder to reclaim its space. A developer's checkout keeps its own target/.
if [ "${CI:-}" = true ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  cache="${RECONCILED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/reconciled}"
  export CARGO_TARGET_DIR="$cache/ci-target"
  printf '==> build trees kept between CI runs in %s\n' "$CARGO_TARGET_DIR" >&2
fi
target_dir="${CARGO_TARGET_DIR:-$root/target}"

need go "install Go 1.26+: kube-apiserver is built from Go modules"
need node "install Node 20+ with npm: TypeScript guests are built with componentize-js"
need npm "install npm (with Node 20+): it installs the TypeScript guest toolchain"
need python3 "install Python 3.10+: Python guests are built with componentize-py"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  step "rustup target" "rustup target add wasm32-wasip2 (wasm guests)"
  rustup target add wasm32-wasip2
fi

# In the background, beside the steps that do not need them: the SBOM tools, then testenv,
# compiled as the test build compiles the workspace (cargo-auditable, the same features: the test
# build reuses all of it), then, once per machine and cached, the control plane (which the tests
# wait for), the Go guests' tools (which the guests step installs itself if it gets there first;
# a lock makes the other wait) and last the registry, oras, helm and Jaeger, which may go on
# building beside the tests (a test that needs one waits on its build's lock). In a process group
# of its own, so that a failing step stops it; its output in a log whose last line each step
# shows. It runs a copy of testenv: the test build replaces the original.
background_log="$target_dir/background-tools.log"
mkdir -p "$target_dir"
rm -f "$background_log".*
printf '\n==> in the background: the SBOM tools, testenv, the control-plane binaries, the Go guest tools, then the registry, helm and Jaeger (once per machine, then cached; log: %s)\n' \
  "$background_log" >&2
setsid bash -c 'log=$0 target_dir=$1 started=$SECONDS
  shift
  sbom_tools=$(scripts/sbom-tools.sh --tests) && eval "$sbom_tools" &&
    cargo auditable test --quiet "$@" --no-run --test control_plane &&
    cp "$target_dir/debug/testenv" "$log.testenv" &&
    "$log.testenv" prepare control-plane &&
    echo "$((SECONDS - started))" > "$log.control-plane" &&
    guests/go/tools.sh >/dev/null && "$log.testenv" prepare tools
  status=$?
  echo "$((SECONDS - started))" > "$log.took"
  exit $status' "$background_log" "$target_dir" "${tests[@]}" >"$background_log" 2>&1 &
background_pid=$!

step "wasm guests" "wasm guests (guests/build.sh: the SDK's test guests and the examples in Rust, TypeScript, Python and Go)"
# Built once here; the test binaries take the paths instead of running build.sh each.
RECONCILED_GUEST_WASMS="$(CARGO_TARGET_DIR="$target_dir/wasm-guests" guests/build.sh)"
export RECONCILED_GUEST_WASMS

step "podman and runc" "podman and runc (the image and its container test)"
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }
  else
    echo "test: ${missing[*]} missing; install them (Debian: apt-get update; apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi

step "cargo fmt --check"
cargo fmt --all --check
(cd guests && cargo fmt --all --check)
(cd examples/configmap-generator && cargo fmt --all --check)
(cd examples/reservation && cargo fmt --all --check)
(cd guests/go/adapter && cargo fmt --check)
unformatted="$(gofmt -l guests/go examples/configmap-generator-go examples/reservation-go)"
[ -z "$unformatted" ] || { echo "gofmt: these files need gofmt -w: $unformatted" >&2; exit 1; }

step "clippy" "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets "${features[@]}" --quiet -- -D warnings

step "doc" "cargo doc (warnings denied: a broken doc link fails)"
# The benchmarks' library only: documenting their seventeen binaries one by one took half
# this step, for pages no one reads (clippy checks them all the same).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --exclude reconciled-bench --no-deps --document-private-items --quiet
RUSTDOCFLAGS="-D warnings" cargo doc -p reconciled-bench --lib --no-deps --document-private-items --quiet

step "guest clippy and Rust SDK tests" "the guest workspaces: clippy for wasm32-wasip2, and the Rust SDK's own tests"
for ws in guests examples/configmap-generator examples/reservation; do
  (cd "$ws" && CARGO_TARGET_DIR="$target_dir/wasm-guests" \
    cargo clippy --workspace --all-targets --target wasm32-wasip2 --quiet -- -D warnings)
done
(cd guests && CARGO_TARGET_DIR="$target_dir/wasm-guests" cargo test -p reconciled-guest --quiet)

step "TypeScript, Python and Go SDK tests" "the TypeScript, Python and Go SDKs' own tests, and their examples' (no wasm, no cluster)"
guests/js/test.sh
guests/python/test.sh
guests/go/bindings.sh --check
(cd guests/go && go vet ./... && go test ./...)
for m in examples/configmap-generator-go examples/reservation-go guests/go/bench/typed; do
  (cd "$m" && go vet ./... && go test ./...)
done

step "test build" "cargo auditable test --no-run (the unit and integration test binaries, and the host binary the image is made of)"
# With cargo-auditable the host binary carries its crate list, so the image (next) is made of it
# with its SBOM rather than of a second, musl build of every crate. Both cargo test commands use
# it: one without would rebuild the workspace's crates.
sbom_tools=$(scripts/sbom-tools.sh --tests)
eval "$sbom_tools"
cargo auditable test "${tests[@]}" --no-run

# The suite's image is the test build's host binary (unoptimised, dynamically linked, with its
# shared libraries), not the static musl build of the `image` profile: what the container test
# proves (a binary on an empty root, run as the Deployment runs it, released, signed and verified
# with its SBOM) does not depend on optimisation or libc, and that build is minutes on two cores.
# scripts/release.sh builds released images, both platforms, static, and verifies its own
# manifest list.
export RECONCILED_IMAGE_BINARY="$target_dir/debug/reconciled"
step "image" "the image (scripts/image.sh --binary: the test build's host on an empty root, as deploy/ runs it)"
RECONCILED_IMAGE="$(scripts/image.sh)"
export RECONCILED_IMAGE

# background_failed: what the background printed last, and the reason; then exits.
background_failed() {
  tail -n 30 "$background_log" >&2
  echo "test: building the tools and the control plane failed; its last lines are above, the whole log in $background_log" >&2
  exit 1
}
step "control plane (waiting)" "waiting for the control-plane binaries (the registry, helm and Jaeger may go on building beside the tests)"
until [ -e "$background_log.control-plane" ] || ! kill -0 "$background_pid" 2>/dev/null; do
  sleep 1
done
if ! kill -0 "$background_pid" 2>/dev/null; then
  wait "$background_pid" || background_failed
  background_pid=""
fi
background_ready=$(cat "$background_log.control-plane")

# Most integration tests wait on the API server, on Leases or on a guest far more than they
# compute: four at a time keep two cores busy. Each isolates itself by namespace, and
# scripts/under-load.sh runs them so beside a busy loop on every core.
threads="${RECONCILED_TEST_THREADS:-4}"
step "tests" "cargo test (unit tests, then the integration tests against the loopback control plane, $threads at a time)"
cargo auditable test "${tests[@]}" -- --test-threads "$threads"

if [ -n "$background_pid" ]; then
  step "tools (waiting)" "waiting for the background's last builds"
  wait "$background_pid" || background_failed
  background_pid=""
fi
background_took=$(cat "$background_log.took")
grep -v "packages compiled" "$background_log" >&2 || true
