# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034 # shares its variables with hack/local-cluster.sh both ways
# The local node: sourced by hack/local-cluster.sh when it runs with --node
# (TINYCODE_NODE=true). Everything of this cluster (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kube-proxy, the kubelet over
# containerd and runc, CNI, cluster DNS, a volume provisioner, NetworkPolicy
# enforcement and an image registry) runs inside one network namespace that
# this file creates, with nothing routed out of it. This machine reaches the
# cluster through loopback ports only, published by hack/lib/netns-forward.py:
# the API server (NODE_APISERVER_PORT) and the registry (NODE_REGISTRY_PORT),
# the same port numbers inside and outside, so one kubeconfig and one image
# name serve both sides.
#
# Addresses, all from 198.18.0.0/15 (the benchmarking range, never routed):
#   198.18.0.10      the node (a veth pair whose two ends stay inside)
#   198.18.128.0/20  pods (the bridge tc0, gateway .1)
#   198.19.0.0/16    Services (kubernetes 198.19.0.1, DNS 198.19.0.10)
#   198.18.0.11      services of the node's network: a git server (9418) and
#                    an OpenID Connect provider (mockoidc-server, 5556; its
#                    admin endpoint 5557), which pods reach as they would an
#                    external host
#   169.254.169.254  a cloud metadata stand-in (tools/standins `serve`), so
#                    tests can prove instances cannot reach it
#   198.19.0.20      the ingress controller's Service (Traefik, a pod in
#                    namespace tinycode-ingress), published on
#                    127.0.0.1:NODE_INGRESS_PORT (8443) of this machine: the
#                    instances' URLs open from here, *.localhost names resolving
#                    to loopback by themselves
#
# Facts this relies on are in ../shared/FACTS.md ("A real node"): the
# capability this VM lacks (CAP_SYS_RESOURCE, hence no oom_score_adj), the
# mount-namespace trap of `ip netns exec`, the host paths kept private.

NODE_NAME=tcnode
NODE_NETNS=tinycode-node
NODE_IP=198.18.0.10
NODE_PEER_IP=198.18.0.11
POD_CIDR=198.18.128.0/20
NODE_SERVICE_CIDR=198.19.0.0/16
KUBERNETES_SERVICE_IP=198.19.0.1
DNS_SERVICE_IP=198.19.0.10
NODE_REGISTRY_PORT=${TINYCODE_NODE_REGISTRY_PORT:-15000}
NODE_REGISTRY="localhost:${NODE_REGISTRY_PORT}"
# A second registry that wants a login (htpasswd), as a private registry does:
# pulls from it need an imagePullSecret.
NODE_PRIVATE_REGISTRY_PORT=${TINYCODE_NODE_PRIVATE_REGISTRY_PORT:-15001}
NODE_PRIVATE_REGISTRY="localhost:${NODE_PRIVATE_REGISTRY_PORT}"
# Registries whose names pods use (the operator allows quay.io and ghcr.io by
# default; the chart's Ollama comes from docker.io): containerd on the node is
# told to fetch them from the local registry instead, so nothing is pulled from
# outside and the samples run unchanged.
MIRRORED_REGISTRIES=(quay.io ghcr.io docker.io registry.k8s.io)
# The ingress controller: Traefik, built by hack/tools/traefik/build.sh (why
# Traefik, and what that build changes: docs/development.md), run as a pod.
TRAEFIK_VERSION=v3.7.13
INGRESS_NAMESPACE=tinycode-ingress
INGRESS_SERVICE_IP=198.19.0.20
NODE_INGRESS_PORT=${TINYCODE_NODE_INGRESS_PORT:-8443}

COREDNS_VERSION=
REGISTRY_VERSION=v3.1.2
LOCAL_PATH_VERSION=v0.0.30
KUBE_ROUTER_VERSION=v2.1.0

# Filled in by ensure_node_tools.
KUBELET_BIN=
KUBE_SCHEDULER_BIN=
KUBE_CONTROLLER_MANAGER_BIN=
KUBE_PROXY_BIN=
COREDNS_BIN=
REGISTRY_BIN=
TRAEFIK_BIN=
LOCAL_PATH_BIN=
KUBE_ROUTER_BIN=
STANDIN_BIN=

# The processes of the node, in start order (stop goes backwards).
NODE_DAEMONS=(etcd kube-apiserver netns-forward registry registry-private containerd kubelet kube-controller-manager
	kube-scheduler kube-proxy coredns kube-router local-path-provisioner standin git-daemon mockoidc-server)
METADATA_IP=169.254.169.254

# ---------------------------------------------------------------------------
# tools
# ---------------------------------------------------------------------------

# Debian's packages for the runtime: containerd 1.6 and runc (kubelet 1.37 still
# speaks to 1.6), the CNI plugins, iptables and ipset (kube-proxy, kube-router),
# skopeo (pushing images), busybox (the stand-in images' shell) and git (the
# git server in the node's network, and the client in the tinycode stand-in).
# Installed once; apt-get only when one is missing.
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables ipset conntrack skopeo busybox-static git)

ensure_node_packages() {
	local missing=() p
	for p in "${NODE_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	command -v apt-get >/dev/null 2>&1 || die "the node needs the Debian packages ${missing[*]} and there is no apt-get"
	log "installing Debian packages: ${missing[*]}"
	# containerd's package would start its own daemon on a machine with an init
	# system; this one is started here, inside the node's namespace.
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
		{ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; } ||
		die "apt-get install ${missing[*]} failed"
}

# go_install_to NAME DEST PKG@VERSION LDFLAGS: `go install` of a module without
# replace directives into a temporary GOBIN, then atomically into place.
go_install_to() {
	local out=$1 pkg=$2 ldflags=$3 gobin
	gobin=$(mktemp -d "${CACHE_DIR}/.gobin.XXXXXX")
	CLEANUP_PATHS+=("$gobin")
	(cd "$gobin" && CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "$ldflags" "$pkg") || return 1
	mv -f -- "${gobin}/$(basename "${pkg%@*}")" "$out"
}

# ensure_built NAME BIN STAMP BUILD...: BUILD (which writes "$BIN.tmp.$$")
# unless BIN exists beside a STAMP file saying it was built from the same
# inputs; for binaries without a version flag worth trusting.
ensure_built() {
	local name=$1 bin=$2 stamp=$3
	shift 3
	if [[ -x "$bin" && -f "${bin}.stamp" && "$(<"${bin}.stamp")" == "$stamp" ]]; then
		return 0
	fi
	build_binary "$name" "$bin" "${bin}.build.log" "$@"
	printf '%s\n' "$stamp" >"${bin}.stamp"
}

