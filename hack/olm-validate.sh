#!/usr/bin/env bash
# Validates an OLM bundle directory with the operator-framework's validation
# library (github.com/operator-framework/api, the library behind
# `operator-sdk bundle validate`), built once from the Go module proxy and
# cached outside the repo.
#
# Usage: hack/olm-validate.sh [--print-path] [OLM-VALIDATE FLAGS] [BUNDLE_DIR]
#   BUNDLE_DIR     default: bundle
#   --print-path   build (if needed) and print the validator's path only
#   other flags go to the validator: -suite default|operatorhub
#   (default operatorhub), -k8s-version 1.33
#
# Environment:
#   TINYCODE_CACHE_DIR  binary cache (default ~/.cache/tinycode-operator)
#
# Exit status: the validator's (1 when the bundle has errors, 0 otherwise).
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOD_DIR="${REPO_ROOT}/hack/tools/olm-validate"
CACHE_DIR=${TINYCODE_CACHE_DIR:-${HOME}/.cache/tinycode-operator}

log() { printf 'olm-validate: %s\n' "$*" >&2; }
die() {
	printf 'olm-validate: ERROR: %s\n' "$*" >&2
	exit 2
}

api_version() {
	local v
	v=$(awk '$1 == "require" && $2 == "github.com/operator-framework/api" { print $3; exit }
		$1 == "github.com/operator-framework/api" { print $2; exit }' "${MOD_DIR}/go.mod")
	[[ -n "$v" ]] || die "cannot find the github.com/operator-framework/api version in ${MOD_DIR}/go.mod"
	printf '%s\n' "$v"
}

# The cache key covers the library version and the wrapper's own sources, so
# an edit to main.go or go.sum rebuilds.
binary_path() {
	local version digest
	version=$(api_version)
	digest=$(cat "${MOD_DIR}/main.go" "${MOD_DIR}/go.mod" "${MOD_DIR}/go.sum" | sha256sum)
	printf '%s/olm-validate-%s/olm-validate-%s\n' "$CACHE_DIR" "$version" "${digest:0:12}"
}

ensure_binary() {
	local bin=$1 tmp started=$SECONDS
	[[ -x "$bin" ]] && return 0
	command -v go >/dev/null 2>&1 || die "the go toolchain is needed to build the validator (${MOD_DIR})"
	mkdir -p "$(dirname "$bin")"
	# One build at a time, also across processes (two cores).
	if command -v flock >/dev/null 2>&1; then
		exec 7>"${CACHE_DIR}/.olm-validate.lock"
		flock 7
	fi
	if [[ ! -x "$bin" ]]; then
		tmp="${bin}.tmp.$$"
		log "building the validator ($(api_version)); this takes a minute or two the first time"
		if ! (cd "$MOD_DIR" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags '-s -w' \
			-o "$tmp" .) >"${bin}.build.log" 2>&1; then
			tail -n 30 "${bin}.build.log" >&2 || true
			rm -f -- "$tmp"
			die "building the validator failed (log: ${bin}.build.log)"
		fi
		mv -f -- "$tmp" "$bin"
		log "built ${bin} in $((SECONDS - started))s"
	fi
	if command -v flock >/dev/null 2>&1; then
		exec 7>&-
	fi
}

main() {
	local print_path=false args=() dir=""
	while (($#)); do
		case "$1" in
		--print-path) print_path=true ;;
		-h | --help)
			sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
			exit 0
			;;
		-suite | -k8s-version | --suite | --k8s-version)
			(($# >= 2)) || die "$1 needs a value"
			args+=("$1" "$2")
			shift
			;;
		-*) args+=("$1") ;;
		*)
			[[ -z "$dir" ]] || die "only one bundle directory, please (got ${dir} and $1)"
			dir=$1
			;;
		esac
		shift
	done
	local bin
	bin=$(binary_path)
	ensure_binary "$bin"
	if [[ "$print_path" == true ]]; then
		printf '%s\n' "$bin"
		return 0
	fi
	dir=${dir:-${REPO_ROOT}/bundle}
	[[ -d "$dir" ]] || die "no bundle directory at ${dir} (run: make bundle)"
	exec "$bin" "${args[@]+"${args[@]}"}" "$dir"
}

main "$@"
