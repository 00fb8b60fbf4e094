#!/usr/bin/env bash
# What one `helm upgrade --install` of the bundled chart costs, run the way the
# operator runs it (src/helm/mod.rs), for several flag/env sets side by side.
#
#   hack/helm-cost.sh [N] [REPS]
#
# For every config and every repetition: N first installs into fresh release
# names, then N no-change upgrades of the same releases. Per helm run it
# records wall time, helm's user+sys CPU and peak RSS (/usr/bin/time), the
# requests the apiserver counted (apiserver_request_total, by verb and
# resource) and the apiserver's and etcd's CPU (/proc/<pid>/stat). It prints
# median, min, max and mean per config and phase, the mean per repetition, and
# the request breakdown of one run by verb/resource.
#
# Configs are names joined by '+' (HELM_COST_CONFIGS, space-separated):
#   baseline        the operator's flags and env before this script existed:
#                   --namespace, --values (JSON), --history-max 5, --no-hooks,
#                   --output json; one HOME/HELM_*_HOME shared by all runs
#   fresh-home      a new empty HOME (and helm homes) for every run
#   no-openapi      --disable-openapi-validation
#   no-schema       --skip-schema-validation
#   tgz             the chart packaged once (helm package) instead of the directory
#   configmap       HELM_DRIVER=configmap (release records in ConfigMaps)
#   gogc            GOGC=400 (fewer garbage collections in the helm process);
#                   gogcN sets GOGC=N (gogc200, gogcoff)
#   maxprocs1       GOMAXPROCS=1
#   take-ownership  --take-ownership (what a migrating run adds)
#   history2        --history-max 2 instead of 5
#   no-kube-cache   KUBECACHEDIR where no directory can be made: client-go's
#                   discovery and HTTP disk caches write and re-read nothing
#   text-output     no --output json (helm prints its text summary)
#   slim-chart      the chart without its ci/ values files
#   no-schema-file  the chart without values.schema.json
#   no-comments     the chart without values.schema.json, its templates'
#                   comments emptied (as helm::installed_copy does)
#   lang-fr         LC_MESSAGES=fr_FR.UTF-8: the kubectl message catalog helm
#                   loads at start-up is 6 KB instead of 350 KB
#   shm-home        HOME (and the discovery cache in it) on tmpfs (/dev/shm)
#   kubectl-proxy   helm reaches the apiserver through `kubectl proxy` on
#                   loopback (plain HTTP to it, its kept TLS connections on)
#   api-proxy       helm reaches the apiserver through the operator's own
#                   loopback listener (src/helm/api_proxy.rs, run alone by
#                   examples/helm_api_proxy.rs): kept TLS connections,
#                   discovery answered from a copy, /apis with only the
#                   chart's groups
#   api-proxy-all   the same with every group in /apis
#   api-proxy-env   api-proxy, its URL given in HELM_KUBEAPISERVER instead of
#                   a kubeconfig (helm then parses no kubeconfig file)
# A proxy's CPU per run is its own column (with api-proxy it is the operator's).
# src/helm/mod.rs now runs what `no-openapi+no-schema+gogc+lang-fr` measures,
# with its home on the memory-backed /tmp of config/manager/manager.yaml
# (`shm-home`).
#
# The control plane is a private one (its own state dir and ports, so the
# apiserver's CPU is helm's alone) started by hack/local-cluster.sh and stopped
# at the end unless HELM_COST_KEEP=1. Everything talks to 127.0.0.1 only.
# HELM_COST_TRACE=1 adds one traced first install and no-change upgrade (helm
# -v=6: every request path client-go sends) for the first and the last config;
# apiserver_request_total leaves out GET /version (helm sends 3 per run).
set -euo pipefail

N=${1:-20}
REPS=${2:-2}
CONFIGS=${HELM_COST_CONFIGS:-baseline fresh-home no-openapi no-schema tgz configmap gogc no-openapi+no-schema no-openapi+no-schema+gogc}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART_DIR=$ROOT/helm-charts/tinycode
STORAGE_NS=tinycode-operator-system

