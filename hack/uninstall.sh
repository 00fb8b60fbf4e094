#!/usr/bin/env bash
# Removes tinycode-operator from a cluster. Needs cluster-admin. Idempotent:
# what is already gone is skipped.
#
# Usage: hack/uninstall.sh [--delete-crd] [--timeout SECONDS]
#
#   --delete-crd     also delete every TinycodeInstance and the CRD
#                    (DELETE_CRD=true). Instances are deleted first, while the
#                    operator still runs, so it uninstalls their releases and
#                    removes its finalizer; the script stops if any instance
#                    is still there after the timeout.
#   --timeout SECS   how long to wait for instances to go (UNINSTALL_TIMEOUT, 120)
#
# Environment: KUBECTL (default: oc, else kubectl), KUBECONFIG, DELETE_CRD,
# UNINSTALL_TIMEOUT.
#
# Removed: the manager Deployment and metrics Service, the operator's RBAC
# (ServiceAccount, ClusterRole and binding, leader-election Role and binding,
# SCC binding, self-service user roles), the metrics-reader ClusterRole
# (a ClusterRoleBinding you made to it is yours to delete), the three SCCs and
# their `use` ClusterRoles, and namespace tinycode-operator-system (with the
# ServiceMonitor and PrometheusRule of config/prometheus/ in it).
#
# Kept, on purpose:
#   - the CRD and so every TinycodeInstance, unless --delete-crd: deleting the
#     CRD deletes every instance in the cluster. Instances left behind keep
#     running but are no longer reconciled; a later install picks them up.
#   - instance data: PVCs in instance namespaces are never touched here
#     (an instance deleted with --delete-crd keeps its PVCs too, unless its
#     spec.storage.retainOnDelete is false).
#   - prepared instance namespaces, their tinycode-operator-admin RoleBinding
#     and password Secret (hack/prepare-namespace.sh made them; delete the
#     namespace yourself when it is no longer needed).
set -euo pipefail

SCRIPT_NAME=uninstall
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

DELETE_CRD=${DELETE_CRD:-false}
UNINSTALL_TIMEOUT=${UNINSTALL_TIMEOUT:-120}
NS=$OPERATOR_NAMESPACE_DEFAULT

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

parse_args() {
	while (($#)); do
		case "$1" in
		--delete-crd) DELETE_CRD=true ;;
		--timeout)
			(($# >= 2)) || die "--timeout needs a value"
			UNINSTALL_TIMEOUT=$2
			shift
			;;
		--timeout=*) UNINSTALL_TIMEOUT=${1#--timeout=} ;;
		-h | --help)
			usage
			exit 0
			;;
		*)
			usage >&2
			die "unknown argument: $1"
			;;
		esac
		shift
	done
	case "$DELETE_CRD" in
	true | false) ;;
	*) die "DELETE_CRD must be true or false (got '${DELETE_CRD}')" ;;
	esac
	[[ "$UNINSTALL_TIMEOUT" =~ ^[0-9]+$ ]] || die "the timeout is a number of seconds (got '${UNINSTALL_TIMEOUT}')"
}

# delete_file FILE: deletes the objects FILE declares; missing ones are fine.
delete_file() {
	kc delete --ignore-not-found --wait=false -f "$1" >/dev/null ||
		die "deleting the objects of ${1#"${REPO_ROOT}"/} failed"
	log "deleted ${1#"${REPO_ROOT}"/}"
}

crd_exists() { kc get crd "$CRD_NAME" >/dev/null 2>&1; }

instance_count() {
	local out
	out=$(kc get tinycodeinstances.tinycode.dev --all-namespaces -o name 2>/dev/null) || {
		echo 0
		return 0
	}
	if [[ -z "$out" ]]; then echo 0; else wc -l <<<"$out" | tr -d ' '; fi
}

