#!/usr/bin/env bash
# The main job on a fresh machine: a local control plane (etcd + kube-apiserver,
# built once from the Go module proxy), the operator's CRD/SCCs/RBAC, a
# prepared namespace, the operator itself (as its own ServiceAccount, in the
# foreground) and the basic sample, whose status and URL are printed.
#
# No kubelet or router runs here, so `tinycode-local simulate` reports the
# Deployment available and admits the Route, as they would.
#
# RUN_LOCAL_EXIT=1 exits once the sample is Running (for scripts and CI).
# PLATFORM=kubernetes runs the same demo on a plain Kubernetes API (no OpenShift
# stand-ins): the operator detects it and exposes the sample with an Ingress.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NS=tinycode-dev
SAMPLE=config/samples/tinycode_v1alpha1_basic.yaml
PLATFORM=${PLATFORM:-openshift}
case "$PLATFORM" in openshift | kubernetes) ;; *) printf 'run-local: PLATFORM must be openshift or kubernetes\n' >&2; exit 2 ;; esac
STATE=${TINYCODE_CLUSTER_DIR:-/tmp/tinycode-local-cluster}-run
mkdir -p "$STATE"

log() { printf 'run-local: %s\n' "$*" >&2; }

eval "$(hack/local-cluster.sh tools)"
eval "$(hack/local-cluster.sh start)"
log "building the operator and tinycode-local"
cargo build --quiet --workspace --bins
BIN=$ROOT/target/debug

if [[ "$PLATFORM" == kubernetes ]]; then
	# A control plane that served the OpenShift stand-ins before keeps them: drop them.
	"$TINYCODE_KUBECTL" delete crd routes.route.openshift.io securitycontextconstraints.security.openshift.io \
		--ignore-not-found >/dev/null
fi
log "installing ($PLATFORM) the CRD and RBAC; preparing namespace $NS"
"$BIN/tinycode-local" setup --platform "$PLATFORM" --namespace "$NS" --operator-kubeconfig "$STATE/operator.kubeconfig"

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$BIN/tinycode-local" simulate >"$STATE/simulate.log" 2>&1 &
pids+=($!)

log "starting the operator (logs: $STATE/operator.log)"
KUBECONFIG="$STATE/operator.kubeconfig" HELM_BIN="$TINYCODE_HELM" HELM_CHART_PATH="$ROOT/helm-charts/tinycode" \
	"$BIN/tinycode-operator" run >"$STATE/operator.log" 2>&1 &
op=$!
pids+=("$op")

if [[ "$PLATFORM" == kubernetes ]]; then
	# An Ingress needs a host name (a Route gets a default one).
	sed 's/^  tlsTermination: edge$/  hostname: my-tinycode.local.test/' "$SAMPLE" | "$TINYCODE_KUBECTL" apply -n "$NS" -f -
else
	"$TINYCODE_KUBECTL" apply -n "$NS" -f "$SAMPLE"
fi
log "waiting for $SAMPLE to be Running"
for _ in $(seq 1 120); do
	phase=$("$TINYCODE_KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)
	url=$("$TINYCODE_KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.status.url}' 2>/dev/null || true)
	current=$("$TINYCODE_KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.metadata.generation}={.status.observedGeneration}' 2>/dev/null || true)
	[[ "$phase" == Running && -n "$url" && "${current%%=*}" == "${current##*=}" ]] && break
	kill -0 "$op" 2>/dev/null || { log "the operator exited; last log lines:"; tail -20 "$STATE/operator.log" >&2; exit 1; }
	sleep 1
done
"$TINYCODE_KUBECTL" get tinycodeinstance -n "$NS"
if [[ "$phase" != Running ]]; then
	log "my-tinycode did not reach Running; operator log tail:"
	tail -20 "$STATE/operator.log" >&2
	exit 1
fi
printf 'URL: %s\n' "$url"
printf 'Status: %s\n' "$("$TINYCODE_KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}')"
if [[ "${RUN_LOCAL_EXIT:-0}" == 1 ]]; then
	exit 0
fi
log "operator running in the foreground (Ctrl-C stops it); try: KUBECONFIG=$KUBECONFIG $TINYCODE_KUBECTL get tinycodeinstances -A"
tail -f "$STATE/operator.log" &
pids+=($!)
wait "$op"
