#!/usr/bin/env bash
# Builds (and pushes) the operator image with podman or docker.
#
# Usage: hack/build-push.sh [--push] [--image IMAGE] [--platform PLATFORM] [-- EXTRA BUILD ARGS]
#
#   --push            push the image after building it
#   --image IMAGE     default: $OPERATOR_IMAGE, else
#                     ${IMAGE_REGISTRY:-quay.io}/${IMAGE_ORG:-bjohns}/tinycode-operator:${IMAGE_TAG:-latest}
#   --platform P      e.g. linux/arm64 (default: the engine's own)
#   -- ARGS           passed to `build`, e.g. -- --build-arg HELM_SHA256=...
#
# Environment: CONTAINER_TOOL (default: podman, else docker), OPERATOR_IMAGE,
# IMAGE_REGISTRY, IMAGE_ORG, IMAGE_TAG. Pushing needs a prior `podman login`
# (or `docker login`) to the registry.
set -euo pipefail

SCRIPT_NAME=build-push
# shellcheck source=hack/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

PUSH=false
PLATFORM=
IMAGE=${OPERATOR_IMAGE:-${IMAGE_REGISTRY:-quay.io}/${IMAGE_ORG:-bjohns}/tinycode-operator:${IMAGE_TAG:-latest}}
EXTRA=()

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

parse_args() {
	while (($#)); do
		case "$1" in
		--push) PUSH=true ;;
		--image)
			(($# >= 2)) || die "--image needs a value"
			IMAGE=$2
			shift
			;;
		--image=*) IMAGE=${1#--image=} ;;
		--platform)
			(($# >= 2)) || die "--platform needs a value"
			PLATFORM=$2
			shift
			;;
		--platform=*) PLATFORM=${1#--platform=} ;;
		--)
			shift
			EXTRA=("$@")
			break
			;;
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
	[[ "$IMAGE" =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]*$ ]] || die "'${IMAGE}' is not an image reference"
}

find_engine() {
	local tool=${CONTAINER_TOOL:-}
	if [[ -z "$tool" ]]; then
		tool=$(command -v podman 2>/dev/null || command -v docker 2>/dev/null || true)
	fi
	[[ -n "$tool" ]] ||
		die "no container engine: install podman (or docker), or set CONTAINER_TOOL; nothing was built"
	command -v -- "$tool" >/dev/null 2>&1 || die "CONTAINER_TOOL=${tool} is not an executable command"
	"$tool" info >/dev/null 2>&1 ||
		die "${tool} is installed but does not answer (\`${tool} info\` fails: daemon not running, or no permission); nothing was built"
	CONTAINER_TOOL=$tool
}

main() {
	parse_args "$@"
	find_engine
	local args=(build -t "$IMAGE" -f "${REPO_ROOT}/Dockerfile")
	[[ -z "$PLATFORM" ]] || args+=(--platform "$PLATFORM")
	log "building ${IMAGE} with ${CONTAINER_TOOL}"
	"$CONTAINER_TOOL" "${args[@]}" "${EXTRA[@]+"${EXTRA[@]}"}" "$REPO_ROOT" || die "the build failed"
	if [[ "$PUSH" == true ]]; then
		log "pushing ${IMAGE}"
		"$CONTAINER_TOOL" push "$IMAGE" ||
			die "pushing ${IMAGE} failed (logged in? \`${CONTAINER_TOOL##*/} login ${IMAGE%%/*}\`)"
	fi
	log "done: ${IMAGE}"
}

main "$@"
