#!/usr/bin/env bash
# The main job: a wasm reconciler converging a real (embedded, loopback) Kubernetes control plane.
#
# 1. builds the example reconciler (examples/configmap-generator) for wasm32-wasip2;
# 2. starts `reconciled run`, which starts an embedded kube-apiserver + etcd (no kubeconfig
#    given) and loads the guest;
# 3. installs the CRD and a sample ConfigMapGenerator with kubectl;
# 4. shows the ConfigMaps the guest generated. The host's log shows each reconcile;
# 5. delivers a second reconciler the way a tenant would, in a labelled ConfigMap, then swaps
#    it for a new version by editing the ConfigMap, and shows `reconciled status`.
# Ctrl-C stops everything. The demo always uses the embedded control plane, even with KUBECONFIG
# set; `reconciled run --kubeconfig …` runs against a real cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null 2>&1 || { echo "demo: \`go\` is not on PATH; install Go 1.26+: kube-apiserver is built from Go modules" >&2; exit 1; }
step() { printf '\n==> %s\n' "$*" >&2; }
fail() { echo "demo: $*" >&2; exit 1; }
# until SECONDS WHAT CMD...: runs CMD every 0.2 s until it succeeds; fails the demo, naming WHAT,
# if it has not after SECONDS.
until_ok() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within ${seconds}s"
    kill -0 "$host" 2>/dev/null || fail "$what: reconciled exited; its log is above"
    sleep 0.2
  done
}

step "building the control-plane binaries (once per machine) and the host"
# Cargo's progress goes to stderr: a fresh machine compiles for several minutes.
kubectl=$(cargo run -p testenv -- prepare control-plane | awk '$1 == "kubectl" {print $2}')
cargo build -p reconciled --bin reconciled

step "building the example reconciler (and the stamp guest) for wasm32-wasip2"
built=$(guests/build.sh)
wasm=$(grep configmap_generator.wasm <<<"$built")
stamp_v1=$(grep stamp_v1.wasm <<<"$built")
stamp_v2=$(grep stamp_v2.wasm <<<"$built")
ls -l "$wasm" >&2

# The status endpoint: the first free port from 18080.
port=18080
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done

workdir=$(mktemp -d)
kubeconfig="$workdir/kubeconfig"
step "starting reconciled (embedded control plane, guest $wasm)"
env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST target/debug/reconciled run --guest "$wasm" --configmaps --tenant-kinds v1/ConfigMap \
  --listen "127.0.0.1:$port" --write-kubeconfig "$kubeconfig" &
host=$!
trap 'kill -INT $host 2>/dev/null; wait $host 2>/dev/null; rm -rf "$workdir"' EXIT
until_ok 120 "the embedded control plane" test -s "$kubeconfig"
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

step "installing the ConfigMapGenerator CRD and a sample object"
k apply -f examples/configmap-generator/crd.yaml
k wait --for=condition=established --timeout=60s crd/configmapgenerators.example.reconciled.dev
k apply -f examples/configmap-generator/sample.yaml

step "waiting for the guest to converge"
generated() { [[ "$(k get configmapgenerator greeting -o jsonpath='{.status.generated}' 2>/dev/null)" == "3" ]]; }
until_ok 60 "the guest generating 3 ConfigMaps" generated
k get configmapgenerators
k get configmaps -l example.reconciled.dev/generator=greeting

step "a tenant delivers a reconciler in a ConfigMap (guest team-a/my-rec/rec)"
k create namespace team-a --dry-run=client -o yaml | k apply -f -
# The ServiceAccount the tenant's guests act as, with its Role and RoleBinding: what they may do.
k apply --server-side -n team-a -f deploy/tenant.yaml
until_ok 10 "the tenant's RoleBinding in effect" \
  k auth can-i list configmaps -n team-a --as system:serviceaccount:team-a:reconciled-guest
k -n team-a create configmap work --from-literal=v=1 --dry-run=client -o yaml \
  | k label --local -f - stamp.reconciled.dev/enabled=true -o yaml | k apply -f -
target/debug/reconciled pack "$stamp_v1" --name my-rec -n team-a --key rec | k apply --server-side -f -
stamped() { k -n team-a get configmap work -o jsonpath='{.metadata.annotations.stamp\.reconciled\.dev/seen}'; }
stamped_by() { [[ "$(stamped)" == "$1":* ]]; }
until_ok 30 "the tenant's guest (v1) stamping work" stamped_by v1
echo "work is stamped: $(stamped)" >&2

step "the tenant edits the ConfigMap: version 2 is swapped in between reconciles"
target/debug/reconciled pack "$stamp_v2" --name my-rec -n team-a --key rec | k apply --server-side -f -
until_ok 30 "version 2 stamping work" stamped_by v2
echo "work is stamped: $(stamped)" >&2
k -n team-a get events --field-selector involvedObject.name=my-rec
target/debug/reconciled status --addr "127.0.0.1:$port"

cat >&2 <<MSG

The guest generated the ConfigMaps above. Try:
  $kubectl --kubeconfig $kubeconfig patch configmapgenerator greeting --type merge -p '{"spec":{"copies":1}}'
  $kubectl --kubeconfig $kubeconfig get configmaps -l example.reconciled.dev/generator=greeting
and watch the reconciles in the log; http://127.0.0.1:$port/metrics and /status describe the
host. Ctrl-C stops the host and the control plane.
MSG
wait "$host"
