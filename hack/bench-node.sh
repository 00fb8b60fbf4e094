#!/usr/bin/env bash
# Benchmarks of the local node (hack/local-cluster.sh --node); not a test, CI
# does not run it. Results go to docs/benchmarks.md by hand.
#
# Usage: hack/bench-node.sh [start|ready|url|memory|all]
#   start   a cached node's start to Ready, BENCH_STARTS times (default 3):
#           stops the node before each run
#   ready   the basic sample from apply to Running (its pod Ready by its
#           probes, status written), BENCH_N times (default 10) on a running
#           node with the operator installed (as tools/tests/node.rs leaves it,
#           or `make run-local`); each round deletes the instance and its
#           namespace's PVCs first
#   url     startup as the user sees it: the basic sample (with a host name
#           under *.apps.localhost and the node's certificate) from apply to
#           its UI answering 200 with the password through the URL, via the
#           node's ingress controller on loopback, BENCH_N times (default 10);
#           also the time to Running of the same rounds. Needs the Kubernetes
#           platform with the ingress namespace admitted, as
#           `make run-local PLATFORM=kubernetes` leaves it
#   memory  the resident memory of every node process and of the pods
#           (containerd's shims and the containers), with the basic sample running
#
# Prints each measurement and the median, min and max.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NS=bench-node
log() { printf 'bench-node: %s\n' "$*" >&2; }

eval "$(hack/local-cluster.sh tools --node)"
K=$TINYCODE_KUBECTL

# stats VALUES...: median min max of numbers (seconds with decimals).
stats() {
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "median %.1f s, min %.1f s, max %.1f s (n=%d)\n", m, v[1], v[NR], NR }'
}

now() { date +%s.%N; }

bench_start() {
	local times=() i t0 t1
	for ((i = 1; i <= ${BENCH_STARTS:-3}; i++)); do
		hack/local-cluster.sh stop --node >/dev/null 2>&1
		t0=$(now)
		hack/local-cluster.sh start --node >/dev/null 2>&1
		t1=$(now)
		times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')")
		log "start ${i}: ${times[-1]} s"
	done
	printf 'cached node start to Ready: '
	stats "${times[@]}"
}

bench_ready() {
	eval "$(hack/local-cluster.sh start --node | grep '^export KUBECONFIG=')"
	"$K" get deployment tinycode-operator-manager -n tinycode-operator-system >/dev/null 2>&1 ||
		{ log "install the operator first (make run-local, or run tools/tests/node.rs)"; exit 1; }
	"$K" get namespace "$NS" >/dev/null 2>&1 || "$K" create namespace "$NS" >/dev/null
	KUBECTL=$K TINYCODE_PASSWORD=bench hack/prepare-namespace.sh "$NS" --password-from-env >/dev/null 2>&1
	local times=() i t0 phase
	for ((i = 1; i <= ${BENCH_N:-10}; i++)); do
		"$K" delete tinycodeinstance my-tinycode -n "$NS" --ignore-not-found --wait=true >/dev/null
		"$K" delete pvc --all -n "$NS" --wait=true >/dev/null
		t0=$(now)
		"$K" apply -n "$NS" -f config/samples/tinycode_v1alpha1_basic.yaml >/dev/null
		for _ in $(seq 1 1200); do
			phase=$("$K" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)
			[[ "$phase" == Running ]] && break
			sleep 0.1
		done
		[[ "$phase" == Running ]] || { log "round ${i}: not Running after 120 s"; exit 1; }
		times+=("$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')")
		log "round ${i}: ${times[-1]} s"
	done
	printf 'basic sample, apply to Running: '
	stats "${times[@]}"
}

