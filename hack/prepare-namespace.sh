#!/usr/bin/env bash
# Prepares a namespace for TinycodeInstances (cluster-admin). Idempotent.
#
# Usage: hack/prepare-namespace.sh NAMESPACE [--password-from-env | --generate-password]
#                                  [--allow-hostpath] [--allow-shell]
#                                  [--operator-namespace NS] [--operator-service-account SA]
#
#   (always)              create NAMESPACE when missing; RoleBinding
#                         tinycode-operator-admin: ClusterRole admin for the
#                         operator's ServiceAccount (it installs Deployments,
#                         PVCs, Roles, RoleBindings, Routes there); the label
#                         tinycode.dev/prepared=true, which records that a
#                         cluster-admin prepared the namespace (the operator
#                         refuses namespaces without it); and, when the
#                         namespace has no Pod Security enforce label and no
#                         tier below is approved there, the label
#                         pod-security.kubernetes.io/enforce=restricted, so a
#                         tenant's own pods cannot ask for more than the
#                         instances get (an existing label is kept; the
#                         hostpath and shell tiers need the admin's choice)
#   --password-from-env   Secret tinycode-password, key TINYCODE_SERVER_PASSWORD,
#                         from the TINYCODE_PASSWORD environment variable
#                         (replaces an existing password)
#   --generate-password   the same Secret with a random password, only when the
#                         Secret does not exist yet (an existing one is kept)
#   --allow-hostpath      approve the tinycode-hostpath SCC tier here for
#                         read-only host directories
#                         (label tinycode.dev/allow-hostpath=true); the paths
#                         must lie under the operator's
#                         --hostpath-allowed-prefixes
#   --allow-hostpath-write the same tier, read-write
#                         (label tinycode.dev/allow-hostpath=readwrite)
#   --allow-shell         approve the tinycode-shell SCC tier here (hostPID!)
#                         (label tinycode.dev/allow-shell=true)
#   --operator-namespace  where the operator runs (default
#                         tinycode-operator-system; with OLM, the namespace it
#                         was installed in, often openshift-operators)
#
# The password is never printed and never on a command line: it reaches the
# cluster as a manifest on standard input. Read it back with
#   kubectl get secret tinycode-password -n NAMESPACE \
#     -o jsonpath='{.data.TINYCODE_SERVER_PASSWORD}' | base64 -d
#
# Environment: KUBECTL (default: oc, else kubectl), KUBECONFIG, TINYCODE_PASSWORD.
set -euo pipefail

SCRIPT_NAME=prepare-namespace
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

NAMESPACE=
PASSWORD_MODE=none
ALLOW_HOSTPATH=false
ALLOW_SHELL=false
OPERATOR_NAMESPACE=${OPERATOR_NAMESPACE:-$OPERATOR_NAMESPACE_DEFAULT}
OPERATOR_SERVICE_ACCOUNT=${OPERATOR_SERVICE_ACCOUNT:-$OPERATOR_SERVICE_ACCOUNT_DEFAULT}
SECRET=tinycode-password
SECRET_KEY=TINYCODE_SERVER_PASSWORD
BINDING=tinycode-operator-admin

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

set_password_mode() {
	[[ "$PASSWORD_MODE" == none || "$PASSWORD_MODE" == "$1" ]] ||
		die "--password-from-env and --generate-password exclude each other"
	PASSWORD_MODE=$1
}

