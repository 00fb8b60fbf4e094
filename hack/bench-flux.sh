#!/usr/bin/env bash
# Benchmark beside a peer: N releases of the bundled chart by this operator and
# by Flux (source-controller and helm-controller, built from the Go module proxy
# and cached outside the repo like the control plane's binaries), each side on
# a fresh local control plane, one after the other. Prints one table; asserts
# nothing. CI does not run it.
#
#   hack/bench-flux.sh [N]    (default 200)
#
# BENCH_SIDES (default "operator flux flux-qps"): which sides run, in order.
#   operator  hack/bench.sh N with BENCH_QUICK=1 (release build, its defaults:
#             concurrency 4 per core, in-cluster configuration)
#   flux      Flux's defaults (client QPS 50, burst 300) at --concurrent=10
#   flux-qps  the same with --kube-api-qps=500 --kube-api-burst=1000
# BENCH_RUNS (default 1): rounds of all sides; with more than one the table
# ends with each side's median and range.
#
# Both sides render the same chart with the same values: each HelmRelease's
# values are what `tinycode-operator values` renders for the instance the
# operator side creates under the same name (the basic sample's spec). Flux
# gets the helm settings the operator uses (src/helm/mod.rs): no wait, no
# hooks, no OpenAPI or schema validation. Its chart comes as Flux's
# documentation recommends for many releases of one chart: one HelmChart of a
# HelmRepository that a loopback HTTP server serves (`helm package` + `helm
# repo index` of helm-charts/tinycode), which every HelmRelease names in
# `chartRef`. The instances' Deployments are made Running by `tinycode-local
# simulate` on both sides, so the apiserver carries the same extra load.
#
# Flux's controllers run as ServiceAccounts of flux-system bound to
# cluster-admin (as Flux's own install grants them), so the local control
# plane's audit policy logs their requests as it logs the operator's.
#
# Figures per side: seconds from the apply of N objects until N releases are
# deployed (the operator: its helm install metric; Flux: HelmReleases Ready,
# from one watch); CPU seconds of each process over that time (the operator
# and its helm children; helm-controller and source-controller) and of
# kube-apiserver and etcd; peak memory: the operator's own peak RSS and the
# peak PSS of it with its helm children (sampled twice a second), each Flux
# controller's peak RSS and their summed PSS (sampled the same way); the
# machine's speed before and after (hack/bench.sh's reference workload: this
# host's speed varies by up to three times between hours, so compare sides of
# one round only).
set -euo pipefail

N=${1:-200}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SIDES=${BENCH_SIDES:-operator flux flux-qps}
RUNS=${BENCH_RUNS:-1}
CACHE_DIR=${TINYCODE_CACHE_DIR:-$HOME/.cache/tinycode-operator}
CLUSTER_DIR=${TINYCODE_CLUSTER_DIR:-/tmp/tinycode-local-cluster}
# The Flux release whose controllers are compared (Flux 2.9: both on Go 1.26
# and helm v4; the proxy refuses later helm-controller tags and a dependency
# of source-controller v1.9.4 and later, fluxcd/pkg/artifact v0.18.2).
HELM_CONTROLLER_VERSION=v1.6.4
SOURCE_CONTROLLER_VERSION=v1.9.3
REPO_PORT=18591 STORAGE_PORT=18592
SC_METRICS=127.0.0.1:18593 SC_HEALTH=127.0.0.1:18594
HC_METRICS=127.0.0.1:18595 HC_HEALTH=127.0.0.1:18596
STATE=$(mktemp -d /tmp/tinycode-bench-flux.XXXXXX)
RESULTS=$STATE/results
: >"$RESULTS"
pids=()

log() { printf 'bench-flux: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$STATE"
}
trap cleanup EXIT