ensure_node_tools() {
	ensure_node_packages
	local kube_dir="${CACHE_DIR}/kube-${KUBE_VERSION}" c
	KUBELET_BIN="${kube_dir}/kubelet"
	KUBE_SCHEDULER_BIN="${kube_dir}/kube-scheduler"
	KUBE_CONTROLLER_MANAGER_BIN="${kube_dir}/kube-controller-manager"
	KUBE_PROXY_BIN="${kube_dir}/kube-proxy"
	take_build_lock
	for c in kubelet kube-scheduler kube-controller-manager kube-proxy; do
		if ! binary_works "${kube_dir}/${c}" "Kubernetes ${KUBE_VERSION}" --version; then
			build_binary "${c} ${KUBE_VERSION}" "${kube_dir}/${c}" "${kube_dir}/${c}.build.log" \
				go_build_in "$KUBE_TOOLS_MOD" "${kube_dir}/${c}.tmp.$$" "$KUBE_LDFLAGS" "k8s.io/kubernetes/cmd/${c}"
			binary_works "${kube_dir}/${c}" "Kubernetes ${KUBE_VERSION}" --version ||
				die "the freshly built ${kube_dir}/${c} does not report version ${KUBE_VERSION}"
		fi
	done

	local coredns_mod="${REPO_ROOT}/hack/tools/coredns" digest
	COREDNS_VERSION=$(module_version "${coredns_mod}/go.mod" github.com/coredns/coredns)
	digest=$(cat "${coredns_mod}/main.go" "${coredns_mod}/go.mod" "${coredns_mod}/go.sum" | sha256sum)
	COREDNS_BIN="${CACHE_DIR}/coredns-${COREDNS_VERSION}/coredns"
	ensure_built "coredns ${COREDNS_VERSION}" "$COREDNS_BIN" "${digest:0:16}" \
		go_build_in "$coredns_mod" "${COREDNS_BIN}.tmp.$$" "-s -w" .

	REGISTRY_BIN="${CACHE_DIR}/registry-${REGISTRY_VERSION}/registry"
	ensure_built "registry ${REGISTRY_VERSION}" "$REGISTRY_BIN" "$REGISTRY_VERSION" \
		go_install_to "${REGISTRY_BIN}.tmp.$$" \
		"github.com/distribution/distribution/v3/cmd/registry@${REGISTRY_VERSION}" "-s -w"

	LOCAL_PATH_BIN="${CACHE_DIR}/local-path-provisioner-${LOCAL_PATH_VERSION}/local-path-provisioner"
	ensure_built "local-path-provisioner ${LOCAL_PATH_VERSION}" "$LOCAL_PATH_BIN" "$LOCAL_PATH_VERSION" \
		go_install_to "${LOCAL_PATH_BIN}.tmp.$$" \
		"github.com/rancher/local-path-provisioner@${LOCAL_PATH_VERSION}" "-s -w"

	KUBE_ROUTER_BIN="${CACHE_DIR}/kube-router-${KUBE_ROUTER_VERSION}/kube-router"
	ensure_built "kube-router ${KUBE_ROUTER_VERSION}" "$KUBE_ROUTER_BIN" "$KUBE_ROUTER_VERSION" \
		go_install_to "${KUBE_ROUTER_BIN}.tmp.$$" \
		"github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}" "-s -w"

	digest=$(sha256sum <"${REPO_ROOT}/hack/tools/traefik/build.sh")
	TRAEFIK_BIN="${CACHE_DIR}/traefik-${TRAEFIK_VERSION}/traefik"
	ensure_built "traefik ${TRAEFIK_VERSION}" "$TRAEFIK_BIN" "${digest:0:16}" \
		"${REPO_ROOT}/hack/tools/traefik/build.sh" "${TRAEFIK_BIN}.tmp.$$"

	local standin_mod="${REPO_ROOT}/tools/standins"
	digest=$(cat "$standin_mod"/*.go "${standin_mod}/go.mod" | sha256sum)
	STANDIN_BIN="${CACHE_DIR}/standin-${digest:0:16}/standin"
	ensure_built "standin ${digest:0:16}" "$STANDIN_BIN" "${digest:0:16}" \
		go_build_in "$standin_mod" "${STANDIN_BIN}.tmp.$$" "-s -w" .
	release_build_lock
}

# ---------------------------------------------------------------------------
# the namespace
# ---------------------------------------------------------------------------

# The holder: one process in the node's network namespace and in a private
# mount namespace, kept for the cluster's life. Every daemon enters both
# through it (`ip netns exec` would remount /sys and hide the cgroups).
holder_pid() {
	local pid
	pid=$(pid_of sleep-holder 2>/dev/null || true)
	[[ -n "$pid" ]] || pid=$(cat "${CLUSTER_DIR}/holder.pid" 2>/dev/null || true)
	[[ -n "$pid" ]] && alive "$pid" && printf '%s\n' "$pid"
}

# in_node CMD...: run CMD inside the node's network and mount namespaces.
in_node() {
	local h
	h=$(<"${CLUSTER_DIR}/holder.pid")
	nsenter -t "$h" -n -m -- "$@"
}

create_netns() {
	ip netns del "$NODE_NETNS" 2>/dev/null || true
	ip netns add "$NODE_NETNS" || die "ip netns add ${NODE_NETNS} failed (root and iproute2 are needed)"
	# The holder: private mounts for the paths the daemons hard-code, slave
	# propagation so the machine's mounts stay visible but ours do not leak.
	setsid nsenter --net="/run/netns/${NODE_NETNS}" unshare --mount --propagation slave \
		sleep infinity </dev/null >/dev/null 2>&1 8>&- 9>&- &
	printf '%s\n' "$!" >"${CLUSTER_DIR}/holder.pid"
	local i
	for i in $(seq 1 50); do
		[[ "$(readlink "/proc/$(<"${CLUSTER_DIR}/holder.pid")/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]] && break
		sleep 0.1
	done
	((i < 50)) || die "the namespace holder did not start"

	local p
	for p in /run/containerd /var/lib/kubelet/device-plugins /var/log/containers /var/log/pods /var/lib/cni; do
		mkdir -p "$p"
		in_node mount -t tmpfs -o mode=0755 tmpfs "$p" || die "cannot mount a private ${p} in the node's namespace"
	done
	# The node's own names: no resolver of this machine is reachable from here.
	printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE_NAME" >"${CLUSTER_DIR}/hosts"
	printf 'nameserver %s\noptions ndots:1 timeout:1 attempts:1\n' "$NODE_IP" >"${CLUSTER_DIR}/resolv.conf"
	in_node mount --bind "${CLUSTER_DIR}/hosts" /etc/hosts
	in_node mount --bind "${CLUSTER_DIR}/resolv.conf" /etc/resolv.conf

	in_node ip link set lo up
	in_node ip link add tcnode0 type veth peer name tcnode1
	in_node ip addr add "${NODE_IP}/24" dev tcnode0
	in_node ip addr add "${NODE_PEER_IP}/24" dev tcnode1
	in_node ip link set tcnode0 up
	in_node ip link set tcnode1 up
	# Service addresses: kube-proxy DNATs them in OUTPUT; the node's own
	# connections need a route to be sent at all (the veth never leaves).
	in_node ip route add "$NODE_SERVICE_CIDR" dev tcnode0 src "$NODE_IP"
	# The metadata address, on the node's side of the pods' gateway, as a
	# cloud's hypervisor answers it.
	in_node ip addr add "${METADATA_IP}/32" dev tcnode1
	# Pod-to-pod traffic on the bridge must pass iptables (Service replies,
	# NetworkPolicy).
	in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1 ||
		die "cannot set the bridge netfilter sysctls inside the node's namespace"
}

delete_netns() {
	local h pids p
	if [[ -e "/run/netns/${NODE_NETNS}" ]]; then
		pids=$(ip netns pids "$NODE_NETNS" 2>/dev/null || true)
		for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
		sleep 0.5
		pids=$(ip netns pids "$NODE_NETNS" 2>/dev/null || true)
		for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
	fi
	h=$(cat "${CLUSTER_DIR}/holder.pid" 2>/dev/null || true)
	[[ -n "$h" ]] && kill -KILL "$h" 2>/dev/null || true
	ip netns del "$NODE_NETNS" 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# certificates and kubeconfigs
# ---------------------------------------------------------------------------

generate_node_pki() {
	local pki="${CLUSTER_DIR}/pki" client="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
	sign_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
	sign_cert kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}" "$client"
	sign_cert kubelet-serving "/O=system:nodes/CN=system:node:${NODE_NAME}" \
		"$(printf '%s\n' "basicConstraints=critical,CA:FALSE" \
			"keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
			"subjectAltName=IP:${NODE_IP},DNS:${NODE_NAME}")"
	sign_cert kube-controller-manager "/CN=system:kube-controller-manager" "$client"
	sign_cert kube-scheduler "/CN=system:kube-scheduler" "$client"
	sign_cert kube-proxy "/CN=system:kube-proxy" "$client"
	# CoreDNS, the provisioner and kube-router read and write cluster-wide;
	# their RBAC is applied at start (node_rbac), so they get identities of
	# their own, not the admin's.
	sign_cert coredns "/CN=tinycode-local:coredns" "$client"
	sign_cert local-path-provisioner "/CN=tinycode-local:local-path-provisioner" "$client"
	sign_cert kube-router "/CN=tinycode-local:kube-router" "$client"
	# The ingress controller's default certificate, for every name it serves
	# here (curl --cacert CLUSTER_DIR/pki/ca.crt trusts it).
	sign_cert ingress-default "/CN=tinycode-local ingress" \
		"$(printf '%s\n' "basicConstraints=critical,CA:FALSE" \
			"keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
			"subjectAltName=DNS:localhost,DNS:*.apps.localhost")"
	: "$pki"
}

# node_kubeconfig NAME: a kubeconfig for the node's component NAME (its cert).
node_kubeconfig() {
	local name=$1 pki="${CLUSTER_DIR}/pki"
	cat >"${CLUSTER_DIR}/${name}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tinycode-local
  cluster:
    server: https://${LOOPBACK}:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 <"${pki}/ca.crt")
users:
- name: ${name}
  user:
    client-certificate-data: $(base64 -w0 <"${pki}/${name}.crt")
    client-key-data: $(base64 -w0 <"${pki}/${name}.key")
contexts:
- name: tinycode-local
  context: {cluster: tinycode-local, user: ${name}}
current-context: tinycode-local
EOF
}

# ---------------------------------------------------------------------------
# daemons
# ---------------------------------------------------------------------------

# node_daemon NAME CMD...: start CMD inside the node's namespaces, detached,
# logging to NAME.log, its pid in NAME.pid (nsenter execs CMD: same pid).
node_daemon() {
	local name=$1 h
	shift
	h=$(<"${CLUSTER_DIR}/holder.pid")
	# Every daemon here is a Go program: collecting garbage at half the usual
	# heap growth keeps the node's memory down for a little CPU (GOGC=100 is
	# the default; docs/benchmarks.md has both).
	setsid nsenter -t "$h" -n -m -- env GOGC="${TINYCODE_NODE_GOGC:-50}" "$@" \
		</dev/null >"${CLUSTER_DIR}/${name}.log" 2>&1 8>&- 9>&- &
	printf '%s\n' "$!" >"${CLUSTER_DIR}/${name}.pid"
}

start_registry() {
	mkdir -p "${CLUSTER_DIR}/registry"
	cat >"${CLUSTER_DIR}/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: ${CLUSTER_DIR}/registry}
  delete: {enabled: true}
http:
  addr: 0.0.0.0:${NODE_REGISTRY_PORT}
  secret: tinycode-local-node
EOF
	log "starting the registry (distribution ${REGISTRY_VERSION}) on ${NODE_REGISTRY}"
	node_daemon registry "$REGISTRY_BIN" serve "${CLUSTER_DIR}/registry.yml"

	# The private one: a user and a fresh password per cluster, bcrypt in its
	# htpasswd file (glibc's crypt does bcrypt), user:password in a file the
	# tests read to make their pull Secret.
	local password
	mkdir -p "${CLUSTER_DIR}/registry-private"
	password=$(head -c 18 /dev/urandom | base64 | tr -d '\n/+=')
	(umask 077 && printf 'tinycode-pull:%s\n' "$password" >"${CLUSTER_DIR}/registry-private.auth")
	python3 -W ignore -c 'import crypt, sys; print("tinycode-pull:" + crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))' \
		"$password" >"${CLUSTER_DIR}/registry-private.htpasswd"
	cat >"${CLUSTER_DIR}/registry-private.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: ${CLUSTER_DIR}/registry-private}
http:
  addr: 0.0.0.0:${NODE_PRIVATE_REGISTRY_PORT}
  secret: tinycode-local-node-private
auth:
  htpasswd:
    realm: tinycode-local-private
    path: ${CLUSTER_DIR}/registry-private.htpasswd
EOF
	node_daemon registry-private "$REGISTRY_BIN" serve "${CLUSTER_DIR}/registry-private.yml"
}

start_containerd() {
	local d="${CLUSTER_DIR}/containerd" r
	mkdir -p "${d}/certs.d" "${CLUSTER_DIR}/cni/net.d"
	# The local registry by its own name, and the mirrored registries' names:
	# served by it over plain HTTP on the node's loopback; never their hosts.
	mkdir -p "${d}/certs.d/${NODE_PRIVATE_REGISTRY}"
	printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
		"$NODE_PRIVATE_REGISTRY" "$NODE_PRIVATE_REGISTRY" >"${d}/certs.d/${NODE_PRIVATE_REGISTRY}/hosts.toml"
	for r in "$NODE_REGISTRY" "${MIRRORED_REGISTRIES[@]}"; do
		mkdir -p "${d}/certs.d/${r}"
		printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
			"$NODE_REGISTRY" "$NODE_REGISTRY" >"${d}/certs.d/${r}/hosts.toml"
	done
	cat >"${d}/config.toml" <<EOF
version = 2
root = "${d}/root"
state = "${d}/state"
[grpc]
  address = "${d}/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # This VM's bounding set lacks CAP_SYS_RESOURCE: no negative oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${CLUSTER_DIR}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "${d}/certs.d"
EOF
	cat >"${CLUSTER_DIR}/cni/net.d/10-tinycode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "tinycode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "tc0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${CLUSTER_DIR}/cni/ipam",
        "ranges": [[{"subnet": "${POD_CIDR}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
	log "starting containerd $(containerd --version | awk '{print $3}')"
	node_daemon containerd containerd --config "${d}/config.toml"
}

start_kubelet() {
	local k="${CLUSTER_DIR}/kubelet" pki="${CLUSTER_DIR}/pki"
	mkdir -p "$k" "${CLUSTER_DIR}/volume-plugins"
	cat >"${CLUSTER_DIR}/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine runs cgroup v1.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${CLUSTER_DIR}/containerd/containerd.sock
address: ${NODE_IP}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: ${pki}/kubelet-serving.crt
tlsPrivateKeyFile: ${pki}/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${pki}/ca.crt}
authorization: {mode: Webhook}
clusterDNS: [${DNS_SERVICE_IP}]
clusterDomain: cluster.local
resolvConf: ${CLUSTER_DIR}/resolv.conf
# Without CAP_SYS_RESOURCE the kubelet may not lower its own score.
oomScoreAdj: 0
failSwapOn: false
podLogsDir: /var/log/pods
volumePluginDir: ${CLUSTER_DIR}/volume-plugins
serializeImagePulls: false
maxPods: 250
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
	log "starting the kubelet ${KUBE_VERSION} (node ${NODE_NAME}, ${NODE_IP})"
	node_daemon kubelet "$KUBELET_BIN" \
		--config="${CLUSTER_DIR}/kubelet.yaml" \
		--kubeconfig="${CLUSTER_DIR}/kubelet.kubeconfig" \
		--root-dir="$k" \
		--hostname-override="$NODE_NAME" \
		--node-ip="$NODE_IP" \
		--v=1
}

start_controller_manager() {
	local pki="${CLUSTER_DIR}/pki" kc="${CLUSTER_DIR}/kube-controller-manager.kubeconfig"
	mkdir -p "${CLUSTER_DIR}/flex"
	node_daemon kube-controller-manager "$KUBE_CONTROLLER_MANAGER_BIN" \
		--kubeconfig="$kc" \
		--authentication-kubeconfig="$kc" \
		--authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 \
		--leader-elect=false \
		--use-service-account-credentials=true \
		--service-account-private-key-file="${pki}/sa.key" \
		--root-ca-file="${pki}/ca.crt" \
		--cluster-signing-cert-file="${pki}/ca.crt" \
		--cluster-signing-key-file="${pki}/ca.key" \
		--service-cluster-ip-range="$NODE_SERVICE_CIDR" \
		--flex-volume-plugin-dir="${CLUSTER_DIR}/flex" \
		--concurrent-gc-syncs=5 \
		--v=1
}

start_scheduler() {
	local kc="${CLUSTER_DIR}/kube-scheduler.kubeconfig"
	node_daemon kube-scheduler "$KUBE_SCHEDULER_BIN" \
		--kubeconfig="$kc" \
		--authentication-kubeconfig="$kc" \
		--authorization-kubeconfig="$kc" \
		--bind-address=127.0.0.1 \
		--leader-elect=false \
		--v=1
}

start_kube_proxy() {
	cat >"${CLUSTER_DIR}/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: ${CLUSTER_DIR}/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: ${POD_CIDR}
hostnameOverride: ${NODE_NAME}
bindAddress: ${NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the kernel's conntrack settings as they are.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	node_daemon kube-proxy "$KUBE_PROXY_BIN" --config="${CLUSTER_DIR}/kube-proxy.yaml" --v=1
}

start_coredns() {
	# Names of test hosts inside the node's network (the hosts plugin
	# rereads the file): two names of the peer, which stands for a host
	# outside the cluster, so an egress allow-list can admit one and not the
	# other of the same address.
	printf '%s allowed.egress.test denied.egress.test\n' "$NODE_PEER_IP" >"${CLUSTER_DIR}/dns-hosts"
	cat >"${CLUSTER_DIR}/Corefile" <<EOF
.:53 {
    bind ${NODE_IP}
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    hosts ${CLUSTER_DIR}/dns-hosts {
        reload 1s
        fallthrough
    }
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig ${CLUSTER_DIR}/coredns.kubeconfig tinycode-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
    loadbalance
}
EOF
	node_daemon coredns "$COREDNS_BIN" -conf "${CLUSTER_DIR}/Corefile"
}

start_kube_router() {
	# NetworkPolicy only: routing and Service proxying stay with the bridge
	# and kube-proxy.
	node_daemon kube-router "$KUBE_ROUTER_BIN" \
		--kubeconfig="${CLUSTER_DIR}/kube-router.kubeconfig" \
		--hostname-override="$NODE_NAME" \
		--run-firewall=true \
		--run-router=false \
		--run-service-proxy=false \
		--run-loadbalancer=false \
		--enable-ipv6=false \
		--metrics-port=0 \
		--health-port=20244 \
		--service-cluster-ip-range="$NODE_SERVICE_CIDR" \
		--v=1
}

# Once, on a loaded machine, kube-router exited during its first start (CI
# run of e9b72f2; the next start worked). Its DaemonSet would restart it, so
# this does too, twice at most, keeping each failed attempt's log.
start_kube_router_ready() {
	local attempt deadline
	for attempt in 1 2 3; do
		start_kube_router
		deadline=$((SECONDS + 30))
		while [[ -n "$(pid_of kube-router)" ]] && ! kube_router_ready && ((SECONDS < deadline)); do
			sleep 0.25
		done
		kube_router_ready && return 0
		((SECONDS < deadline)) || node_fail "kube-router's NetworkPolicy controller not reached within 30s"
		cp "${CLUSTER_DIR}/kube-router.log" "${CLUSTER_DIR}/kube-router.exited-${attempt}.log"
		show_log_tail kube-router "${CLUSTER_DIR}/kube-router.exited-${attempt}.log" 30
		log "kube-router exited (attempt ${attempt} of 3); starting it again, as its DaemonSet would"
	done
	node_fail "kube-router exited three times while waiting for its NetworkPolicy controller"
}

start_local_path_provisioner() {
	node_daemon local-path-provisioner "$LOCAL_PATH_BIN" --debug start \
		--kubeconfig "${CLUSTER_DIR}/local-path-provisioner.kubeconfig" \
		--namespace local-path-storage \
		--service-account-name local-path-provisioner \
		--helper-image "${NODE_REGISTRY}/tinycode-local/local-path-helper:${STANDIN_TAG}" \
		--configmap-name local-path-config
}

# ---------------------------------------------------------------------------
# images
# ---------------------------------------------------------------------------

STANDIN_TAG=

# push_layout DIR REF: an OCI layout to the local registry (skopeo, over the
# published loopback port).
push_layout() {
	skopeo copy --quiet --dest-tls-verify=false "oci:$1" "docker://$2" >&2 ||
		die "pushing $2 to the local registry failed"
}

# shell_layout_args: oci-layout.py arguments for a shell and its tools
# (busybox's applets), which the chart's scripts need: the git init
# container's and the Ollama entrypoint's.
shell_layout_args() {
	local busybox applet
	busybox=$(command -v busybox) || die "busybox is missing (Debian package busybox-static)"
	printf '%s\n' --file "${busybox}:bin/busybox"
	for applet in $("$busybox" --list); do
		[[ "$applet" == busybox ]] || printf '%s\n' --link "bin/${applet}:busybox"
	done
}

# git_layout_args: this machine's git and the libraries it links, so the
# tinycode stand-in can run the chart's git-clone script (a git:// clone
# needs no remote helper).
git_layout_args() {
	local git lib
	git=$(command -v git) || die "git is missing"
	printf '%s\n' --file "${git}:usr/bin/git"
	for lib in $(ldd "$git" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'); do
		printf '%s\n' --file "$(readlink -f "$lib"):${lib#/}"
	done
}

# The stand-in images (tools/standins): one binary, entrypoints by image.
push_standin_images() {
	local dir="${CLUSTER_DIR}/images" tag=$STANDIN_TAG shell=() git=()
	mkdir -p "$dir"
	if ! command -v busybox >/dev/null || ! command -v git >/dev/null; then
		die "busybox and git are needed for the stand-in images (Debian packages busybox-static and git)"
	fi
	mapfile -t shell < <(shell_layout_args)
	mapfile -t git < <(git_layout_args)
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/pause" --file "${STANDIN_BIN}:pause" \
		--entrypoint '["/pause", "pause"]' --user 65535 >/dev/null
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/tinycode" --file "${STANDIN_BIN}:usr/local/bin/standin" \
		"${shell[@]}" "${git[@]}" \
		--dir tmp --dir projects --dir home/tinycode \
		--entrypoint '["/usr/local/bin/standin", "tinycode"]' --user 1001 \
		--env HOME=/home/tinycode >/dev/null
	# The Ollama stand-in: the same binary as `ollama`, under a shell for the
	# chart's entrypoint script.
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/ollama" --file "${STANDIN_BIN}:usr/bin/ollama" \
		"${shell[@]}" --dir tmp --dir models --entrypoint '["/usr/bin/ollama", "serve"]' --user 1001 >/dev/null
	# An image whose process exits at once: a crash loop, for the tests.
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/crash" --file "${STANDIN_BIN}:usr/local/bin/standin" \
		--entrypoint '["/usr/local/bin/standin", "crash"]' --user 1001 >/dev/null
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/local-path-helper" \
		--file "${STANDIN_BIN}:local-path-helper" --entrypoint '["/local-path-helper"]' --user 0 >/dev/null
	push_layout "${dir}/pause" "${NODE_REGISTRY}/pause:3.10"
	push_layout "${dir}/tinycode" "${NODE_REGISTRY}/tinycode-local/tinycode-standin:${tag}"
	# The samples' image name, served by the mirror (see MIRRORED_REGISTRIES).
	push_layout "${dir}/tinycode" "${NODE_REGISTRY}/bjohns/tinycode-container:latest"
	push_layout "${dir}/crash" "${NODE_REGISTRY}/bjohns/tinycode-container:crash"
	# The operator's default Ollama image name (docker.io, through the mirror).
	push_layout "${dir}/ollama" "${NODE_REGISTRY}/ollama/ollama:latest"
	push_layout "${dir}/local-path-helper" "${NODE_REGISTRY}/tinycode-local/local-path-helper:${tag}"
	# oauth2-proxy from the binary the sign-in tests build, under the
	# operator's default image name (quay.io, through the mirror): the real
	# proxy, not a stand-in.
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/oauth2-proxy" --file "${OAUTH2_PROXY_BIN}:bin/oauth2-proxy" \
		--entrypoint '["/bin/oauth2-proxy"]' --user 65532 >/dev/null
	push_layout "${dir}/oauth2-proxy" "${NODE_REGISTRY}/oauth2-proxy/oauth2-proxy:${OAUTH2_PROXY_VERSION}"
	# Traefik under its own image name (docker.io, through the mirror).
	python3 "${REPO_ROOT}/hack/lib/oci-layout.py" "${dir}/traefik" --file "${TRAEFIK_BIN}:usr/local/bin/traefik" \
		--dir tmp --entrypoint '["/usr/local/bin/traefik"]' --user 65532 >/dev/null
	push_layout "${dir}/traefik" "${NODE_REGISTRY}/library/traefik:${TRAEFIK_VERSION}"
	# The same stand-in behind the private registry's login.
	skopeo copy --quiet --dest-tls-verify=false --dest-creds "$(<"${CLUSTER_DIR}/registry-private.auth")" \
		"oci:${dir}/tinycode" "docker://${NODE_PRIVATE_REGISTRY}/private/tinycode-container:v1" >&2 ||
		die "pushing to the private registry failed"
}

# A git server in the node's network: git daemon on the peer address, serving
# one repository for the git init container to clone (GIT_URL).
GIT_URL="git://${NODE_PEER_IP}/sample.git"
start_git_server() {
	local repos="${CLUSTER_DIR}/git" work="${CLUSTER_DIR}/git-work"
	rm -rf "$repos" "$work"
	mkdir -p "$repos"
	if ! {
		git init -q -b main "$work" &&
			printf 'cloned by the git init container\n' >"${work}/README.md" &&
			git -C "$work" add README.md &&
			git -C "$work" -c user.name=tinycode-local -c user.email=local@tinycode.invalid commit -q -m sample &&
			git clone -q --bare "$work" "${repos}/sample.git"
	}; then
		die "creating the sample git repository failed"
	fi
	rm -rf "$work"
	log "starting a git server on ${GIT_URL%/*}"
	node_daemon git-daemon git daemon --reuseaddr --export-all --base-path="$repos" \
		--listen="$NODE_PEER_IP" --port=9418 "$repos"
}

# An OpenID Connect provider in the node's network (mockoidc-server, built
# with the sign-in test tools), for instances in auth.mode oidc: its client
# secret is made per start and only the operator's Secret gets it.
OIDC_ADDR="${NODE_PEER_IP}:5556"
OIDC_ADMIN_URL="http://${NODE_PEER_IP}:5557"
OIDC_CLIENT_ID=tinycode-node
start_oidc_provider() {
	(umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=' >"${CLUSTER_DIR}/oidc-client-secret")
	log "starting an OpenID Connect provider on http://${OIDC_ADDR}"
	node_daemon mockoidc-server "$MOCKOIDC_SERVER_BIN" -listen "$OIDC_ADDR" -admin-listen "${OIDC_ADMIN_URL#http://}" \
		-client-id "$OIDC_CLIENT_ID" -client-secret "$(<"${CLUSTER_DIR}/oidc-client-secret")" -watch-stdin=false
}

# Ready once it printed its endpoints (its first line).
oidc_provider_ready() {
	head -n 1 "${CLUSTER_DIR}/mockoidc-server.log" 2>/dev/null | grep -q '"issuer"'
}

oidc_issuer() {
	head -n 1 "${CLUSTER_DIR}/mockoidc-server.log" | python3 -c 'import json, sys; print(json.load(sys.stdin)["issuer"])'
}

git_server_ready() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	in_node bash -c 'exec 3<>"/dev/tcp/$1/9418"' _ "$NODE_PEER_IP" 2>/dev/null
}

kube_router_ready() {
	in_node bash -c 'exec 3<>/dev/tcp/127.0.0.1/20244 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && head -c 12 <&3' \
		2>/dev/null | grep -q '200'
}

coredns_ready() {
	in_node bash -c 'exec 3<>/dev/tcp/127.0.0.1/18181 && printf "GET /ready HTTP/1.0\r\n\r\n" >&3 && head -c 12 <&3' \
		2>/dev/null | grep -q '200'
}

# The ingress controller, as a cluster runs one: a Deployment of Traefik in a
# namespace of its own (which the instances' NetworkPolicies admit: the
# Kubernetes platform by name, `--ingress-namespace tinycode-ingress`; the
# OpenShift platform by the router's policy-group label, which this namespace
# carries for the demo), the default IngressClass, and a Service at a fixed
# address that netns-forward.py publishes on this machine's loopback. Its
# default certificate is signed by the cluster's CA. Traefik never calls out:
# the version check and usage report are off.
apply_ingress_controller() {
	local pki="${CLUSTER_DIR}/pki"
	"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" apply --server-side --force-conflicts \
		--field-manager=tinycode-local-node -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: ${INGRESS_NAMESPACE}
  labels: {policy-group.network.openshift.io/ingress: ""}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: traefik, namespace: ${INGRESS_NAMESPACE}}
automountServiceAccountToken: true
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tinycode-local:traefik}
rules:
- apiGroups: [""]
  resources: [services, secrets, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses, ingressclasses]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses/status]
  verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tinycode-local:traefik}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "tinycode-local:traefik"}
subjects: [{kind: ServiceAccount, name: traefik, namespace: ${INGRESS_NAMESPACE}}]
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: traefik
  annotations: {ingressclass.kubernetes.io/is-default-class: "true"}
spec: {controller: traefik.io/ingress-controller}
---
apiVersion: v1
kind: Secret
metadata: {name: traefik-default-cert, namespace: ${INGRESS_NAMESPACE}}
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 <"${pki}/ingress-default.crt")
  tls.key: $(base64 -w0 <"${pki}/ingress-default.key")
---
apiVersion: v1
kind: ConfigMap
metadata: {name: traefik-dynamic, namespace: ${INGRESS_NAMESPACE}}
data:
  dynamic.yaml: |
    tls:
      stores:
        default:
          defaultCertificate: {certFile: /certs/tls.crt, keyFile: /certs/tls.key}
---
apiVersion: v1
kind: Service
metadata: {name: traefik, namespace: ${INGRESS_NAMESPACE}}
spec:
  clusterIP: ${INGRESS_SERVICE_IP}
  selector: {app.kubernetes.io/name: traefik}
  ports:
  - {name: websecure, port: 443, targetPort: websecure}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: traefik, namespace: ${INGRESS_NAMESPACE}}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: traefik}}
  template:
    metadata: {labels: {app.kubernetes.io/name: traefik}}
    spec:
      serviceAccountName: traefik
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: traefik
        image: docker.io/library/traefik:${TRAEFIK_VERSION}
        args:
        - --global.checkNewVersion=false
        - --global.sendAnonymousUsage=false
        - --entryPoints.websecure.address=:8443
        - --entryPoints.websecure.http.tls=true
        # A header whose name aliases another (X_Forwarded_User for
        # X-Forwarded-User) is dropped: images that read headers CGI-style
        # would otherwise take it for the one the sign-in proxy sets.
        - --entryPoints.websecure.http.aliasHeadersStrategy=delete
        - --entryPoints.traefik.address=:9000
        - --ping=true
        - --providers.kubernetesIngress=true
        - --providers.kubernetesIngress.ingressEndpoint.ip=127.0.0.1
        - --providers.file.filename=/config/dynamic.yaml
        - --log.level=INFO
        - --log.noColor=true
        ports:
        - {name: websecure, containerPort: 8443}
        - {name: ping, containerPort: 9000}
        readinessProbe:
          httpGet: {path: /ping, port: ping}
          periodSeconds: 2
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {memory: 256Mi}
        volumeMounts:
        - {name: config, mountPath: /config, readOnly: true}
        - {name: certs, mountPath: /certs, readOnly: true}
        - {name: tmp, mountPath: /tmp}
      volumes:
      - {name: config, configMap: {name: traefik-dynamic}}
      - {name: certs, secret: {secretName: traefik-default-cert}}
      - {name: tmp, emptyDir: {}}
EOF
}

# Ready when it answers through the published port (any HTTP status: an
# unknown host gets Traefik's 404).
ingress_ready() {
	[[ "$("$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" get deployment traefik -n "$INGRESS_NAMESPACE" \
		-o jsonpath='{.status.readyReplicas}' 2>/dev/null)" == 1 ]] &&
		curl -sk -o /dev/null --max-time 2 "https://localhost:${NODE_INGRESS_PORT}/"
}

default_service_account() {
	"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" get serviceaccount default -n default >/dev/null 2>&1
}

containerd_ready() {
	[[ -S "${CLUSTER_DIR}/containerd/containerd.sock" ]] &&
		ctr --address "${CLUSTER_DIR}/containerd/containerd.sock" version >/dev/null 2>&1
}

# Ready when it asks for a login.
private_registry_ready() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	in_node bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /v2/ HTTP/1.0\r\n\r\n" >&3 && head -c 12 <&3' \
		_ "$NODE_PRIVATE_REGISTRY_PORT" 2>/dev/null | grep -q '401'
}

registry_ready() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	in_node bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /v2/ HTTP/1.0\r\n\r\n" >&3 && head -c 12 <&3' \
		_ "$NODE_REGISTRY_PORT" 2>/dev/null | grep -q '200'
}

# ---------------------------------------------------------------------------
# cluster objects the node needs
# ---------------------------------------------------------------------------

node_ready() {
	[[ "$("$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" get node "$NODE_NAME" \
		-o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

apply_node_objects() {
	"$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_PATH" apply --server-side --force-conflicts \
		--field-manager=tinycode-local-node -f - >/dev/null <<EOF
# Cluster DNS: a Service in front of CoreDNS, which runs as a process on the
# node (no image to pull) and answers on the node's address.
apiVersion: v1
kind: Namespace
metadata: {name: kube-system}
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: ${DNS_SERVICE_IP}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: tinycode-local}
addressType: IPv4
endpoints:
- addresses: ["${NODE_IP}"]
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tinycode-local:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "tinycode-local:coredns"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
# kube-router's NetworkPolicy controller reads pods, namespaces and policies.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tinycode-local:kube-router}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [patch, update]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tinycode-local:kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "tinycode-local:kube-router"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "tinycode-local:kube-router"}]
---
# The local-path provisioner: PVs cluster-wide, helper pods in its namespace.
apiVersion: v1
kind: Namespace
metadata:
  name: local-path-storage
  # Its helper pods write the volume directories on the node as root.
  labels: {pod-security.kubernetes.io/enforce: privileged}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: local-path-provisioner, namespace: local-path-storage}
automountServiceAccountToken: false
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tinycode-local:local-path-provisioner}
rules:
- apiGroups: [""]
  resources: [nodes, persistentvolumeclaims, configmaps, pods, pods/log]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tinycode-local:local-path-provisioner}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "tinycode-local:local-path-provisioner"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "tinycode-local:local-path-provisioner"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: local-path-provisioner, namespace: local-path-storage}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: local-path-provisioner, namespace: local-path-storage}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-path-provisioner}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "tinycode-local:local-path-provisioner"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: local-path-config, namespace: local-path-storage}
data:
  config.json: |-
    {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["${CLUSTER_DIR}/volumes"]}],
     "setupCommand": "/local-path-helper", "teardownCommand": "/local-path-helper"}
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata: {name: helper-pod}
    spec:
      containers:
      - name: helper-pod
        image: ${NODE_REGISTRY}/tinycode-local/local-path-helper:${STANDIN_TAG}
        imagePullPolicy: IfNotPresent
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-path
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: rancher.io/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
EOF
}

# ---------------------------------------------------------------------------
# start / stop
# ---------------------------------------------------------------------------

node_wait() {
	local what=$1 process=$2 check=$3 timeout=${4:-$START_TIMEOUT} deadline
	deadline=$((SECONDS + timeout))
	while :; do
		[[ -z "$process" || -n "$(pid_of "$process")" ]] || node_fail "${process} exited while waiting for ${what}"
		"$check" && return 0
		((SECONDS < deadline)) || node_fail "${what} not reached within ${timeout}s"
		sleep 0.25
	done
}

node_fail() {
	local d
	for d in "${NODE_DAEMONS[@]}"; do
		[[ -s "${CLUSTER_DIR}/${d}.log" ]] && show_log_tail "$d" "${CLUSTER_DIR}/${d}.log" 15
	done
	log "stopping whatever was started"
	node_stop_all || true
	die "$1 (logs above)"
}

node_etcd_healthy() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	in_node bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "GET /health HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
		_ "$ETCD_CLIENT_PORT" 2>/dev/null | grep -q '"health":"true"'
}

node_healthy() {
	local d
	for d in "${NODE_DAEMONS[@]}"; do
		[[ -n "$(pid_of "$d")" ]] || return 1
	done
	apiserver_ready && node_ready
}

node_start() {
	local started=$SECONDS
	mkdir -p "$CLUSTER_DIR"
	chmod 700 "$CLUSTER_DIR"
	: >"${CLUSTER_DIR}/${MARKER_FILE}"
	STANDIN_TAG=$(basename "$(dirname "$STANDIN_BIN")")
	STANDIN_TAG=${STANDIN_TAG#standin-}
	printf '%s\n' "$STANDIN_TAG" >"${CLUSTER_DIR}/standin.tag"
	(umask 077 && generate_pki && generate_node_pki)
	(umask 077 && write_kubeconfig)
	local c
	for c in kubelet kube-controller-manager kube-scheduler kube-proxy coredns local-path-provisioner kube-router; do
		(umask 077 && node_kubeconfig "$c")
	done
	create_netns

	log "starting etcd ${ETCD_VERSION} inside the node's network namespace"
	mkdir -p "${CLUSTER_DIR}/etcd-data"
	chmod 700 "${CLUSTER_DIR}/etcd-data"
	node_daemon etcd "$ETCD_BIN" --name=tinycode --data-dir="${CLUSTER_DIR}/etcd-data" \
		--listen-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
		--advertise-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
		--listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-cluster="tinycode=http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-cluster-state=new --unsafe-no-fsync --log-level=warn
	node_wait "etcd health" etcd node_etcd_healthy

	write_audit_policy
	log "starting kube-apiserver ${KUBE_VERSION} on ${NODE_IP}:${APISERVER_PORT} (published on ${LOOPBACK}:${APISERVER_PORT})"
	local pki="${CLUSTER_DIR}/pki"
	node_daemon kube-apiserver "$KUBE_APISERVER_BIN" \
		--advertise-address="$NODE_IP" \
		--bind-address=0.0.0.0 \
		--secure-port="$APISERVER_PORT" \
		--etcd-servers="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
		--tls-cert-file="${pki}/apiserver.crt" \
		--tls-private-key-file="${pki}/apiserver.key" \
		--client-ca-file="${pki}/ca.crt" \
		--kubelet-client-certificate="${pki}/apiserver-kubelet-client.crt" \
		--kubelet-client-key="${pki}/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="${pki}/ca.crt" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-key-file="${pki}/sa.pub" \
		--service-account-signing-key-file="${pki}/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc \
		--api-audiences=https://kubernetes.default.svc \
		--service-cluster-ip-range="$NODE_SERVICE_CIDR" \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction \
		--allow-privileged=true \
		--enable-priority-and-fairness=false \
		--profiling=false \
		--audit-policy-file="${CLUSTER_DIR}/audit-policy.yaml" \
		--audit-log-path="${CLUSTER_DIR}/audit.log" \
		--audit-log-maxsize=2000 \
		--audit-log-maxbackup=1

	log "publishing ${LOOPBACK}:${APISERVER_PORT} (API), ${LOOPBACK}:${NODE_REGISTRY_PORT} (registry) and ${LOOPBACK}:${NODE_INGRESS_PORT} (ingress) on this machine"
	setsid python3 "${REPO_ROOT}/hack/lib/netns-forward.py" "/run/netns/${NODE_NETNS}" \
		"${LOOPBACK}:${APISERVER_PORT}=127.0.0.1:${APISERVER_PORT}" \
		"${LOOPBACK}:${NODE_REGISTRY_PORT}=127.0.0.1:${NODE_REGISTRY_PORT}" \
		"${LOOPBACK}:${NODE_PRIVATE_REGISTRY_PORT}=127.0.0.1:${NODE_PRIVATE_REGISTRY_PORT}" \
		"${LOOPBACK}:${NODE_INGRESS_PORT}=${INGRESS_SERVICE_IP}:443" \
		</dev/null >"${CLUSTER_DIR}/netns-forward.log" 2>&1 8>&- 9>&- &
	printf '%s\n' "$!" >"${CLUSTER_DIR}/netns-forward.pid"
	node_wait "kube-apiserver /readyz" kube-apiserver apiserver_ready

	apply_node_objects
	start_registry
	node_wait "the registry" registry registry_ready 30
	node_wait "the private registry" registry-private private_registry_ready 30
	push_standin_images

	start_containerd
	node_wait "containerd's socket" containerd containerd_ready 30
	start_kubelet
	start_controller_manager
	start_scheduler
	start_kube_proxy
	start_coredns
	start_local_path_provisioner
	node_daemon standin "$STANDIN_BIN" serve "${METADATA_IP}:80" "metadata stand-in: instance-id i-tinycode-local"
	start_git_server
	start_oidc_provider
	node_wait "node ${NODE_NAME} Ready" kubelet node_ready 90
	# kube-router finds its node by name: only once the kubelet registered it.
	start_kube_router_ready
	apply_ingress_controller
	node_wait "cluster DNS" coredns coredns_ready 30
	node_wait "the git server" git-daemon git_server_ready 30
	node_wait "the OpenID Connect provider" mockoidc-server oidc_provider_ready 30
	# Pods need their namespace's ServiceAccount (the controller-manager's).
	node_wait "ServiceAccount default/default" kube-controller-manager default_service_account 30
	node_wait "the ingress controller (Traefik ${TRAEFIK_VERSION})" kubelet ingress_ready 120
	log "node ready in $((SECONDS - started))s (state: ${CLUSTER_DIR}; namespace ${NODE_NETNS})"
}

# What `start --node` prints before its export line.
node_print() {
	printf 'TINYCODE_NODE_REGISTRY=%s\n' "$NODE_REGISTRY"
	printf 'TINYCODE_METADATA_URL=http://%s/\n' "$METADATA_IP"
	printf 'TINYCODE_GIT_URL=%s\n' "$GIT_URL"
	printf 'TINYCODE_OIDC_ISSUER_URL=%s\n' "$(oidc_issuer)"
	printf 'TINYCODE_OIDC_CLIENT_ID=%s\n' "$OIDC_CLIENT_ID"
	printf 'TINYCODE_OIDC_CLIENT_SECRET_FILE=%s\n' "${CLUSTER_DIR}/oidc-client-secret"
	printf 'TINYCODE_OIDC_QUEUE_URL=%s/queue-user\n' "$OIDC_ADMIN_URL"
	printf 'TINYCODE_PRIVATE_IMAGE=%s/private/tinycode-container:v1\n' "$NODE_PRIVATE_REGISTRY"
	printf 'TINYCODE_PRIVATE_REGISTRY_AUTH=%s\n' "${CLUSTER_DIR}/registry-private.auth"
	printf 'TINYCODE_INGRESS_URL=https://localhost:%s/\n' "$NODE_INGRESS_PORT"
	printf 'TINYCODE_INGRESS_NAMESPACE=%s\n' "$INGRESS_NAMESPACE"
	printf 'TINYCODE_NODE_NETNS=/run/netns/%s\n' "$NODE_NETNS"
	printf 'TINYCODE_INGRESS_CA=%s\n' "${CLUSTER_DIR}/pki/ca.crt"
	printf 'TINYCODE_INGRESS_TLS_CERT=%s\n' "${CLUSTER_DIR}/pki/ingress-default.crt"
	printf 'TINYCODE_INGRESS_TLS_KEY=%s\n' "${CLUSTER_DIR}/pki/ingress-default.key"
	printf 'TINYCODE_STANDIN_IMAGE=%s/tinycode-local/tinycode-standin:%s\n' "$NODE_REGISTRY" \
		"$(cat "${CLUSTER_DIR}/standin.tag" 2>/dev/null)"
}

# kill_pods: every process of every container (they live in the kubelet's
# cgroups, in network namespaces of their own, and outlive containerd's shims).
kill_pods() {
	local procs
	[[ -d /sys/fs/cgroup/pids/kubepods ]] || return 0
	procs=$(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
	# shellcheck disable=SC2086 # one pid a word
	[[ -n "$procs" ]] && kill -KILL $procs 2>/dev/null || true
}

node_stop_all() {
	local i
	# The kubelet first, so that it restarts nothing; then the pods.
	stop_process kubelet || true
	kill_pods
	for ((i = ${#NODE_DAEMONS[@]} - 1; i >= 0; i--)); do
		stop_process "${NODE_DAEMONS[i]}" || true
	done
	# containerd's shims live on after containerd.
	delete_netns
	kill_pods
	# Mounts the kubelet made for pods' volumes (tmpfs for Secrets, projected
	# tokens) live in the holder's mount namespace, gone with it; the cgroups
	# of pods remain: remove the empty ones.
	local sub
	for sub in /sys/fs/cgroup/*/kubepods; do
		[[ -d "$sub" ]] && find "$sub" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	remove_state
}