parse_args() {
	while (($#)); do
		case "$1" in
		--password-from-env) set_password_mode env ;;
		--generate-password) set_password_mode generate ;;
		--allow-hostpath) [[ "$ALLOW_HOSTPATH" == readwrite ]] || ALLOW_HOSTPATH=true ;;
		--allow-hostpath-write) ALLOW_HOSTPATH=readwrite ;;
		--allow-shell) ALLOW_SHELL=true ;;
		--operator-namespace)
			(($# >= 2)) || die "--operator-namespace needs a value"
			OPERATOR_NAMESPACE=$2
			shift
			;;
		--operator-namespace=*) OPERATOR_NAMESPACE=${1#--operator-namespace=} ;;
		--operator-service-account)
			(($# >= 2)) || die "--operator-service-account needs a value"
			OPERATOR_SERVICE_ACCOUNT=$2
			shift
			;;
		--operator-service-account=*) OPERATOR_SERVICE_ACCOUNT=${1#--operator-service-account=} ;;
		-h | --help)
			usage
			exit 0
			;;
		-*)
			usage >&2
			die "unknown option: $1"
			;;
		*)
			[[ -z "$NAMESPACE" ]] || die "one namespace at a time (got ${NAMESPACE} and $1)"
			NAMESPACE=$1
			;;
		esac
		shift
	done
	[[ -n "$NAMESPACE" ]] || {
		usage >&2
		die "name the namespace to prepare"
	}
	local dns='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' n
	for n in "$NAMESPACE" "$OPERATOR_NAMESPACE" "$OPERATOR_SERVICE_ACCOUNT"; do
		[[ "$n" =~ $dns && ${#n} -le 63 ]] ||
			die "'${n}' is not a valid Kubernetes name (lowercase letters, digits and '-', at most 63)"
	done
	case "$NAMESPACE" in
	default | openshift | kube-* | openshift-* | "$OPERATOR_NAMESPACE")
		die "namespace ${NAMESPACE} is reserved (default, kube-*, openshift-* and the operator's own ${OPERATOR_NAMESPACE}); the operator refuses instances there. Use a namespace of its own, e.g. tinycode-dev"
		;;
	esac
	if [[ "$PASSWORD_MODE" == env && -z "${TINYCODE_PASSWORD:-}" ]]; then
		die "--password-from-env: set TINYCODE_PASSWORD (e.g. read -rs TINYCODE_PASSWORD && export TINYCODE_PASSWORD)"
	fi
}

ensure_namespace() {
	case "$(namespace_phase "$NAMESPACE")" in
	Active) log "namespace ${NAMESPACE} exists" ;;
	Terminating) die "namespace ${NAMESPACE} is being deleted; wait until it is gone, then re-run" ;;
	*)
		printf '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"%s"}}\n' "$NAMESPACE" |
			apply_stdin "namespace ${NAMESPACE}"
		log "created namespace ${NAMESPACE}"
		;;
	esac
}

grant_operator_admin() {
	printf '%s\n' "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"RoleBinding\",
\"metadata\":{\"name\":\"${BINDING}\",\"namespace\":\"${NAMESPACE}\",\"labels\":{\"app.kubernetes.io/name\":\"tinycode-operator\"}},
\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"admin\"},
\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"${OPERATOR_SERVICE_ACCOUNT}\",\"namespace\":\"${OPERATOR_NAMESPACE}\"}]}" |
		apply_stdin "RoleBinding ${BINDING}"
	log "RoleBinding ${BINDING}: ClusterRole admin for ${OPERATOR_NAMESPACE}/${OPERATOR_SERVICE_ACCOUNT}"
}

# The label is the record that a cluster-admin prepared the namespace: the
# RoleBinding alone proves nothing, since the namespace's own admin can create
# the same binding, but only a cluster-admin can label a namespace.
mark_prepared() {
	kc label namespace "$NAMESPACE" tinycode.dev/prepared=true --overwrite >/dev/null
	log "labelled namespace ${NAMESPACE} tinycode.dev/prepared=true"
}

# write_password_secret: the password comes in on stdin, leaves as base64
# inside a manifest on the client's stdin; no process gets it as an argument
# (printf and read are shell builtins).
write_password_secret() {
	local password encoded
	IFS= read -r -d '' password || true
	[[ -n "$password" ]] || die "the password is empty"
	encoded=$(printf '%s' "$password" | base64 | tr -d '\n')
	password=
	printf '%s\n' "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"type\":\"Opaque\",
\"metadata\":{\"name\":\"${SECRET}\",\"namespace\":\"${NAMESPACE}\",\"labels\":{\"app.kubernetes.io/name\":\"tinycode-operator\"}},
\"data\":{\"${SECRET_KEY}\":\"${encoded}\"}}" |
		apply_stdin "Secret ${SECRET}"
}

