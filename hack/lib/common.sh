# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are used by the scripts that source this file
# Helpers shared by hack/install.sh, hack/uninstall.sh and
# hack/prepare-namespace.sh. Source it after setting SCRIPT_NAME; it sets nothing
# else and runs nothing.

# The repository root (the directory above hack/).
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Where config/manager/*.yaml put the operator.
OPERATOR_NAMESPACE_DEFAULT=tinycode-operator-system
OPERATOR_SERVICE_ACCOUNT_DEFAULT=tinycode-operator-manager
CRD_NAME=tinycodeinstances.tinycode.dev
FIELD_MANAGER=tinycode-install

log() { printf '%s: %s\n' "${SCRIPT_NAME:-hack}" "$*" >&2; }
warn() { printf '%s: WARNING: %s\n' "${SCRIPT_NAME:-hack}" "$*" >&2; }
die() {
	printf '%s: ERROR: %s\n' "${SCRIPT_NAME:-hack}" "$*" >&2
	exit 1
}

# find_kubectl: sets KUBECTL to $KUBECTL when given, else to `oc`, else to
# `kubectl` found in PATH; dies when there is none.
find_kubectl() {
	if [[ -n "${KUBECTL:-}" ]]; then
		command -v -- "$KUBECTL" >/dev/null 2>&1 ||
			die "KUBECTL=${KUBECTL} is not an executable command"
		return 0
	fi
	local c
	for c in oc kubectl; do
		if command -v "$c" >/dev/null 2>&1; then
			KUBECTL=$(command -v "$c")
			return 0
		fi
	done
	die "neither oc nor kubectl is in PATH; install one (or set KUBECTL=/path/to/kubectl)"
}

# kc ARGS...: the cluster client.
kc() { "$KUBECTL" "$@"; }

# check_logged_in: the client reaches the cluster with valid credentials.
check_logged_in() {
	local who
	if who=$(kc auth whoami -o jsonpath='{.status.userInfo.username}' 2>/dev/null) && [[ -n "$who" ]]; then
		log "logged in as ${who}"
		return 0
	fi
	# Older clients and servers have no SelfSubjectReview: any server call will do.
	kc version --request-timeout=15s >/dev/null 2>&1 ||
		die "cannot reach the cluster with ${KUBECTL} (not logged in? run \`oc login\` or set KUBECONFIG)"
	log "connected to the cluster"
}

# check_cluster_admin: the caller may do anything anywhere.
check_cluster_admin() {
	local answer
	answer=$(kc auth can-i '*' '*' --all-namespaces 2>/dev/null || true)
	[[ "$answer" == yes ]] ||
		die "this needs cluster-admin (\`${KUBECTL##*/} auth can-i '*' '*' --all-namespaces\` answered '${answer:-no}')"
}

# has_api GROUP/VERSION: the server serves that API group version.
has_api() { kc get --raw "/apis/$1" >/dev/null 2>&1; }

# apply_file FILE: server-side apply (idempotent; takes over fields that an
# earlier installer or kubectl owned).
apply_file() {
	kc apply --server-side --force-conflicts --field-manager="$FIELD_MANAGER" -f "$1" >/dev/null ||
		die "applying $1 failed"
	log "applied ${1#"${REPO_ROOT}"/}"
}

# apply_stdin WHAT: like apply_file, for a manifest on standard input.
apply_stdin() {
	kc apply --server-side --force-conflicts --field-manager="$FIELD_MANAGER" -f - >/dev/null ||
		die "applying $1 failed"
}

# namespace_phase NS: Active, Terminating, or nothing when there is none.
namespace_phase() {
	kc get namespace "$1" -o jsonpath='{.status.phase}' 2>/dev/null || true
}
