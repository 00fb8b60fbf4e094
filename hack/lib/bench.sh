# Measuring helpers shared by hack/bench.sh and hack/bench-flux.sh (sourced).
# shellcheck shell=bash

TICKS=$(getconf CLK_TCK)
now() { date +%s.%N; }

# cpu PID own|children: CPU seconds the process used itself, or its reaped
# children (the operator's helm runs).
cpu() {
	local f=/proc/$1/stat
	[[ -r $f ]] || { echo 0; return; }
	# The command name may hold spaces: count fields after its closing parenthesis.
	sed 's/.*) //' "$f" | awk -v t="$TICKS" -v w="$2" '{ if (w == "own") print ($12 + $13) / t; else print ($14 + $15) / t }'
}

# pss_kb PID...: summed proportional set size of the PIDs, KiB. PSS counts
# pages shared between processes (helm's binary, run eight times at once)
# once in all, where a sum of RSS would count them once per process.
pss_kb() {
	local total=0 p kb
	for p in "$@"; do
		kb=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null) || kb=0
		total=$((total + ${kb:-0}))
	done
	echo "$total"
}

# reference HOME: this host's speed has varied by half between runs minutes
# apart, mostly when both CPUs are busy (two busy vCPUs slow each other down
# by up to half), and by more between hours. A fixed workload, timed before
# and after the measured part, tells a slow hour from a slower operator: the
# wall time of two parallel series of 10 starts of `helm version` in the
# environment the operator gives helm (process start-up is most of what the
# bench repeats). Call it in a command substitution: it waits for its own
# children only there.
reference() {
	local t0
	t0=$(now)
	for _ in 1 2; do
		(for _ in $(seq 10); do env -i HOME="$1" LC_MESSAGES=fr_FR.UTF-8 GOGC=400 "$TINYCODE_HELM" version >/dev/null; done) &
	done
	wait
	awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'
}
