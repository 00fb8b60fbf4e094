#!/usr/bin/env bash
# Benchmark: N instances against the local control plane, with the real
# operator (as its ServiceAccount) and real helm. Prints figures; asserts nothing.
#
#   hack/bench.sh [N]            (default 100; BENCH_PROFILE=debug for a debug build)
#
# Figures: time until every instance has a Helm release and until every one is
# Running (tinycode-local simulate plays the kubelet and the router), helm time
# and CPU per run, reconciles and API requests (by verb, from the apiserver's
# apiserver_request_total; the bench's own polling is included) per instance,
# CPU seconds of the operator, of helm (the operator's reaped children), of
# kube-apiserver and of etcd, the operator's peak RSS; a 60 s idle period
# (reconciles, helm runs, and the operator's requests and writes counted in the
# apiserver's audit log); a restarted operator resyncing all instances (time,
# helm runs, status writes); an operator upgrade (a new chart version)
# re-rendering all; deleting all; a fixed workload's wall time before and
# after the rollout (the machine's speed, see reference()). BENCH_CONCURRENCY sets --concurrency;
# BENCH_QUICK=1 stops after the rollout (one line of figures, for repeats);
# BENCH_DELETE=0 and BENCH_UPGRADE=0 skip those phases; BENCH_HEAP_PROFILE=1 runs an
# operator built with heap profiling (dhat), which writes target/dhat-heap.json
# (what was allocated where at the heap's peak) when it stops. BENCH_IDLE=1
# gives every instance an idle timeout (8h, never reached) and serves their
# activity reports from a loopback stand-in, so the idle period shows what the
# activity checks cost (the stand-in counts the requests). BENCH_CLASS=1 makes
# a default TinycodeClass with defaults, caps and a per-namespace limit above
# N apply to every instance (all in one namespace: the limit's count reads
# every instance there on each reconcile, the worst case). BENCH_NAMESPACES=K
# spreads the instances over K prepared namespaces. BENCH_RESULT=FILE
# writes the rollout's figures there as key=value lines (hack/bench-flux.sh
# reads them). BENCH_HELM_PROFILE=DIR: every helm run writes its CPU profile
# (helm's own HELM_PPROF_CPU_PROFILE) into DIR; `go tool pprof -top DIR/*`
# merges them (where a release's helm CPU goes; process start-up before helm's
# main is not in them). BENCH_BUSY=PCT: the activity stand-in (as BENCH_IDLE's)
# answers `busy` for PCT% of the instances (every 100/PCT-th), and the operator
# upgrade phase reports when the others were re-rendered, checks that no busy
# one was before its deadline (BENCH_BUSY_DEADLINE, default 300s) and reports
# when they were (README.md, "Rollouts that wait").
set -euo pipefail

N=${1:-100}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROFILE=${BENCH_PROFILE:-release}
NS=bench-$$
STATE=$(mktemp -d /tmp/tinycode-bench.XXXXXX)
# The operator's TMPDIR (where its helm home lives) is memory-backed, as the
# emptyDir at /tmp of config/manager/manager.yaml is.
OP_TMP=$(mktemp -d /dev/shm/tinycode-bench.XXXXXX)
HEALTH=127.0.0.1:18581
METRICS=127.0.0.1:18583

