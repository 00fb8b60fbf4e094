#!/usr/bin/env bash
# The main job on a fresh machine: a local cluster with a real node
# (hack/local-cluster.sh --node: etcd, kube-apiserver, scheduler,
# controller-manager, kube-proxy, a kubelet over containerd, CNI, DNS, volumes,
# NetworkPolicy and a registry, in a network namespace of their own, every
# binary built once from the Go module proxy), the operator image (`make image`)
# pushed to the node's registry and installed by hack/install.sh, a prepared
# namespace and the basic sample, whose pod really starts and becomes Ready by
# its probes before its status and URL are printed.
#
# The tinycode image is the stand-in of tools/standins (the node has no way to
# the internet): the node's registry serves it under the sample's own name.
# The node runs a real ingress controller (Traefik, namespace tinycode-ingress),
# published on 127.0.0.1:8443 (TINYCODE_NODE_INGRESS_PORT): the URL printed at
# the end opens from this machine, its *.localhost name resolving to loopback by
# itself. On Kubernetes it serves the sample's Ingress. No OpenShift router runs
# here: `tinycode-local simulate --no-kubelet` admits the Route as the router
# would and serves it through an Ingress of the same controller (a demo path,
# not OpenShift's router).
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
STATE=${TINYCODE_NODE_CLUSTER_DIR:-/tmp/tinycode-local-node}-run
mkdir -p "$STATE"

log() { printf 'run-local: %s\n' "$*" >&2; }