export TINYCODE_CLUSTER_DIR=${TINYCODE_CLUSTER_DIR:-/tmp/tinycode-helmcost-cluster}
export TINYCODE_ETCD_CLIENT_PORT=${TINYCODE_ETCD_CLIENT_PORT:-23791}
export TINYCODE_ETCD_PEER_PORT=${TINYCODE_ETCD_PEER_PORT:-23801}
export TINYCODE_APISERVER_PORT=${TINYCODE_APISERVER_PORT:-16444}

log() { printf 'helm-cost: %s\n' "$*" >&2; }
die() { printf 'helm-cost: ERROR: %s\n' "$*" >&2; exit 1; }

[[ -x /usr/bin/time ]] || die "/usr/bin/time (GNU time) is needed: apt-get install time"
STATE=$(mktemp -d /tmp/tinycode-helmcost.XXXXXX)
SHM=$(mktemp -d /dev/shm/tinycode-helmcost.XXXXXX)
finish() {
	local pid
	for pid in ${KPROXY_PID:-} ${APROXY_PID:-} ${APROXY_ALL_PID:-}; do kill "$pid" 2>/dev/null || true; done
	rm -rf -- "$STATE" "$SHM"
	if [[ ${HELM_COST_KEEP:-0} != 1 ]]; then "$ROOT/hack/local-cluster.sh" stop >/dev/null 2>&1 || true; fi
}
trap finish EXIT

eval "$("$ROOT/hack/local-cluster.sh" tools)"
eval "$("$ROOT/hack/local-cluster.sh" start)"
K=$TINYCODE_KUBECTL
HELM=$TINYCODE_HELM
KCFG=$KUBECONFIG
API_PID=$(cat "$TINYCODE_CLUSTER_DIR/kube-apiserver.pid")
ETCD_PID=$(cat "$TINYCODE_CLUSTER_DIR/etcd.pid")
TICKS=$(getconf CLK_TCK)
"$K" create namespace "$STORAGE_NS" --dry-run=client -o yaml | "$K" apply -f - >/dev/null

# CPU ticks (user+sys) a process has used; the name may hold spaces.
ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