# shellcheck source=hack/lib/bench.sh
. "$ROOT/hack/lib/bench.sh"
hwm_mib() { awk '/VmHWM/ { printf "%d", $2 / 1024 }' "/proc/$1/status"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# flux_controller NAME VERSION: build github.com/fluxcd/NAME at VERSION once
# into the cache (with its CRDs beside it) and print the binary's path. Both
# modules carry replace directives (their ./api submodule, a go-digest fork),
# so `go install pkg@version` is refused: the build runs inside a copy of the
# module as the proxy serves it, with its own go.mod and go.sum, and the api
# module of the same tag put where the replace points.
flux_controller() {
	local name=$1 version=$2 dir bin src
	dir=$CACHE_DIR/flux-$name-$version
	bin=$dir/$name
	if [[ -x $bin && -d $dir/crds ]]; then echo "$bin"; return; fi
	mkdir -p "$dir"
	exec 8>"$CACHE_DIR/.build.lock"
	flock 8
	log "building Flux's $name $version (minutes, once; log: $dir/build.log)"
	src=$(mktemp -d "$CACHE_DIR/.flux-src.XXXXXX")
	(
		set -e
		moddir() { go mod download -json "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'; }
		cp -r "$(moddir "github.com/fluxcd/$name@$version")/." "$src/"
		chmod -R u+w "$src"
		rm -rf "$src/api"
		mkdir "$src/api"
		cp -r "$(moddir "github.com/fluxcd/$name/api@$version")/." "$src/api/"
		chmod -R u+w "$src/api"
		cd "$src"
		CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$bin.tmp" .
	) >"$dir/build.log" 2>&1 || { rm -rf "$src"; tail -20 "$dir/build.log" >&2; die "building $name failed"; }
	rm -rf "$dir/crds"
	cp -r "$src/config/crd/bases" "$dir/crds"
	rm -rf "$src"
	mv -f "$bin.tmp" "$bin"
	exec 8>&-
	echo "$bin"
}

fresh_cluster() {
	hack/local-cluster.sh stop >/dev/null 2>&1 || true
	eval "$(hack/local-cluster.sh start)"
	K=$TINYCODE_KUBECTL
	API_PID=$(cat "$CLUSTER_DIR/kube-apiserver.pid")
	ETCD_PID=$(cat "$CLUSTER_DIR/etcd.pid")
}

# record SIDE RUN key=value...: one result row.
record() { printf '%s\n' "$*" >>"$RESULTS"; }

run_operator() {
	local run=$1 out=$STATE/operator.result
	fresh_cluster
	BENCH_QUICK=1 BENCH_RESULT=$out hack/bench.sh "$N" >&2
	v() { sed -n "s/^$1=//p" "$out"; }
	record "side=operator run=$run deployed_s=$(v deployed_s) cpu_self=$(v cpu_operator) cpu_helm=$(v cpu_helm) cpu_apiserver=$(v cpu_apiserver) cpu_etcd=$(v cpu_etcd) peak_rss=$(v peak_rss_mib) peak_pss=$(v peak_tree_pss_mib) reference=$(v reference)"
}

# The HelmReleases: the values the operator renders for instance iN of $NS.
write_releases() {
	local ns=$1 out=$2
	python3 - "$ROOT/target/release/tinycode-operator" "$ns" "$N" "$out" <<-'EOF'
	import json, subprocess, sys, tempfile
	binary, ns, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
	off = {"disableWait": True, "disableWaitForJobs": True, "disableHooks": True,
	       "disableOpenAPIValidation": True, "disableSchemaValidation": True}
	items = []
	with tempfile.NamedTemporaryFile("w", suffix=".yaml") as cr:
	    for i in range(1, n + 1):
	        cr.seek(0)
	        cr.truncate()
	        cr.write("apiVersion: tinycode.dev/v1alpha1\nkind: TinycodeInstance\n"
	                 f"metadata: {{name: i{i}}}\nspec: {{auth: {{passwordSecret: tinycode-password}}}}\n")
	        cr.flush()
	        rendered = json.loads(subprocess.run([binary, "values", "-f", cr.name, "-n", ns, "--offline"],
	                                             check=True, capture_output=True).stdout)
	        items.append({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
	                      "metadata": {"name": f"i{i}", "namespace": ns},
	                      "spec": {"interval": "1h",
	                               "chartRef": {"kind": "HelmChart", "name": "tinycode", "namespace": ns},
	                               "install": dict(off), "upgrade": dict(off),
	                               "values": rendered["values"]}})
	json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(out, "w"))
	EOF
}

# watch_ready NS N FILE: writes to FILE the time at which N HelmReleases of NS
# are Ready (one watch, so the count itself costs the apiserver little), then
# ends the watch (kubectl would only notice its reader gone at its next write).
watch_ready() {
	python3 - "$K" "$1" "$2" "$3" <<-'EOF'
	import json, subprocess, sys, time
	kubectl, ns, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
	watch = subprocess.Popen([kubectl, "get", "helmreleases.helm.toolkit.fluxcd.io", "-n", ns, "--watch", "-o", "json"],
	                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
	ready, buf, dec = set(), "", json.JSONDecoder()
	for line in watch.stdout:
	    buf += line
	    while True:
	        s = buf.lstrip()
	        try:
	            obj, end = dec.raw_decode(s)
	        except ValueError:
	            break
	        buf = s[end:]
	        for o in obj.get("items", [obj]):
	            conds = {c["type"]: c["status"] for c in o.get("status", {}).get("conditions", [])}
	            if conds.get("Ready") == "True":
	                ready.add(o["metadata"]["name"])
	    if len(ready) >= n:
	        open(out, "w").write("%.3f\n" % time.time())
	        break
	watch.kill()
	EOF
}

# flux_kubeconfig NAME: a ServiceAccount NAME of flux-system bound to
# cluster-admin, and the path of a kubeconfig holding a token of it.
flux_kubeconfig() {
	local name=$1 out=$STATE/$1.kubeconfig token
	"$K" create namespace flux-system --dry-run=client -o yaml | "$K" apply -f - >/dev/null
	"$K" create serviceaccount "$name" -n flux-system --dry-run=client -o yaml | "$K" apply -f - >/dev/null
	"$K" create clusterrolebinding "flux-$name" --clusterrole=cluster-admin --serviceaccount="flux-system:$name" \
		--dry-run=client -o yaml | "$K" apply -f - >/dev/null
	token=$("$K" create token "$name" -n flux-system --duration=24h)
	"$K" config view --raw --minify --flatten -o json | python3 -c '
import json, sys
c = json.load(sys.stdin)
c["users"] = [{"name": "flux", "user": {"token": sys.argv[1]}}]
c["contexts"][0]["context"]["user"] = "flux"
json.dump(c, open(sys.argv[2], "w"))' "$token" "$out"
	printf '%s\n' "$out"
}

run_flux() {
	local run=$1 side=$2 qps=() ns=bench-flux-$$ hc sc t0 done_at hc_pid sc_pid peak=0 kb
	[[ $side == flux-qps ]] && qps=(--kube-api-qps=500 --kube-api-burst=1000)
	hc=$(flux_controller helm-controller "$HELM_CONTROLLER_VERSION")
	sc=$(flux_controller source-controller "$SOURCE_CONTROLLER_VERSION")
	fresh_cluster
	cargo build --quiet --release --workspace --bins
	"$ROOT/target/release/tinycode-local" setup --namespace "$ns" --operator-kubeconfig "$STATE/operator.kubeconfig" 2>/dev/null
	"$K" apply --server-side -f "$(dirname "$hc")/crds" -f "$(dirname "$sc")/crds" >/dev/null
	local hc_kcfg sc_kcfg
	hc_kcfg=$(flux_kubeconfig helm-controller)
	sc_kcfg=$(flux_kubeconfig source-controller)
	"$K" wait --for condition=established --timeout=60s crd --all >/dev/null

	rm -rf "$STATE/repo" "$STATE/storage"
	mkdir -p "$STATE/repo" "$STATE/storage"
	"$TINYCODE_HELM" package --destination "$STATE/repo" helm-charts/tinycode >/dev/null
	"$TINYCODE_HELM" repo index "$STATE/repo" --url "http://127.0.0.1:$REPO_PORT"
	python3 -m http.server --bind 127.0.0.1 --directory "$STATE/repo" "$REPO_PORT" >/dev/null 2>&1 &
	pids+=($!)

	KUBECONFIG=$sc_kcfg "$sc" --enable-leader-election=false --watch-all-namespaces \
		--storage-path="$STATE/storage" --storage-addr="127.0.0.1:$STORAGE_PORT" --storage-adv-addr="127.0.0.1:$STORAGE_PORT" \
		--metrics-addr="$SC_METRICS" --health-addr="$SC_HEALTH" --events-addr= "${qps[@]}" >"$STATE/$side-source.log" 2>&1 &
	sc_pid=$!
	pids+=("$sc_pid")
	KUBECONFIG=$hc_kcfg "$hc" --enable-leader-election=false --watch-all-namespaces \
		--concurrent=10 --metrics-addr="$HC_METRICS" --health-addr="$HC_HEALTH" --events-addr= "${qps[@]}" >"$STATE/$side-helm.log" 2>&1 &
	hc_pid=$!
	pids+=("$hc_pid")
	"$K" apply -f - >/dev/null <<-EOF
	apiVersion: source.toolkit.fluxcd.io/v1
	kind: HelmRepository
	metadata: {name: local, namespace: $ns}
	spec: {url: "http://127.0.0.1:$REPO_PORT", interval: 1h}
	---
	apiVersion: source.toolkit.fluxcd.io/v1
	kind: HelmChart
	metadata: {name: tinycode, namespace: $ns}
	spec: {chart: tinycode, version: "*", interval: 1h, sourceRef: {kind: HelmRepository, name: local}}
	EOF
	"$K" wait --for condition=ready --timeout=120s -n "$ns" helmchart.source.toolkit.fluxcd.io/tinycode >/dev/null ||
		{ tail -20 "$STATE/$side-source.log" >&2; die "the HelmChart never became ready"; }
	curl -sf "http://$HC_HEALTH/readyz" >/dev/null || sleep 2
	write_releases "$ns" "$STATE/releases.json"

	"$ROOT/target/release/tinycode-local" simulate >"$STATE/simulate.log" 2>&1 &
	pids+=($!)
	local hc0 sc0 api0 etcd0 ref0
	ref0=$(reference "$STATE")
	hc0=$(cpu "$hc_pid" own) sc0=$(cpu "$sc_pid" own) api0=$(cpu "$API_PID" own) etcd0=$(cpu "$ETCD_PID" own)
	rm -f "$STATE/ready"
	watch_ready "$ns" "$N" "$STATE/ready" &
	local watcher=$!
	t0=$(now)
	"$K" apply -f "$STATE/releases.json" >/dev/null
	until [[ -s $STATE/ready ]]; do
		kill -0 "$watcher" 2>/dev/null || [[ -s $STATE/ready ]] || die "the watch of HelmReleases ended before all were ready"
		kb=$(pss_kb "$hc_pid" "$sc_pid")
		((kb > peak)) && peak=$kb
		kill -0 "$hc_pid" 2>/dev/null || { tail -20 "$STATE/$side-helm.log" >&2; die "helm-controller exited"; }
		sleep 0.5
	done
	wait "$watcher"
	done_at=$(cat "$STATE/ready")
	record "side=$side run=$run deployed_s=$(sub "$t0" "$done_at") cpu_self=$(sub "$hc0" "$(cpu "$hc_pid" own)") cpu_helm=$(sub "$sc0" "$(cpu "$sc_pid" own)") cpu_apiserver=$(sub "$api0" "$(cpu "$API_PID" own)") cpu_etcd=$(sub "$etcd0" "$(cpu "$ETCD_PID" own)") peak_rss=$(hwm_mib "$hc_pid")+$(hwm_mib "$sc_pid") peak_pss=$((peak / 1024)) reference=$ref0/$(reference "$STATE")"
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait "${pids[@]}" 2>/dev/null || true
	pids=()
}

eval "$(hack/local-cluster.sh tools)"
for run in $(seq 1 "$RUNS"); do
	for side in $SIDES; do
		log "round $run: $side, $N releases"
		case $side in
		operator) run_operator "$run" ;;
		flux | flux-qps) run_flux "$run" "$side" ;;
		*) die "unknown side $side (operator, flux, flux-qps)" ;;
		esac
		tail -1 "$RESULTS" >&2
	done