log() { printf 'bench: %s\n' "$*" >&2; }
CONCURRENCY=${BENCH_CONCURRENCY:-}
if [[ -n $CONCURRENCY ]]; then export TINYCODE_CONCURRENCY=$CONCURRENCY; fi
CLUSTER_DIR=${TINYCODE_CLUSTER_DIR:-/tmp/tinycode-local-cluster}
# shellcheck source=hack/lib/bench.sh
. "$ROOT/hack/lib/bench.sh"
audit_mark() { stat -c %s "$CLUSTER_DIR/audit.log" 2>/dev/null || echo 0; }
# audit_since OFFSET: "requests writes status-writes" of the operator (and its
# helm) since OFFSET, leases and watches left out.
audit_since() {
	python3 - "$CLUSTER_DIR/audit.log" "$1" <<-'EOF'
	import json, sys
	path, offset = sys.argv[1], int(sys.argv[2])
	with open(path, "rb") as f:
	    f.seek(offset)
	    data = f.read()
	requests = writes = status = 0
	for line in data.splitlines():
	    try:
	        e = json.loads(line)
	    except ValueError:
	        continue
	    o = e.get("objectRef", {})
	    if e.get("verb") == "watch" or o.get("resource") == "leases":
	        continue
	    requests += 1
	    if e.get("verb") in ("create", "update", "patch", "delete", "deletecollection"):
	        writes += 1
	        status += o.get("resource") == "tinycodeinstances" and o.get("subresource") == "status"
	print(requests, writes, status)
	EOF
}
requests_by_verb() {
	"$K" get --raw /metrics | awk '/^apiserver_request_total\{/ { if (match($0, /verb="[A-Z]+"/)) { v = substr($0, RSTART + 6, RLENGTH - 7); s[v] += $NF } }
		END { for (v in s) printf "%s %d\n", v, s[v] }' | sort
}

eval "$(hack/local-cluster.sh tools)"
eval "$(hack/local-cluster.sh start)"
K=$TINYCODE_KUBECTL
if [[ $PROFILE == release ]]; then cargo build --quiet --release --workspace --bins; else cargo build --quiet --workspace --bins; fi
if [[ ${BENCH_HEAP_PROFILE:-} == 1 ]]; then # the operator writes target/dhat-heap.json when it stops
	if [[ $PROFILE == release ]]; then cargo build --quiet --release -p tinycode-operator --features heap-profile; else cargo build --quiet -p tinycode-operator --features heap-profile; fi
fi
BIN=$ROOT/target/$PROFILE
# BENCH_NAMESPACES=K spreads the instances over K prepared namespaces
# ($NS-1 .. $NS-K, instance i in namespace (i-1) mod K + 1), as tenants
# would be; the default, one namespace, is the worst case for the apiserver:
# it authorizes each request of the operator in a namespace by walking every
# RoleBinding there, and each instance brings its own.
NAMESPACES=${BENCH_NAMESPACES:-1}
namespaces=("$NS")
if ((NAMESPACES > 1)); then
	namespaces=()
	for k in $(seq 1 "$NAMESPACES"); do namespaces+=("$NS-$k"); done
fi
for ns in "${namespaces[@]}"; do
	"$BIN/tinycode-local" setup --namespace "$ns" --operator-kubeconfig "$STATE/operator.kubeconfig" 2>/dev/null
done

op=
CHART=$ROOT/helm-charts/tinycode
HELM=$TINYCODE_HELM
if [[ -n ${BENCH_HELM_PROFILE:-} ]]; then
	mkdir -p "$BENCH_HELM_PROFILE"
	HELM=$STATE/helm-profiled
	printf '#!/bin/sh\nHELM_PPROF_CPU_PROFILE=%q/helm-$$.pprof exec %q "$@"\n' "$(cd "$BENCH_HELM_PROFILE" && pwd)" "$TINYCODE_HELM" >"$HELM"
	chmod +x "$HELM"
fi
# The operator and its helm reach the apiserver as in a pod: in-cluster
# configuration (KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount's token and
# CA at /run/secrets/kubernetes.io/serviceaccount, mounted in a private mount
# namespace), HOME and TMPDIR in the memory-backed directory. With a kubeconfig
# instead, every helm run parses it several times (about 6% of helm's CPU, a
# cost no pod has). Without the right to make a mount namespace (not root) the
# kubeconfig is used.
SA=$STATE/serviceaccount
mkdir -p "$SA"
python3 - "$STATE/operator.kubeconfig" "$SA" <<-'EOF'
	import base64, json, sys
	config, out = json.load(open(sys.argv[1])), sys.argv[2]  # tinycode-local writes it as JSON
	cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
	open(f"{out}/token", "w").write(user["token"])
	open(f"{out}/ca.crt", "wb").write(base64.b64decode(cluster["certificate-authority-data"]))
	open(f"{out}/namespace", "w").write("tinycode-operator-system")
	host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
	open(f"{out}/server", "w").write(f"{host} {port}\n")
	EOF