delete_instances() {
	crd_exists || return 0
	local n deadline
	n=$(instance_count)
	if ((n == 0)); then
		return 0
	fi
	log "--delete-crd: deleting ${n} TinycodeInstance(s) first, while the operator can still uninstall their releases"
	kc delete tinycodeinstances.tinycode.dev --all --all-namespaces --wait=false >/dev/null
	deadline=$((SECONDS + UNINSTALL_TIMEOUT))
	while n=$(instance_count) && ((n > 0)); do
		if ((SECONDS >= deadline)); then
			kc get tinycodeinstances.tinycode.dev --all-namespaces >&2 || true
			die "${n} instance(s) still there after ${UNINSTALL_TIMEOUT}s (their finalizer tinycode.dev/finalizer waits for the operator; is it running?). Nothing else was removed. Let the operator finish and re-run, or, if it is gone for good, drop the finalizers (their Helm releases are then left behind): ${KUBECTL##*/} patch tinycodeinstance NAME -n NAMESPACE --type=merge -p '{\"metadata\":{\"finalizers\":null}}'"
		fi
		sleep 2
	done
	log "every TinycodeInstance is gone"
}

remove_manager() {
	delete_file "${REPO_ROOT}/config/manager/manager.yaml"
	delete_file "${REPO_ROOT}/config/manager/service.yaml"
	delete_file "${REPO_ROOT}/config/manager/oidc_relay_service.yaml"
}

remove_rbac() {
	local f
	# tinycode-access-reviewer: bound by oidc instances of earlier versions.
	kc delete clusterrole tinycode-access-reviewer --ignore-not-found >/dev/null
	for f in discovery_role.yaml user_role.yaml manager_scc_role_binding.yaml leader_election_role_binding.yaml \
		leader_election_role.yaml role_binding.yaml role.yaml service_account.yaml; do
		delete_file "${REPO_ROOT}/config/rbac/${f}"
	done
	delete_file "${REPO_ROOT}/config/prometheus/metrics_reader_role.yaml"
}

remove_admission() {
	kc delete validatingadmissionpolicybinding tinycode-host-paths --ignore-not-found >/dev/null 2>&1 || true
	kc delete validatingadmissionpolicy tinycode-host-paths --ignore-not-found >/dev/null 2>&1 || true
}

remove_sccs() {
	if has_api security.openshift.io/v1; then
		delete_file "${REPO_ROOT}/config/scc/sccs.yaml"
	else
		# No SCC API: only the `use` ClusterRoles of sccs.yaml could exist.
		local role
		for role in tinycode-scc-restricted tinycode-scc-hostpath tinycode-scc-shell; do
			kc delete clusterrole "$role" --ignore-not-found >/dev/null
		done
		log "no security.openshift.io API: no SCCs to delete"
	fi
}

remove_crd() {
	if [[ "$DELETE_CRD" == true ]]; then
		delete_file "${REPO_ROOT}/config/crd/tinycode.dev_tinycodeinstances.yaml"
		delete_file "${REPO_ROOT}/config/crd/tinycode.dev_tinycodeclasses.yaml"
	elif crd_exists; then
		log "kept the CRD ${CRD_NAME} and its $(instance_count) instance(s) (deleting it deletes every instance; pass --delete-crd to do that)"
	fi
}

remove_namespace() {
	case "$(namespace_phase "$NS")" in
	"") log "namespace ${NS} is already gone" ;;
	Terminating) log "namespace ${NS} is already being deleted" ;;
	*)
		kc delete namespace "$NS" --ignore-not-found --wait=false >/dev/null
		log "deleting namespace ${NS} (in the background)"
		;;
	esac
}

main() {
	parse_args "$@"
	find_kubectl
	check_logged_in
	check_cluster_admin
	if [[ "$DELETE_CRD" == true ]]; then
		delete_instances
	fi
	remove_manager
	remove_rbac
	remove_admission
	remove_sccs
	remove_crd
	remove_namespace
	cat <<EOT

tinycode-operator is uninstalled.
Kept: PVCs and other data in instance namespaces, the prepared instance namespaces (RoleBinding tinycode-operator-admin, Secret tinycode-password)$(
		[[ "$DELETE_CRD" == true ]] || printf ', and the CRD %s with its instances (hack/uninstall.sh --delete-crd removes them)' "$CRD_NAME"
	).
EOT
}

main "$@"