# apiserver_request_total summed as VERB:group/resource[/subresource] COUNT.
scrape() {
	"$K" get --raw /metrics | awk '
		/^apiserver_request_total\{/ {
			v = ""; g = ""; r = ""; s = ""
			if (match($0, /verb="[^"]*"/)) v = substr($0, RSTART + 6, RLENGTH - 7)
			if (match($0, /group="[^"]*"/)) g = substr($0, RSTART + 7, RLENGTH - 8)
			if (match($0, /[{,]resource="[^"]*"/)) r = substr($0, RSTART + 11, RLENGTH - 12)
			if (match($0, /subresource="[^"]*"/)) s = substr($0, RSTART + 13, RLENGTH - 14)
			key = v ":" (g == "" ? "core" : g) "/" (r == "" ? "(non-resource)" : r) (s == "" ? "" : "/" s)
			n[key] += $NF
		}
		END { for (k in n) printf "%s %d\n", k, n[k] }' | sort
}
# delta BEFORE AFTER: the requests counted between two scrapes, less the
# scraper's own share (OVERHEAD, measured with nothing else running).
delta() {
	awk 'FILENAME == ARGV[1] { b[$1] = $2; next }
		FILENAME == ARGV[2] { o[$1] = $2; next }
		{ d = $2 - b[$1] - o[$1]; if (d > 0) printf "%s %d\n", $1, d }' "$1" "$OVERHEAD" "$2"
}

# The values file the operator writes (JSON, every default filled in) for an
# instance with spec {auth: {passwordSecret: tinycode-password}}.
write_values() { # FILE NAME NAMESPACE
	local n=$2 ns=$3
	cat >"$1" <<EOF
{"instance":{"name":"$n","namespace":"$ns","uid":"00000000-0000-4000-8000-000000000001"},
"names":{"fullname":"$n-tinycode","ollama":"$n-ollama","configMap":"$n-tinycode-config","dataPvc":"$n-data",
"projectsPvc":"$n-projects","ollamaModelsPvc":"$n-ollama-models","discoveryRole":"$n-tinycode-discovery",
"clusterRoleBinding":"tinycode:$ns:$n-cluster-role","discoveryBinding":"tinycode:$ns:$n-discovery"},
"valuesHash":"$(printf '%s/%s' "$ns" "$n" | sha256sum | cut -c1-64)","secretsChecksum":"",
"image":"quay.io/bjohns/tinycode-container:latest","replicas":1,
"resources":{"limits":{"cpu":"2","memory":"2Gi"},"requests":{"cpu":"200m","memory":"512Mi"}},
"storage":{"dataSize":"1Gi","projectsSize":"10Gi","projectsAccessMode":"ReadWriteOnce","storageClassName":"",
"hostPath":{"path":"","readOnly":false},"retainOnDelete":true,"dataVolume":"pvc","projectsVolume":"pvc"},
"hostname":"","tlsTermination":"edge",
"ollama":{"enabled":false,"host":"http://ollama.models.svc:11434","models":[],"image":"docker.io/ollama/ollama:latest","modelsSize":"20Gi"},
"auth":{"passwordSecret":"tinycode-password"},"shell":{"enabled":false,"allowedCommands":[]},
"nodeSelector":{},"tolerations":[],"model":"",
"clusterAdmin":{"enabled":false,"kubeconfigSecretName":"","kubeconfigSecretKey":"kubeconfig","ocVersion":"stable",
"kubeconfigNamespace":"","clusterRole":"","mountSecretName":""},
"vllm":[],"discovery":{"namespaces":[]},
"git":{"url":"","branch":"","credentialsSecret":"","pullOnRestart":false,"depth":1},
"scc":{"tier":"restricted","name":"tinycode-restricted"},"config":{"json":"","checksum":""},
"networkPolicy":{"ingressNamespaceLabels":{"kubernetes.io/metadata.name":"ingress-nginx"}}}
EOF
}

PROXY_PID='' KPROXY_PID='' APROXY_PID='' APROXY_ALL_PID=''
PROXY_PORT=${HELM_COST_PROXY_PORT:-18011}
# kubectl proxy on loopback, started once, and a kubeconfig that reaches it.
start_kubectl_proxy() {
	"$K" proxy --address=127.0.0.1 --port="$PROXY_PORT" >"$STATE/proxy.log" 2>&1 &
	KPROXY_PID=$!
	local i
	for i in $(seq 1 50); do
		if curl -fsS "http://127.0.0.1:$PROXY_PORT/version" >/dev/null 2>&1; then break; fi
		sleep 0.1
	done
	cat >"$STATE/proxy-kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: p, cluster: {server: "http://127.0.0.1:$PROXY_PORT"}}]
users: [{name: p, user: {}}]
contexts: [{name: p, context: {cluster: p, user: p}}]
current-context: p
EOF
}
proxy_ticks() { if [[ -n $PROXY_PID ]]; then ticks "$PROXY_PID"; else echo 0; fi; }
# The operator's listener, built and started once; it writes its kubeconfig
# to $STATE/NAME-kubeconfig and its PID to APROXY_PID. start_api_proxy NAME [CHART]
start_api_proxy() {
	local name=$1 i
	shift
	(cd "$ROOT" && cargo build --release --example helm_api_proxy >&2)
	KUBECONFIG=$KCFG "$ROOT/target/release/examples/helm_api_proxy" "$STATE/$name-kubeconfig" "$@" 2>"$STATE/$name.log" &
	APROXY_PID=$!
	for i in $(seq 1 50); do
		if [[ -s $STATE/$name-kubeconfig ]]; then return 0; fi
		sleep 0.1
	done
	die "the api proxy did not start: $(cat "$STATE/$name.log")"
}
if [[ $CONFIGS == *kubectl-proxy* ]]; then start_kubectl_proxy; fi
if [[ " ${CONFIGS//+/ } " == *" api-proxy-all "* ]]; then start_api_proxy api-proxy-all && APROXY_ALL_PID=$APROXY_PID; fi
if [[ " ${CONFIGS//+/ } " == *" api-proxy "* || " ${CONFIGS//+/ } " == *" api-proxy-env "* ]]; then start_api_proxy api-proxy "$CHART_DIR"; fi

CFG_FLAGS=()
CFG_ENV=()
CFG_FRESH_HOME=0
CFG_SHM=0
CFG_KCFG=$KCFG
CFG_CHART=$CHART_DIR
configure() {
	local part
	PROXY_PID='' CFG_FLAGS=() CFG_ENV=() CFG_FRESH_HOME=0 CFG_SHM=0 CFG_KCFG=$KCFG CFG_CHART=$CHART_DIR CFG_HISTORY=5 CFG_OUTPUT=(--output json)
	for part in ${1//+/ }; do
		case $part in
		baseline) ;;
		fresh-home) CFG_FRESH_HOME=1 ;;
		no-openapi) CFG_FLAGS+=(--disable-openapi-validation) ;;
		no-schema) CFG_FLAGS+=(--skip-schema-validation) ;;
		tgz) CFG_CHART=$STATE/tinycode-chart.tgz ;;
		configmap) CFG_ENV+=(HELM_DRIVER=configmap) ;;
		gogc) CFG_ENV+=(GOGC=400) ;;
		gogc*) CFG_ENV+=("GOGC=${part#gogc}") ;;
		maxprocs1) CFG_ENV+=(GOMAXPROCS=1) ;;
		take-ownership) CFG_FLAGS+=(--take-ownership) ;;
		history2) CFG_HISTORY=2 ;;
		no-kube-cache) CFG_ENV+=(KUBECACHEDIR=/dev/null/kube-cache) ;;
		text-output) CFG_OUTPUT=() ;;
		slim-chart) CFG_CHART=$STATE/slim-chart ;;
		no-schema-file) CFG_CHART=$STATE/no-schema-chart ;;
		no-comments) CFG_CHART=$STATE/no-comments-chart ;;
		lang-fr) CFG_ENV+=(LC_MESSAGES=fr_FR.UTF-8) ;;
		shm-home) CFG_SHM=1 ;;
		kubectl-proxy) CFG_KCFG=$STATE/proxy-kubeconfig PROXY_PID=$KPROXY_PID ;;
		api-proxy) CFG_KCFG=$STATE/api-proxy-kubeconfig PROXY_PID=$APROXY_PID ;;
		api-proxy-all) CFG_KCFG=$STATE/api-proxy-all-kubeconfig PROXY_PID=$APROXY_ALL_PID ;;
		api-proxy-env)
			CFG_KCFG='' PROXY_PID=$APROXY_PID
			CFG_ENV+=("HELM_KUBEAPISERVER=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["clusters"][0]["cluster"]["server"])' "$STATE/api-proxy-kubeconfig")")
			;;
		*) die "unknown config part '$part' in '$1'" ;;
		esac
	done
}