read -r SA_HOST SA_PORT <"$SA/server"
if unshare --mount --propagation private true 2>/dev/null; then IN_CLUSTER=1; else IN_CLUSTER=0; fi
log "the operator's API configuration: $( ((IN_CLUSTER)) && echo in-cluster || echo kubeconfig)"
start_operator() {
	# TINYCODE_METRICS_AUTH=none: the bench reads /metrics with plain curl on
	# loopback; the default (rbac) would also add TokenReview and
	# SubjectAccessReview calls to the API load this script measures. Never
	# in production (docs/monitoring.md).
	local env=("HELM_BIN=$HELM" "HELM_CHART_PATH=$CHART" "HOME=$OP_TMP" "TMPDIR=$OP_TMP"
		"TINYCODE_HEALTH_ADDR=$HEALTH" "TINYCODE_METRICS_ADDR=$METRICS" TINYCODE_METRICS_AUTH=none
		TINYCODE_OIDC_RELAY_ADDR=127.0.0.1:0
		POD_NAME=bench "RUST_LOG=warn,tinycode_operator::reconcile=info" NO_COLOR=1)
	# Without the stand-in, a port on loopback that refuses: the default
	# address (<service>.<namespace>.svc) would be looked up in the machine's
	# resolver, off loopback, by every re-render that asks whether an agent is busy.
	local activity=$ACTIVITY_URL
	if [[ -z $activity ]]; then activity='http://127.0.0.1:1/{namespace}/{name}'; fi
	env+=("TINYCODE_ACTIVITY_URL=$activity" TINYCODE_VLLM_ALLOW_LOOPBACK=true)
	env+=("TINYCODE_ROLLOUT_BUSY_DEADLINE=$BUSY_DEADLINE")
	if ((IN_CLUSTER)); then
		# The inner scripts take their paths as arguments ($1..$3), unexpanded here.
		# shellcheck disable=SC2016
		env -u KUBECONFIG "${env[@]}" KUBERNETES_SERVICE_HOST="$SA_HOST" KUBERNETES_SERVICE_PORT="$SA_PORT" \
			unshare --mount --propagation private bash -c 'mount -t tmpfs -o size=1m tmpfs /run &&
				mkdir -p /run/secrets/kubernetes.io/serviceaccount &&
				cp "$3"/token "$3"/ca.crt "$3"/namespace /run/secrets/kubernetes.io/serviceaccount/ &&
				cd "$1/target" && exec "$2" run' _ "$ROOT" "$BIN/tinycode-operator" "$SA" >>"$STATE/operator.log" 2>&1 &
	else
		# shellcheck disable=SC2016
		env KUBECONFIG="$STATE/operator.kubeconfig" "${env[@]}" \
			bash -c 'cd "$1/target" && exec "$2" run' _ "$ROOT" "$BIN/tinycode-operator" >>"$STATE/operator.log" 2>&1 &
	fi
	op=$!
	until curl -sf "http://$HEALTH/readyz" | grep -qx ready; do
		kill -0 "$op" 2>/dev/null || { log "the operator exited:"; tail -5 "$STATE/operator.log" >&2; exit 1; }
		sleep 0.2
	done
}
stop_operator() { kill -TERM "$op" 2>/dev/null || true; wait "$op" 2>/dev/null || true; }
sim=
# A default class left behind would apply to whatever runs on this control plane next.
trap 'if [[ -n "$sim" ]]; then kill "$sim" 2>/dev/null || true; fi; if [[ -n "${standin:-}" ]]; then kill "$standin" 2>/dev/null || true; fi; stop_operator; "$K" delete tinycodeclass bench-default --ignore-not-found >/dev/null 2>&1 || true; cp "$STATE/operator.log" "$ROOT/target/bench-operator.log" 2>/dev/null || true; rm -rf "$STATE" "$OP_TMP"' EXIT

