#!/usr/bin/env bash
# The main job. For now: start the embedded local control plane and print how to reach it.
# Stops cleanly on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null 2>&1 || { echo "demo: \`go\` is not on PATH; install Go 1.26+: kube-apiserver is built from Go modules" >&2; exit 1; }
cargo run --quiet -p testenv -- prepare >/dev/null
exec cargo run --quiet -p testenv -- up