# One helm run as src/helm/mod.rs starts it: a cleared environment, HOME and the
# helm homes in one directory, the values in a file.
helm_run() { # HOME RELEASE VALUES TIMEFILE [EXTRA...]
	local home=$1 release=$2 values=$3 timefile=$4
	shift 4
	env -i PATH="$PATH" KUBECONFIG="$CFG_KCFG" TMPDIR="$home" HOME="$home" \
		HELM_CACHE_HOME="$home/cache" HELM_CONFIG_HOME="$home/config" HELM_DATA_HOME="$home/data" \
		"${CFG_ENV[@]+"${CFG_ENV[@]}"}" \
		/usr/bin/time -f '%e %U %S %M' -o "$timefile" \
		"$HELM" upgrade --install "$release" "$CFG_CHART" --namespace "$STORAGE_NS" --values "$values" \
		--history-max "$CFG_HISTORY" --no-hooks "${CFG_OUTPUT[@]+"${CFG_OUTPUT[@]}"}" "${CFG_FLAGS[@]+"${CFG_FLAGS[@]}"}" "$@"
}

"$HELM" package "$CHART_DIR" --destination "$STATE" >/dev/null
# The chart without what only its tests read (ci/ values files).
cp -r "$CHART_DIR" "$STATE/slim-chart"
rm -rf "$STATE/slim-chart/ci"
# The chart without its values schema (helm stores it in every release record).
cp -r "$CHART_DIR" "$STATE/no-schema-chart"
rm -f "$STATE/no-schema-chart/values.schema.json"
# That chart with its templates' comments emptied, as the operator installs it.
cp -r "$STATE/no-schema-chart" "$STATE/no-comments-chart"
python3 - "$STATE/no-comments-chart/templates" <<-'EOF'
	import pathlib, re, sys
	comment = re.compile(r"\{\{(-[ \t\r\n])?/\*.*?\*/([ \t\r\n]-)?\}\}", re.S)
	for path in pathlib.Path(sys.argv[1]).rglob("*"):
	    if path.is_file():
	        text = path.read_text()
	        path.write_text(comment.sub(lambda m: "{{" + ("- " if m.group(1) else "") + "/**/" + (" -" if m.group(2) else "") + "}}", text))
	EOF