metric() { # sum of the samples of a series prefix
	curl -s "http://$METRICS/metrics" | awk -v p="$1" 'index($0, p) == 1 { s += $NF } END { printf "%.3f\n", s + 0 }'
}
# Progress from the operator's own metrics: polling the apiserver for every
# instance twice a second would cost it more CPU than what is measured.
# Releases applied: first installs (`helm install`) and upgrades.
applied() { awk -v a="$(metric 'tinycode_operator_helm_invocations_total{action="install",result="success"}')" -v b="$(metric 'tinycode_operator_helm_invocations_total{action="upgrade",result="success"}')" 'BEGIN { print a + b }'; }
deployed() { applied | cut -d. -f1; }
# Reconcile outcomes other than success, as "reason=count ...".
failures() {
	curl -s "http://$METRICS/metrics" | awk '/^tinycode_operator_reconciles_total\{/ && !/result="success"/ { if (match($0, /result="[^"]*"/)) printf "%s=%d ", substr($0, RSTART + 8, RLENGTH - 9), $NF }'
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# BENCH_IDLE=1: every instance's activity report, from one loopback stand-in
# that appends a line per request to $STATE/activity.log.
ACTIVITY_URL='' IDLE_SPEC='' standin=''
BUSY=${BENCH_BUSY:-0}
BUSY_STEP=0 BUSY_N=0
if ((BUSY > 0)); then BUSY_STEP=$((100 / BUSY)) BUSY_N=$((N / (100 / BUSY))); fi
if [[ ${BENCH_IDLE:-} == 1 ]] || ((BUSY > 0)); then
	python3 - "$STATE/activity.log" "$STATE/activity.port" "$BUSY_STEP" <<-'EOF' &
	import datetime, http.server, sys
	log = open(sys.argv[1], "a", buffering=1)
	step = int(sys.argv[3])
	class Report(http.server.BaseHTTPRequestHandler):
	    protocol_version = "HTTP/1.1"
	    def do_GET(self):
	        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
	        name = self.path.rstrip("/").rsplit("/", 1)[-1]
	        k = int(name[1:]) if name[1:].isdigit() else -1
	        busy = "true" if step and k > 0 and k % step == 0 else "false"
	        body = ('{"lastActivity": "%s", "busy": %s}' % (now, busy)).encode()
	        self.send_response(200)
	        self.send_header("Content-Type", "application/json")
	        self.send_header("Content-Length", str(len(body)))
	        self.end_headers()
	        self.wfile.write(body)
	        log.write(self.path + "\n")
	    def log_message(self, *args):
	        pass
	server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Report)
	open(sys.argv[2], "w").write(str(server.server_address[1]))
	server.serve_forever()
	EOF
	standin=$!
	until [[ -s $STATE/activity.port ]]; do sleep 0.1; done
	ACTIVITY_URL="http://127.0.0.1:$(cat "$STATE/activity.port")/{namespace}/{name}"
	if [[ ${BENCH_IDLE:-} == 1 ]]; then IDLE_SPEC=', idle: {timeout: 8h}'; fi
fi
BUSY_DEADLINE=${BENCH_BUSY_DEADLINE:-300s}
activity_requests() { if [[ -f $STATE/activity.log ]]; then wc -l <"$STATE/activity.log"; else echo 0; fi; }
"$K" delete tinycodeclass bench-default --ignore-not-found >/dev/null
if [[ ${BENCH_CLASS:-} == 1 ]]; then
	"$K" apply -f - >/dev/null <<-EOF
	apiVersion: tinycode.dev/v1alpha1
	kind: TinycodeClass
	metadata: {name: bench-default}
	spec:
	  default: true
	  tinycode:
	    defaults: {requests: {cpu: 200m, memory: 512Mi}, limits: {cpu: "2", memory: 2Gi}}
	    max: {cpu: "4", memory: 8Gi}
	  storage: {maxDataSize: 5Gi, maxProjectsSize: 50Gi}
	  permittedModes: [git, ollama]
	  maxInstancesPerNamespace: $((N + 1))
	EOF