bench_url() {
	local started
	started=$(hack/local-cluster.sh start --node)
	eval "$(grep '^export KUBECONFIG=' <<<"$started")"
	local port ca cert key
	port=$(sed -n 's|^TINYCODE_INGRESS_URL=https://localhost:\([0-9]*\)/$|\1|p' <<<"$started")
	ca=$(sed -n 's/^TINYCODE_INGRESS_CA=//p' <<<"$started")
	cert=$(sed -n 's/^TINYCODE_INGRESS_TLS_CERT=//p' <<<"$started")
	key=$(sed -n 's/^TINYCODE_INGRESS_TLS_KEY=//p' <<<"$started")
	"$K" get deployment tinycode-operator-manager -n tinycode-operator-system >/dev/null 2>&1 ||
		{ log "install the operator first (make run-local PLATFORM=kubernetes)"; exit 1; }
	if "$K" get crd routes.route.openshift.io >/dev/null 2>&1; then
		log "the cluster serves Routes (no router runs here): use make run-local PLATFORM=kubernetes first"
		exit 1
	fi
	"$K" get namespace "$NS" >/dev/null 2>&1 || "$K" create namespace "$NS" >/dev/null
	KUBECTL=$K TINYCODE_PASSWORD=bench hack/prepare-namespace.sh "$NS" --password-from-env >/dev/null 2>&1
	"$K" create secret tls bench-tls -n "$NS" --cert="$cert" --key="$key" --dry-run=client -o yaml | "$K" apply -f - >/dev/null
	local host="my-tinycode-${NS}.apps.localhost" running=() answered=() i t0 phase code t_run
	for ((i = 1; i <= ${BENCH_N:-10}; i++)); do
		"$K" delete tinycodeinstance my-tinycode -n "$NS" --ignore-not-found --wait=true >/dev/null
		"$K" delete pvc --all -n "$NS" --wait=true >/dev/null
		t0=$(now)
		sed "s/^  tlsTermination: edge\$/  hostname: ${host}\n  ingress: {tlsSecretName: bench-tls}/" \
			config/samples/tinycode_v1alpha1_basic.yaml | "$K" apply -n "$NS" -f - >/dev/null
		t_run=
		for _ in $(seq 1 1200); do
			if [[ -z "$t_run" ]]; then
				phase=$("$K" get tinycodeinstance my-tinycode -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null || true)
				[[ "$phase" == Running ]] && t_run=$(now)
			fi
			code=$(printf 'user = "tinycode:bench"\n' |
				curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$ca" -K - "https://${host}:${port}/" || true)
			[[ "$code" == 200 ]] && break
			sleep 0.1
		done
		[[ "$code" == 200 ]] || { log "round ${i}: the URL did not answer 200 in time (last: ${code})"; exit 1; }
		answered+=("$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')")
		running+=("$(awk -v a="$t0" -v b="${t_run:-$(now)}" 'BEGIN { printf "%.2f", b - a }')")
		log "round ${i}: Running after ${running[-1]} s, the URL answered after ${answered[-1]} s"
	done
	printf 'basic sample, apply to the UI answering through its URL: '
	stats "${answered[@]}"
	printf 'the same rounds, apply to Running: '
	stats "${running[@]}"
}

# rss PID...: the sum of their resident memory in MiB.
rss() {
	local total=0 p kb
	for p in "$@"; do
		kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/${p}/status" 2>/dev/null || echo 0)
		total=$((total + ${kb:-0}))
	done
	echo $((total / 1024))
}

bench_memory() {
	local dir=${TINYCODE_NODE_CLUSTER_DIR:-/tmp/tinycode-local-node} name pid total=0 m pods
	printf '%-26s %s\n' process MiB
	for f in "$dir"/*.pid; do
		name=$(basename "$f" .pid)
		[[ "$name" == holder ]] && continue
		pid=$(<"$f")
		m=$(rss "$pid")
		total=$((total + m))
		printf '%-26s %s\n' "$name" "$m"
	done
	# shellcheck disable=SC2046 # one pid a word
	m=$(rss $(pgrep -f containerd-shim || true))
	printf '%-26s %s\n' "containerd shims" "$m"
	total=$((total + m))
	pods=$(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
	# shellcheck disable=SC2086 # one pid a word
	m=$(rss $pods)
	printf '%-26s %s\n' "pods' processes" "$m"
	total=$((total + m))
	printf '%-26s %s\n' total "$total"
}

case "${1:-all}" in
start) bench_start ;;
ready) bench_ready ;;
url) bench_url ;;
memory) bench_memory ;;
all)
	bench_start
	bench_ready
	bench_memory
	;;
*)
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
	exit 2
	;;
esac