eval "$(hack/local-cluster.sh tools --node)"
started=$(hack/local-cluster.sh start --node)
eval "$(grep '^export KUBECONFIG=' <<<"$started")"
REGISTRY=$(sed -n 's/^TINYCODE_NODE_REGISTRY=//p' <<<"$started")
VERSION=$(awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version *=/ { print $2; exit }' Cargo.toml)
KUBECTL=$TINYCODE_KUBECTL
export KUBECTL HELM="$TINYCODE_HELM"

log "building the operator image (make image) and tinycode-local"
make --no-print-directory image >&2
# Tagged with its digest: a node that pulled an earlier build under the same
# tag would keep running that one.
DIGEST=$(hack/image.sh digest)
IMAGE="${REGISTRY}/tinycode-operator:${VERSION}-${DIGEST:7:12}"
cargo build --quiet -p tinycode-tools --bin tinycode-local
BIN=$ROOT/target/debug

if [[ "$PLATFORM" == kubernetes ]]; then
	# A cluster that served the OpenShift stand-ins before keeps them: drop them.
	"$KUBECTL" delete crd routes.route.openshift.io securitycontextconstraints.security.openshift.io \
		--ignore-not-found >/dev/null
else
	log "installing the OpenShift stand-in APIs (Route, SCC)"
	"$BIN/tinycode-local" openshift-apis
fi
log "pushing ${IMAGE} to the node's registry and installing the operator ($PLATFORM)"
PUSH_TLS_VERIFY=false hack/image.sh push "$IMAGE" >/dev/null
OPERATOR_IMAGE=$IMAGE hack/install.sh >&2
# The instances' NetworkPolicy admits the ingress controller's namespace (on
# Kubernetes by name; OpenShift's router by a label that namespace carries).
"$KUBECTL" set env deployment/tinycode-operator-manager -n tinycode-operator-system \
	TINYCODE_INGRESS_NAMESPACE="$(sed -n 's/^TINYCODE_INGRESS_NAMESPACE=//p' <<<"$started")" >/dev/null
# An operator that was already running learns of the Route API's coming or
# going only at its next discovery (a minute): start it afresh, so the
# sample is reconciled for this platform from the first moment. Its pods are
# deleted and waited for (a rollout restart would return while the old pod,
# still leader, reconciles for the old platform during its grace period).
"$KUBECTL" delete pods -n tinycode-operator-system --wait=true --timeout=120s \
	-l app.kubernetes.io/name=tinycode-operator,app.kubernetes.io/component=manager >/dev/null
"$KUBECTL" rollout status deployment/tinycode-operator-manager -n tinycode-operator-system --timeout=180s >&2
hack/prepare-namespace.sh "$NS" --generate-password >&2
INGRESS_PORT=$(sed -n 's|^TINYCODE_INGRESS_URL=https://localhost:\([0-9]*\)/$|\1|p' <<<"$started")
INGRESS_CA=$(sed -n 's/^TINYCODE_INGRESS_CA=//p' <<<"$started")

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$BIN/tinycode-local" simulate --no-kubelet --domain apps.localhost >"$STATE/simulate.log" 2>&1 &
pids+=($!)

if [[ "$PLATFORM" == kubernetes ]]; then
	# An Ingress needs a host name (a Route gets a default one): the same
	# name the Route gets on the default platform, with its TLS from a Secret
	# holding the node's certificate for *.apps.localhost.
	"$KUBECTL" create secret tls tinycode-tls -n "$NS" --dry-run=client -o yaml \
		--cert="$(sed -n 's/^TINYCODE_INGRESS_TLS_CERT=//p' <<<"$started")" \
		--key="$(sed -n 's/^TINYCODE_INGRESS_TLS_KEY=//p' <<<"$started")" | "$KUBECTL" apply -f - >/dev/null
	sed "s/^  tlsTermination: edge\$/  hostname: my-tinycode-${NS}.apps.localhost\n  ingress: {tlsSecretName: tinycode-tls}/" \
		"$SAMPLE" | "$KUBECTL" apply -n "$NS" -f -
else
	"$KUBECTL" apply -n "$NS" -f "$SAMPLE"
fi
log "waiting for $SAMPLE to be Running (its pod scheduled, pulled, started and Ready on node tcnode)"
phase=
for _ in $(seq 1 180); do
	phase=$("$KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)
	url=$("$KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.status.url}' 2>/dev/null || true)
	current=$("$KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.metadata.generation}={.status.observedGeneration}' 2>/dev/null || true)
	[[ "$phase" == Running && -n "$url" && "${current%%=*}" == "${current##*=}" ]] && break
	sleep 1
done
"$KUBECTL" get tinycodeinstance -n "$NS"
"$KUBECTL" get pods -n "$NS" -o wide
if [[ "$phase" != Running ]]; then
	log "my-tinycode did not reach Running; the operator's last log lines:"
	"$KUBECTL" logs -n tinycode-operator-system deployment/tinycode-operator-manager --tail=20 >&2 || true
	exit 1
fi
# The URL as this machine opens it: the published port, the cluster's CA.
host=${url#*://}
host=${host%%/*}
open_url="https://${host}:${INGRESS_PORT}/"
password=$("$KUBECTL" get secret tinycode-password -n "$NS" -o jsonpath='{.data.TINYCODE_SERVER_PASSWORD}' | base64 -d)
log "waiting for ${open_url} to answer through the ingress controller"
code=
for _ in $(seq 1 60); do
	# The password on stdin (a config file), never in an argument.
	code=$(printf 'user = "tinycode:%s"\n' "$password" |
		curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "$INGRESS_CA" -K - "$open_url" || true)
	[[ "$code" == 200 ]] && break
	sleep 1
done
unset password
if [[ "$code" != 200 ]]; then
	log "${open_url} answered ${code:-nothing} (want 200); the ingress controller's last log lines:"
	"$KUBECTL" logs -n tinycode-ingress deployment/traefik --tail=20 >&2 || true
	exit 1
fi
printf 'URL: %s\n' "$url"
printf 'Open: %s (user tinycode; *.localhost names resolve to this machine; the certificate is signed by %s)\n' \
	"$open_url" "$INGRESS_CA"
printf 'Status: %s\n' "$("$KUBECTL" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}')"
printf 'Password: KUBECONFIG=%s %s get secret tinycode-password -n %s -o jsonpath={.data.TINYCODE_SERVER_PASSWORD} | base64 -d\n' \
	"$KUBECONFIG" "$KUBECTL" "$NS"
if [[ "${RUN_LOCAL_EXIT:-0}" == 1 ]]; then
	exit 0
fi
log "the operator runs as a pod on the node (Ctrl-C stops following its log; make stop-local stops the cluster);"
log "try: KUBECONFIG=$KUBECONFIG $KUBECTL get tinycodeinstances,pods -A"
"$KUBECTL" logs -f -n tinycode-operator-system deployment/tinycode-operator-manager