fi
start_operator
log "creating $N instances in ${namespaces[*]}"
for i in $(seq 1 "$N"); do
	printf -- '---\napiVersion: tinycode.dev/v1alpha1\nkind: TinycodeInstance\nmetadata: {name: i%d, namespace: %s}\nspec: {auth: {passwordSecret: tinycode-password}%s}\n' "$i" "${namespaces[$(((i - 1) % NAMESPACES))]}" "$IDLE_SPEC"
done >"$STATE/instances.yaml"
"$BIN/tinycode-local" simulate >"$STATE/simulate.log" 2>&1 &
sim=$!
api_pid=$(cat "$CLUSTER_DIR/kube-apiserver.pid")
etcd_pid=$(cat "$CLUSTER_DIR/etcd.pid")
ref0=$(reference "$OP_TMP")
req0=$(requests_by_verb)
rec0=$(metric tinycode_operator_reconciles_total)
op0=$(cpu "$op" own) helm0=$(cpu "$op" children) api0=$(cpu "$api_pid" own) etcd0=$(cpu "$etcd_pid" own)
t0=$(now)
"$K" apply -f "$STATE/instances.yaml" >/dev/null
# A rollout that stops progressing for 20 s is reported as it happens: the
# reconcile outcomes so far and the helm processes running, with their ages.
last=-1 still=0
d=0 tree_peak_kb=0
until [[ $d -ge $N ]]; do
	sleep 0.5
	d=$(deployed)
	# shellcheck disable=SC2046 # one PID per word
	kb=$(pss_kb "$op" $(ps -o pid= --ppid "$op" 2>/dev/null))
	((kb > tree_peak_kb)) && tree_peak_kb=$kb
	if [[ $d == "$last" ]]; then still=$((still + 1)); else last=$d still=0; fi
	if [[ $still == 40 ]]; then
		log "no release deployed for 20 s at $d of $N: reconcile results $(failures); helm running: $(ps -o etimes=,args= --ppid "$op" | awk '{ printf "%ss %s; ", $1, $4 }')"
	fi
done
install_s=$(since "$t0")
running() { metric 'tinycode_operator_instances{phase="Running"}' | cut -d. -f1; }
until [[ $(running) -ge $N ]]; do sleep 0.5; done
running_s=$(since "$t0")
req1=$(requests_by_verb)
rec1=$(metric tinycode_operator_reconciles_total)
op1=$(cpu "$op" own) helm1=$(cpu "$op" children) api1=$(cpu "$api_pid" own) etcd1=$(cpu "$etcd_pid" own)
kill "$sim" 2>/dev/null || true
wait "$sim" 2>/dev/null || true
sim=
ref1=$(reference "$OP_TMP")
helm_runs=$(applied)
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
if [[ -n ${BENCH_RESULT:-} ]]; then
	printf 'deployed_s=%s\nrunning_s=%s\ncpu_operator=%s\ncpu_helm=%s\ncpu_apiserver=%s\ncpu_etcd=%s\npeak_rss_mib=%d\npeak_tree_pss_mib=%d\nreleases=%s\nreference=%s/%s\n' \
		"$install_s" "$running_s" "$(sub "$op0" "$op1")" "$(sub "$helm0" "$helm1")" "$(sub "$api0" "$api1")" "$(sub "$etcd0" "$etcd1")" \
		"$(( $(awk '/VmHWM/ { print $2 }' "/proc/$op/status") / 1024 ))" "$((tree_peak_kb / 1024))" "$helm_runs" "$ref0" "$ref1" >"$BENCH_RESULT"
fi
if [[ ${BENCH_QUICK:-} == 1 ]]; then # rollout figures only (for repeated runs)
	printf 'instances %d in %d namespace(s)  concurrency %s  deployed %s s  Running %s s  peak RSS %d MiB (with helm, PSS %d MiB)  CPU operator/helm/apiserver/etcd %s / %s / %s / %s  reconciles per instance %s  reference %s / %s s  failed reconciles: %s\n' "$N" "$NAMESPACES" "${CONCURRENCY:-default}" "$install_s" "$running_s" \
		"$(( $(awk '/VmHWM/ { print $2 }' "/proc/$op/status") / 1024 ))" "$((tree_peak_kb / 1024))" \
		"$(sub "$op0" "$op1")" "$(sub "$helm0" "$helm1")" "$(sub "$api0" "$api1")" "$(sub "$etcd0" "$etcd1")" \
		"$(awk -v a="$rec0" -v b="$rec1" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')" "$ref0" "$ref1" "$(failures)"
	exit 0
