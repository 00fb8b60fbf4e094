#!/usr/bin/env bash
# Installs tinycode-operator on a cluster. Needs cluster-admin.
#
# Usage: hack/install.sh [--no-wait] [--image IMAGE] [--timeout DURATION]
#                        [--watch-namespaces NAMESPACE]
#
#   --no-wait         do not wait for the manager rollout (INSTALL_WAIT=false)
#   --image IMAGE     operator image (OPERATOR_IMAGE; `make install IMAGE=...`),
#                     required: the one `make image` built and `make push`
#                     copied to a registry the nodes pull from
#   --timeout DUR     rollout wait, kubectl duration syntax (ROLLOUT_TIMEOUT, 180s)
#   --watch-namespaces NAMESPACE
#                     the one namespace the operator watches (WATCH_NAMESPACES;
#                     default: all namespaces); not its own namespace
#
# Environment: KUBECTL (default: oc, else kubectl), HELM (default: helm),
# KUBECONFIG, OPERATOR_IMAGE, INSTALL_WAIT, ROLLOUT_TIMEOUT, WATCH_NAMESPACES.
#
# Steps (each idempotent; re-running converges):
#   1. preflight: client, helm 3 (a warning only: the operator image brings
#      its own helm), logged in, cluster-admin
#   2. the SCCs and their `use` ClusterRoles (skipped, with a note, when the
#      cluster has no security.openshift.io API)
#   3. the CRD, then wait until it is Established
#   4. namespace tinycode-operator-system (pod security: restricted)
#   5. RBAC: ServiceAccount, operator ClusterRole + binding, leader-election
#      Role + binding, SCC binding for the manager, self-service user roles
#   6. the manager Deployment (its WATCH_NAMESPACE from --watch-namespaces)
#      and its metrics Service
#   7. monitoring: the tinycode-operator-metrics-reader ClusterRole (who may
#      read /metrics); the ServiceMonitor and PrometheusRule of
#      config/prometheus/ only when the cluster serves the Prometheus
#      Operator's monitoring.coreos.com API (skipped, with a note, otherwise)
#   8. wait for the rollout (skipped with --no-wait, or when the cluster has
#      no nodes, like the local control plane of hack/local-cluster.sh)
set -euo pipefail

SCRIPT_NAME=install
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

OPERATOR_IMAGE=${OPERATOR_IMAGE:-}
INSTALL_WAIT=${INSTALL_WAIT:-true}
ROLLOUT_TIMEOUT=${ROLLOUT_TIMEOUT:-180s}
WATCH_NAMESPACES=${WATCH_NAMESPACES:-}
HELM=${HELM:-helm}
NS=$OPERATOR_NAMESPACE_DEFAULT
DEPLOYMENT=tinycode-operator-manager
# The placeholder config/manager/manager.yaml names (the name `make image` gives
# its archive); always replaced, never deployed.
PLACEHOLDER_IMAGE=localhost/tinycode-operator

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

parse_args() {
	while (($#)); do
		case "$1" in
		--no-wait) INSTALL_WAIT=false ;;
		--wait) INSTALL_WAIT=true ;;
		--image)
			(($# >= 2)) || die "--image needs a value"
			OPERATOR_IMAGE=$2
			shift
			;;
		--image=*) OPERATOR_IMAGE=${1#--image=} ;;
		--timeout)
			(($# >= 2)) || die "--timeout needs a value"
			ROLLOUT_TIMEOUT=$2
			shift
			;;
		--timeout=*) ROLLOUT_TIMEOUT=${1#--timeout=} ;;
		--watch-namespaces)
			(($# >= 2)) || die "--watch-namespaces needs a value"
			WATCH_NAMESPACES=$2
			shift
			;;
		--watch-namespaces=*) WATCH_NAMESPACES=${1#--watch-namespaces=} ;;
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
	case "$INSTALL_WAIT" in
	true | false) ;;
	*) die "INSTALL_WAIT must be true or false (got '${INSTALL_WAIT}')" ;;
	esac
	# No default image: a guessed registry would run whatever sits there with
	# this operator's RBAC. Refused before anything is applied.
	if [[ -z "$OPERATOR_IMAGE" ]]; then
		die "no operator image: pass --image or OPERATOR_IMAGE (make install IMAGE=<registry>/<org>/tinycode-operator:<version>), the image make image built and make push copied to a registry your nodes pull from"
	fi
	if ! [[ "$OPERATOR_IMAGE" =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]*$ ]]; then
		die "OPERATOR_IMAGE '${OPERATOR_IMAGE}' is not an image reference (registry/org/name:tag or @sha256:...)"
	fi
	check_watch_namespaces
}