secret_exists() { kc get secret "$SECRET" -n "$NAMESPACE" -o name >/dev/null 2>&1; }

ensure_password() {
	case "$PASSWORD_MODE" in
	env)
		printf '%s' "$TINYCODE_PASSWORD" | write_password_secret
		log "Secret ${SECRET} (key ${SECRET_KEY}) set from TINYCODE_PASSWORD"
		;;
	generate)
		if secret_exists; then
			log "Secret ${SECRET} exists; kept its password (delete the Secret to generate a new one)"
		else
			# 24 random bytes, base64url: 32 characters.
			head -c 24 /dev/urandom | base64 | tr -d '\n' | tr '+/' '-_' | write_password_secret
			log "Secret ${SECRET} (key ${SECRET_KEY}) created with a generated password"
		fi
		;;
	none)
		if ! secret_exists; then
			warn "no Secret ${SECRET} in ${NAMESPACE}: instances with spec.auth.passwordSecret: ${SECRET} fail until it exists (re-run with --generate-password or --password-from-env)"
		fi
		;;
	esac
}

# Pod Security's restricted profile is what the restricted tier's pods meet;
# enforcing it keeps every other pod of the namespace to the same. A label the
# cluster-admin set is theirs; the privileged tiers need theirs (README).
enforce_pod_security() {
	local current tiers
	current=$(kc get namespace "$NAMESPACE" -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}')
	tiers=$(kc get namespace "$NAMESPACE" \
		-o jsonpath='{.metadata.labels.tinycode\.dev/allow-hostpath}{.metadata.labels.tinycode\.dev/allow-shell}')
	if [[ -n "$current" ]]; then
		log "kept Pod Security enforce=${current} on ${NAMESPACE}"
	elif [[ -n "$tiers" ]]; then
		warn "no Pod Security enforce label on ${NAMESPACE}: the hostpath and shell tiers need pod-security.kubernetes.io/enforce=privileged on Kubernetes (OpenShift sets its own); set what fits"
	else
		kc label namespace "$NAMESPACE" pod-security.kubernetes.io/enforce=restricted >/dev/null
		log "labelled namespace ${NAMESPACE} pod-security.kubernetes.io/enforce=restricted"
	fi
}

approve_tiers() {
	if [[ "$ALLOW_HOSTPATH" != false ]]; then
		kc label namespace "$NAMESPACE" "tinycode.dev/allow-hostpath=${ALLOW_HOSTPATH}" --overwrite >/dev/null
		log "approved the tinycode-hostpath SCC tier (label tinycode.dev/allow-hostpath=${ALLOW_HOSTPATH})"
	fi
	if [[ "$ALLOW_SHELL" == true ]]; then
		kc label namespace "$NAMESPACE" tinycode.dev/allow-shell=true --overwrite >/dev/null
		log "approved the tinycode-shell SCC tier (label tinycode.dev/allow-shell=true): instances here may see host processes"
	fi
}

main() {
	parse_args "$@"
	find_kubectl
	check_logged_in
	# Before anything is written: someone else would get the namespace and the
	# operator's RoleBinding, then fail at the label only a cluster-admin sets.
	check_cluster_admin
	ensure_namespace
	grant_operator_admin
	mark_prepared
	ensure_password
	approve_tiers
	enforce_pod_security
	local k=${KUBECTL##*/}
	cat <<EOT

Namespace ${NAMESPACE} is prepared for TinycodeInstances.
Create one:    make deploy-sample NAMESPACE=${NAMESPACE}
Read password: ${k} get secret ${SECRET} -n ${NAMESPACE} -o jsonpath='{.data.${SECRET_KEY}}' | base64 -d
EOT
}

main "$@"