fi
helm_sum=$(awk -v a="$(metric 'tinycode_operator_helm_duration_seconds_sum{action="install"}')" -v b="$(metric 'tinycode_operator_helm_duration_seconds_sum{action="upgrade"}')" 'BEGIN { print a + b }')

peak_kb=$(awk '/VmHWM/ { print $2 }' "/proc/$op/status")
sleep 5 # the last status writes of the rollout settle
# BENCH_IDLE=1: the first check of each instance (within two check intervals
# of its Running) records once what its activity is judged by; the idle
# period measures the checks after that.
if [[ ${BENCH_IDLE:-} == 1 ]]; then sleep 125; fi
r0=$(metric tinycode_operator_reconciles_total)
h0=$(metric tinycode_operator_helm_invocations_total)
a0=$(audit_mark)
idle_cpu0=$(cpu "$op" own) act0=$(activity_requests)
sleep 60
idle_cpu1=$(cpu "$op" own) act1=$(activity_requests)
r1=$(metric tinycode_operator_reconciles_total)
h1=$(metric tinycode_operator_helm_invocations_total)
read -r idle_req idle_writes _ < <(audit_since "$a0")

stop_operator
t1=$(now)
a1=$(audit_mark)
start_operator
until [[ $(metric 'tinycode_operator_reconciles_total{result="success"}' | cut -d. -f1) -ge $N ]]; do sleep 0.2; done
resync_s=$(since "$t1")
resync_helm=$(metric tinycode_operator_helm_invocations_total)
read -r resync_req _ resync_status < <(audit_since "$a1")
rss_now_kb=$(awk '/VmRSS/ { print $2 }' "/proc/$op/status")
sleep 2 # the resync's burst is over: what the operator keeps
rss_kb=$(awk '/VmRSS/ { print $2 }' "/proc/$op/status")
rss_split=$(awk '/RssAnon|RssFile/ { printf "%s %d MiB ", $1, $2 / 1024 }' "/proc/$op/status")

# An operator upgrade: the same operator with a chart whose version changed
# re-renders every instance through the worker pool (BENCH_UPGRADE=0 skips it).
upgrade_s=skipped
if [[ ${BENCH_UPGRADE:-1} == 1 ]]; then
	stop_operator
	cp -r "$ROOT/helm-charts/tinycode" "$STATE/chart"
	sed -i 's/^version:.*/version: 99.0.0/' "$STATE/chart/Chart.yaml"
	CHART=$STATE/chart
	t3=$(now)
	start_operator
	if ((BUSY_N > 0)); then
		# The instances whose agents are not busy first; then no busy one
		# before its deadline (each counts from when it was first held, no
		# earlier than t3), the most seen waiting at once; then the rest.
		until [[ $(deployed) -ge $((N - BUSY_N)) ]]; do sleep 0.5; done
		calm_s=$(since "$t3")
		limit=$(awk -v t="$t3" -v d="${BUSY_DEADLINE%s}" 'BEGIN { printf "%.1f", t + d - 2 }')
		early=0 waiting_max=0
		while awk -v a="$(now)" -v b="$limit" 'BEGIN { exit !(a < b) }'; do
			d=$(deployed)
			((d > N - BUSY_N)) && early=$((d - (N - BUSY_N)))
			w=$(metric tinycode_operator_rollouts_waiting | cut -d. -f1)
			((w > waiting_max)) && waiting_max=$w
			sleep 1
		done
		until [[ $(deployed) -ge $N ]]; do sleep 0.5; done
		upgrade_s="$(since "$t3") (the $((N - BUSY_N)) not busy: $calm_s s; the $BUSY_N busy, deadline $BUSY_DEADLINE: re-rendered before it $early, waiting at most $waiting_max at once)"
	else
		until [[ $(deployed) -ge $N ]]; do sleep 0.5; done # a fresh process: every upgrade is a re-render
		upgrade_s=$(since "$t3")
	fi