# check_watch_namespaces: WATCH_NAMESPACES is empty (all namespaces) or one
# namespace name (it goes into a sed expression, so it is checked strictly).
# The operator refuses the same things at start-up; refusing them here keeps a
# bad value from becoming a crash-looping manager.
check_watch_namespaces() {
	local given=$WATCH_NAMESPACES part
	local -a parts names=()
	IFS=, read -r -a parts <<<"${given//[[:space:]]/}"
	for part in "${parts[@]}"; do
		[[ -z "$part" || " ${names[*]} " == *" ${part} "* ]] || names+=("$part")
	done
	((${#names[@]} <= 1)) ||
		die "WATCH_NAMESPACES (--watch-namespaces) '${given}' names several namespaces; the operator watches one namespace or all (OLM's MultiNamespace mode is not supported)"
	WATCH_NAMESPACES=${names[0]:-}
	[[ -z "$WATCH_NAMESPACES" ]] && return 0
	[[ "$WATCH_NAMESPACES" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]] ||
		die "WATCH_NAMESPACES (--watch-namespaces) '${WATCH_NAMESPACES}' is not a namespace name"
	[[ "$WATCH_NAMESPACES" != "$NS" ]] ||
		die "WATCH_NAMESPACES (--watch-namespaces) names the operator's own namespace ${NS}, where instances are refused; name the namespace instances go into"
}

preflight() {
	find_kubectl
	log "using ${KUBECTL}"
	local v
	if ! command -v -- "$HELM" >/dev/null 2>&1; then
		warn "helm (${HELM}) is not installed; the operator image brings its own helm 3, so this only matters for running the operator outside the cluster"
	elif v=$("$HELM" version --short 2>/dev/null) && [[ "$v" == v3.* ]]; then
		log "helm ${v}"
	else
		warn "helm (${HELM}) reports '${v:-no version}', not 3.x; the operator image brings its own helm 3"
	fi
	check_logged_in
	check_cluster_admin
	log "cluster-admin: yes"
}

install_sccs() {
	if has_api security.openshift.io/v1; then
		apply_file "${REPO_ROOT}/config/scc/sccs.yaml"
	else
		log "this cluster has no security.openshift.io API (not OpenShift): skipping the SCCs: instances use Pod Security labels and an Ingress instead (see README, Kubernetes)"
	fi
}

# The host-directory admission policy (src/platform/admission.rs): pods in
# namespaces approved for hostPath workspaces get only approved directories,
# read-only unless approved readwrite. Kubernetes 1.30+ / OpenShift 4.17+.
install_admission() {
	local resources
	resources=$(kc get --raw /apis/admissionregistration.k8s.io/v1 2>/dev/null) || resources=""
	if [[ "$resources" == *'"validatingadmissionpolicies"'* ]]; then
		apply_file "${REPO_ROOT}/config/admission/host_paths.yaml"
	else
		log "this cluster serves no ValidatingAdmissionPolicy (Kubernetes < 1.30): host directories are held only by the SCC or Pod Security level; see README, Security model"
	fi
}

install_crd() {
	local crd
	apply_file "${REPO_ROOT}/config/crd/tinycode.dev_tinycodeinstances.yaml"
	apply_file "${REPO_ROOT}/config/crd/tinycode.dev_tinycodeclasses.yaml"
	for crd in "${CRD_NAME}" tinycodeclasses.tinycode.dev; do
		kc wait --for=condition=Established --timeout=60s "crd/${crd}" >/dev/null ||
			die "the CRD ${crd} was not Established within 60s (see: ${KUBECTL##*/} describe crd ${crd})"
		log "CRD ${crd} is Established"
	done
}

install_namespace() {
	if [[ "$(namespace_phase "$NS")" == Terminating ]]; then
		die "namespace ${NS} is being deleted (an earlier uninstall); wait until \`${KUBECTL##*/} get namespace ${NS}\` finds nothing, then re-run"
	fi
	apply_file "${REPO_ROOT}/config/manager/namespace.yaml"
}

install_rbac() {
	local f
	for f in service_account.yaml role.yaml role_binding.yaml leader_election_role.yaml \
		leader_election_role_binding.yaml manager_scc_role_binding.yaml user_role.yaml discovery_role.yaml; do
		apply_file "${REPO_ROOT}/config/rbac/${f}"
	done
}

install_manager() {
	local manifest="${REPO_ROOT}/config/manager/manager.yaml"
	local image=$OPERATOR_IMAGE
	grep -Eq "image: ${PLACEHOLDER_IMAGE}:[0-9][^ ]*\$" "$manifest" ||
		die "${manifest} no longer names ${PLACEHOLDER_IMAGE}:<version>; update PLACEHOLDER_IMAGE in $0"
	local watch='value: ""'
	grep -A1 -- '- name: WATCH_NAMESPACE$' "$manifest" | grep -q -- "$watch\$" ||
		die "${manifest} no longer sets WATCH_NAMESPACE to \"\" (all namespaces); update install_manager in $0"
	# The image and the namespace were checked against strict patterns above,
	# so they are safe in sed.
	sed -E -e "s|image: ${PLACEHOLDER_IMAGE}:[0-9][^ ]*\$|image: ${image}|" \
		-e "s|value: ${PLACEHOLDER_IMAGE}:[0-9][^ ]*\$|value: ${image}|" \
		-e "/- name: WATCH_NAMESPACE\$/{n;s|${watch}\$|value: \"${WATCH_NAMESPACES}\"|;}" \
		"$manifest" | apply_stdin "$manifest"
	log "applied config/manager/manager.yaml (image ${image}; watching ${WATCH_NAMESPACES:-all namespaces})"
	apply_file "${REPO_ROOT}/config/manager/service.yaml"
	apply_file "${REPO_ROOT}/config/manager/oidc_relay_service.yaml"
	apply_file "${REPO_ROOT}/config/manager/network_policy.yaml"
}

# has_monitoring_crds: the cluster serves ServiceMonitors and PrometheusRules.
has_monitoring_crds() {
	local resources
	resources=$(kc get --raw /apis/monitoring.coreos.com/v1 2>/dev/null) || return 1
	[[ "$resources" == *'"servicemonitors"'* && "$resources" == *'"prometheusrules"'* ]]
}

install_monitoring() {
	apply_file "${REPO_ROOT}/config/prometheus/metrics_reader_role.yaml"
	if has_monitoring_crds; then
		apply_file "${REPO_ROOT}/config/prometheus/monitor.yaml"
		apply_file "${REPO_ROOT}/config/prometheus/rules.yaml"
		log "bind your Prometheus's ServiceAccount to ClusterRole tinycode-operator-metrics-reader, or its scrapes are refused (docs/monitoring.md)"
	else
		log "this cluster has no monitoring.coreos.com API (no Prometheus Operator): skipping config/prometheus/monitor.yaml and rules.yaml (see docs/monitoring.md)"
	fi
}

wait_rollout() {
	if [[ "$INSTALL_WAIT" != true ]]; then
		log "not waiting for the rollout (--no-wait / INSTALL_WAIT=false)"
		return 0
	fi
	local nodes
	nodes=$(kc get nodes -o name 2>/dev/null || true)
	if [[ -z "$nodes" ]]; then
		log "the cluster has no nodes (a bare control plane?): skipping the rollout wait; nothing can run the manager pod here"
		return 0
	fi
	log "waiting up to ${ROLLOUT_TIMEOUT} for deployment/${DEPLOYMENT} to roll out"
	if ! kc rollout status "deployment/${DEPLOYMENT}" -n "$NS" --timeout="$ROLLOUT_TIMEOUT"; then
		kc get pods -n "$NS" -l app.kubernetes.io/component=manager -o wide >&2 || true
		die "the manager did not become ready within ${ROLLOUT_TIMEOUT}; look at: ${KUBECTL##*/} describe deployment/${DEPLOYMENT} -n ${NS}; ${KUBECTL##*/} logs deployment/${DEPLOYMENT} -n ${NS}"
	fi
}

next_steps() {
	local k=${KUBECTL##*/} t=${WATCH_NAMESPACES:-tinycode-dev}
	cat <<EOT

tinycode-operator is installed (namespace ${NS}), watching ${WATCH_NAMESPACES:-every namespace}.

Next steps:
  1. Prepare a namespace for instances (operator admin RoleBinding + password Secret):
       hack/prepare-namespace.sh ${t} --generate-password
  2. Create an instance:
       make deploy-sample NAMESPACE=${t}
     or: ${k} apply -n ${t} -f config/samples/tinycode_v1alpha1_basic.yaml
  3. Watch it and get its URL:
       ${k} get tinycodeinstances -n ${t} -w
       ${k} get tinycodeinstance my-tinycode -n ${t} -o jsonpath='{.status.url}'

Self-service users: bind ClusterRole tinycode-user-role in their namespace, e.g.
  ${k} create rolebinding alice-tinycode-user --clusterrole=tinycode-user-role --user=alice@example.com -n tinycode-alice
Manager logs: ${k} logs deployment/${DEPLOYMENT} -n ${NS}
Uninstall:    hack/uninstall.sh   (keeps the CRD and instance data unless told otherwise)
EOT
}

main() {
	parse_args "$@"
	preflight
	install_sccs
	install_crd
	install_namespace
	install_rbac
	install_admission
	install_manager
	install_monitoring
	wait_rollout
	next_steps
}

main "$@"
