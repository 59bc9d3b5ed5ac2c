#!/usr/bin/env bash
# The main job: a wasm reconciler converging a real (embedded, loopback) Kubernetes control plane.
#
# 1. builds the example reconciler (examples/configmap-generator) for wasm32-wasip2;
# 2. starts `reconciled run`, which starts an embedded kube-apiserver + etcd (no kubeconfig
#    given) and loads the guest;
# 3. installs the CRD and a sample ConfigMapGenerator with kubectl;
# 4. shows the ConfigMaps the guest generated. The host's log shows each reconcile.
# Ctrl-C stops everything. The demo always uses the embedded control plane, even with KUBECONFIG
# set; `reconciled run --kubeconfig …` runs against a real cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null 2>&1 || { echo "demo: \`go\` is not on PATH; install Go 1.26+: kube-apiserver is built from Go modules" >&2; exit 1; }
step() { printf '\n==> %s\n' "$*" >&2; }

step "building the control-plane binaries (once per machine) and the host"
kubectl=$(cargo run --quiet -p testenv -- prepare | awk '$1 == "kubectl" {print $2}')
cargo build --quiet -p reconciled --bin reconciled

step "building the example reconciler for wasm32-wasip2"
wasm=$(guests/build.sh | grep configmap_generator.wasm)
ls -l "$wasm" >&2

workdir=$(mktemp -d)
kubeconfig="$workdir/kubeconfig"
step "starting reconciled (embedded control plane, guest $wasm)"
env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST target/debug/reconciled run --guest "$wasm" --write-kubeconfig "$kubeconfig" &
host=$!
trap 'kill -INT $host 2>/dev/null; wait $host 2>/dev/null; rm -rf "$workdir"' EXIT
for _ in $(seq 1 300); do
  [[ -s "$kubeconfig" ]] && break
  kill -0 "$host" 2>/dev/null || { echo "demo: reconciled exited before the control plane was ready" >&2; exit 1; }
  sleep 0.2
done
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

step "installing the ConfigMapGenerator CRD and a sample object"
k apply -f examples/configmap-generator/crd.yaml
k wait --for=condition=established --timeout=60s crd/configmapgenerators.example.reconciled.dev
k apply -f examples/configmap-generator/sample.yaml

step "waiting for the guest to converge"
for _ in $(seq 1 100); do
  [[ "$(k get configmapgenerator greeting -o jsonpath='{.status.generated}' 2>/dev/null)" == "3" ]] && break
  sleep 0.3
done
k get configmapgenerators
k get configmaps -l example.reconciled.dev/generator=greeting

cat >&2 <<MSG

The guest generated the ConfigMaps above. Try:
  $kubectl --kubeconfig $kubeconfig patch configmapgenerator greeting --type merge -p '{"spec":{"copies":1}}'
  $kubectl --kubeconfig $kubeconfig get configmaps -l example.reconciled.dev/generator=greeting
and watch the reconciles in the log. Ctrl-C stops the host and the control plane.
MSG
wait "$host"