fi

delete_s=skipped
if [[ ${BENCH_DELETE:-1} == 1 ]]; then
	t2=$(now)
	for ns in "${namespaces[@]}"; do "$K" delete tinycodeinstances --all -n "$ns" --wait=false >/dev/null; done
	for ns in "${namespaces[@]}"; do "$K" wait tinycodeinstances --all -n "$ns" --for=delete --timeout=900s >/dev/null; done
	delete_s=$(since "$t2")
fi

printf '\ninstances                          %d\n' "$N"
printf 'all releases deployed after        %s s (concurrency %s)\n' "$install_s" "${CONCURRENCY:-default}"
printf 'all Running after                  %s s\n' "$running_s"
printf 'reference workload before / after  %s / %s s (the machine'"'"'s speed)\n' "$ref0" "$ref1"
printf 'reconciles per instance            %s\n' "$(awk -v a="$rec0" -v b="$rec1" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')"
printf 'failed reconciles by reason        %s\n' "$(failures)"
printf 'API requests per instance by verb  %s\n' "$(join -a2 -e0 -o 0,1.2,2.2 <(echo "$req0") <(echo "$req1") | awk -v n="$N" '{ printf "%s %.1f  ", $1, ($3 - $2) / n }')"
printf 'CPU s: operator / helm / apiserver / etcd  %s / %s / %s / %s\n' \
	"$(awk -v a="$op0" -v b="$op1" 'BEGIN { printf "%.1f", b - a }')" "$(awk -v a="$helm0" -v b="$helm1" 'BEGIN { printf "%.1f", b - a }')" \
	"$(awk -v a="$api0" -v b="$api1" 'BEGIN { printf "%.1f", b - a }')" "$(awk -v a="$etcd0" -v b="$etcd1" 'BEGIN { printf "%.1f", b - a }')"
printf 'helm runs / mean duration          %.0f / %s s, CPU per run %s s\n' "$helm_runs" "$(awk -v s="$helm_sum" -v n="$helm_runs" 'BEGIN { printf "%.2f", n ? s / n : 0 }')" \
	"$(awk -v a="$helm0" -v b="$helm1" -v n="$helm_runs" 'BEGIN { printf "%.2f", n ? (b - a) / n : 0 }')"
printf 'operator peak RSS (rollout)        %d MiB\n' "$((peak_kb / 1024))"
printf 'idle 60 s: reconciles / helm runs  %.0f / %.0f; operator requests / writes %s / %s\n' "$(awk -v a="$r0" -v b="$r1" 'BEGIN { print b - a }')" "$(awk -v a="$h0" -v b="$h1" 'BEGIN { print b - a }')" "$idle_req" "$idle_writes"
printf 'idle 60 s: operator CPU / activity checks  %s s / %s (BENCH_IDLE=%s)\n' "$(awk -v a="$idle_cpu0" -v b="$idle_cpu1" 'BEGIN { printf "%.2f", b - a }')" "$((act1 - act0))" "${BENCH_IDLE:-0}"
printf 'restart: all resynced after        %s s, helm runs %.0f (must be 0), requests %s, status writes %s\n' "$resync_s" "$resync_helm" "$resync_req" "$resync_status"
printf 'operator RSS after resync          %d MiB (%d MiB as the last reconcile ended; %s)\n' "$((rss_kb / 1024))" "$((rss_now_kb / 1024))" "$rss_split"
printf 'operator upgrade: all re-rendered  %s s\n' "$upgrade_s"
printf 'all deleted after                  %s s\n' "$delete_s"
printf '\nhelm runs by reason (whole run):\n'
sed -n 's/.*applying helm release.*reason=\(.*\)$/\1/p; s/.*reason=\(.*\) applying helm release.*/\1/p' "$STATE/operator.log" | sed 's/[0-9a-f]\{6,\}/#/g; s/bench-[0-9]*/NS/g; s/i[0-9]*-tinycode/iN-tinycode/g' | sort | uniq -c | sort -rn | head -12