mv "$STATE"/tinycode-*.tgz "$STATE/tinycode-chart.tgz"

# The scraper's own requests: two scrapes with nothing in between.
OVERHEAD=/dev/null
scrape >"$STATE/s0"
scrape >"$STATE/s1"
delta "$STATE/s0" "$STATE/s1" >"$STATE/overhead"
OVERHEAD=$STATE/overhead
log "scrape overhead: $(tr '\n' ' ' <"$OVERHEAD")"

RUNS=$STATE/runs.tsv # config rep phase i wall cpu rss_kb requests api_ms etcd_ms proxy_ms
: >"$RUNS"
mkdir -p "$STATE/req"
for rep in $(seq 1 "$REPS"); do
	c=0
	for cfg in $CONFIGS; do
		configure "$cfg"
		c=$((c + 1))
		# Short: the release name tinycode.<ns>.<name> must stay within 53 characters.
		ns="hc$$-c$c-r$rep"
		"$K" create namespace "$ns" >/dev/null
		# Every config starts from an empty record namespace.
		"$K" delete secrets,configmaps -n "$STORAGE_NS" -l owner=helm --wait=false >/dev/null
		shared=$STATE/home-$rep-${cfg//+/-}
		if ((CFG_SHM)); then shared=$SHM/home-$rep-${cfg//+/-}; fi
		mkdir -p "$shared"
		for phase in install upgrade; do
			scrape >"$STATE/before"
			for i in $(seq 1 "$N"); do
				home=$shared
				if ((CFG_FRESH_HOME)); then home=$(mktemp -d "$STATE/home.XXXXXX"); fi
				name="i$i"
				values=$home/values-$i.json
				write_values "$values" "$name" "$ns"
				a0=$(ticks "$API_PID") e0=$(ticks "$ETCD_PID") p0=$(proxy_ticks)
				if ! helm_run "$home" "tinycode.$ns.$name" "$values" "$STATE/time" >"$STATE/out" 2>"$STATE/err"; then
					cat "$STATE/err" >&2
					die "helm failed ($cfg, $phase, $name)"
				fi
				a1=$(ticks "$API_PID") e1=$(ticks "$ETCD_PID") p1=$(proxy_ticks)
				scrape >"$STATE/after"
				delta "$STATE/before" "$STATE/after" >"$STATE/req/$cfg.$rep.$phase.$i"
				mv "$STATE/after" "$STATE/before"
				read -r wall user sys rss <"$STATE/time"
				reqs=$(awk '{ s += $2 } END { print s + 0 }' "$STATE/req/$cfg.$rep.$phase.$i")
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rep" "$phase" "$i" "$wall" \
					"$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')" "$rss" "$reqs" \
					"$(((a1 - a0) * 1000 / TICKS))" "$(((e1 - e0) * 1000 / TICKS))" "$(((p1 - p0) * 1000 / TICKS))" >>"$RUNS"
				if ((CFG_FRESH_HOME)); then rm -rf -- "$home"; fi
			done
		done
		log "rep $rep $cfg: $(awk -F'\t' -v c="$cfg" -v r="$rep" '$1 == c && $2 == r { n[$3]++; w[$3] += $5; u[$3] += $6; q[$3] += $8; a[$3] += $9 }
			END { for (p in n) printf "%s cpu %.3fs wall %.3fs req %.1f api %.0fms; ", p, u[p] / n[p], w[p] / n[p], q[p] / n[p], a[p] / n[p] }' "$RUNS")"
	done
done

printf '\nPer helm run, %s runs per config and phase (%s reps x %s): median [min..max] (mean)\n' "$((REPS * N))" "$REPS" "$N"
printf '%-28s %-8s %-24s %-24s %-18s %-18s %-18s %-18s %-16s\n' config phase "helm cpu s" "wall s" "rss MiB" "api requests" "apiserver cpu ms" "etcd cpu ms" "proxy cpu ms"
for cfg in $CONFIGS; do
	for phase in install upgrade; do
		line="$(printf '%-28s %-8s' "$cfg" "$phase")"
		for col in 6 5 7 8 9 10 11; do
			stat=$(awk -F'\t' -v c="$cfg" -v p="$phase" -v k="$col" '$1 == c && $3 == p { print $k }' "$RUNS" | sort -g |
				awk -v k="$col" '{ v[NR] = $1; s += $1 } END {
					m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
					if (k == 7) printf "%.0f [%.0f..%.0f] (%.0f)", m / 1024, v[1] / 1024, v[NR] / 1024, s / NR / 1024
					else if (k >= 8) printf "%.0f [%.0f..%.0f] (%.1f)", m, v[1], v[NR], s / NR
					else printf "%.3f [%.2f..%.2f] (%.3f)", m, v[1], v[NR], s / NR }')
			case $col in 6 | 5) w=24 ;; *) w=18 ;; esac
			line+=" $(printf "%-${w}s" "$stat")"
		done
		printf '%s\n' "$line"
	done