done
hack/local-cluster.sh stop >/dev/null 2>&1 || true

python3 - "$RESULTS" "$N" <<-'EOF'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1]) if line.strip()]
n = int(sys.argv[2])
print(f"\n{n} releases of the bundled chart, one side at a time, each on a fresh control plane")
print("CPU s: the operator itself + its helm children, or helm-controller + source-controller")
head = ("side", "run", "reference s", "deployed s", "CPU controller", "CPU helm/source", "CPU per release ms", "CPU apiserver", "CPU etcd", "whole-system CPU s", "peak RSS MiB", "peak PSS MiB")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
by_side = {}
for r in rows:
    own = float(r["cpu_self"]) + float(r["cpu_helm"])
    whole = own + float(r["cpu_apiserver"]) + float(r["cpu_etcd"])
    vals = {"deployed": float(r["deployed_s"]), "per": own / n * 1000, "whole": whole, "pss": float(r["peak_pss"])}
    by_side.setdefault(r["side"], []).append(vals)
    print(f"| {r['side']} | {r['run']} | {r['reference']} | {r['deployed_s']} | {r['cpu_self']} | {r['cpu_helm']} | {own / n * 1000:.1f} | {r['cpu_apiserver']} | {r['cpu_etcd']} | {whole:.1f} | {r['peak_rss']} | {r['peak_pss']} |")
if any(len(v) > 1 for v in by_side.values()):
    print("\nmedian (min-max) per side")
    for side, vs in by_side.items():
        f = lambda k: f"{statistics.median(v[k] for v in vs):.1f} ({min(v[k] for v in vs):.1f}-{max(v[k] for v in vs):.1f})"
        print(f"{side}: deployed {f('deployed')} s, CPU per release {f('per')} ms, whole system {f('whole')} s, peak PSS {f('pss')} MiB")
EOF