done

printf '\nMean per repetition (helm cpu s / wall s / apiserver cpu ms per run)\n'
awk -F'\t' '{ k = $1 " " $3 " rep" $2; n[k]++; u[k] += $6; w[k] += $5; a[k] += $9 }
	END { for (k in n) printf "%-44s %.3f / %.3f / %.0f\n", k, u[k] / n[k], w[k] / n[k], a[k] / n[k] }' "$RUNS" | sort

first=${CONFIGS%% *}
for phase in install upgrade; do
	printf '\nRequests of one %s run (%s, rep 1, mean of runs 2..%s; run 1 in brackets), by verb:group/resource\n' \
		"$phase" "$first" "$N"
	cat "$STATE/req/$first.1.$phase".* | awk '{ print $1 }' | sort -u | while read -r key; do
		one=$(awk -v k="$key" '$1 == k { print $2 }' "$STATE/req/$first.1.$phase.1")
		rest=$(for i in $(seq 2 "$N"); do awk -v k="$key" '$1 == k { print $2 }' "$STATE/req/$first.1.$phase.$i"; done |
			awk -v n="$((N - 1))" '{ s += $1 } END { printf "%.2f", (n > 0 ? s / n : 0) }')
		printf '  %-52s %6s  [%s]\n' "$key" "$rest" "${one:-0}"
	done
done

if [[ ${HELM_COST_TRACE:-0} == 1 ]]; then
	last=${CONFIGS##* }
	for cfg in $(printf '%s\n' "$first" "$last" | uniq); do
		configure "$cfg"
		ns="hc$$-trace-$((++c))"
		"$K" create namespace "$ns" >/dev/null
		home=$STATE/home-trace-${cfg//+/-}
		mkdir -p "$home"
		write_values "$home/values.json" warm "$ns"
		helm_run "$home" "tinycode.$ns.warm" "$home/values.json" "$STATE/time" >/dev/null 2>&1
		write_values "$home/values.json" t "$ns"
		for phase in install upgrade; do
			helm_run "$home" "tinycode.$ns.t" "$home/values.json" "$STATE/time" -v=6 >/dev/null 2>"$STATE/trace"
			printf '\nRequests client-go logged for one %s (%s, warm home), method path [count]\n' "$phase" "$cfg"
			grep -oE 'verb="[A-Z]+" url="https://[^"]+' "$STATE/trace" |
				sed -E 's#verb="([A-Z]+)" url="https://[^/]+([^?]*).*#\1 \2#' | sort | uniq -c |
				awk '{ printf "  %-8s %-78s %s\n", $2, $3, $1 }'
		done
	done
fi
