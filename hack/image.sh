#!/usr/bin/env bash
# The operator image, built without a container daemon or a registry.
#
# Usage: hack/image.sh <command> [args]
#   tools                  make sure buildah, skopeo, umoci and mmdebstrap are
#                          installed (apt-get when run as root; otherwise the
#                          command to run is printed and the script fails)
#   base                   print the Debian root the image's libraries and CA
#                          certificates come from (mmdebstrap, cached outside
#                          the repo; rebuilt when missing)
#   rootfs OUT LIBROOT BIN HELM
#                          assemble the image's root filesystem in OUT: BIN and
#                          HELM, the shared libraries they load (taken from
#                          LIBROOT), a CA bundle (LIBROOT's Debian
#                          ca-certificates), the chart, passwd/group, /tmp.
#                          The Dockerfile runs this same command.
#   build                  rootfs from target/release/tinycode-operator, the
#                          cached helm and `base`, committed with buildah into
#                          target/image/tinycode-operator-VERSION.oci.tar
#                          (tag VERSION); prints the archive and the image digest
#   push IMAGE             copy that archive to IMAGE with skopeo (no daemon)
#   digest [ARCHIVE]       print the image (manifest) digest of an OCI archive
#   crane                  print the path of crane (a registry for push's test)
#
# Environment: IMAGE_ARCHIVE (the archive build writes and push reads; default
# target/image/tinycode-operator-VERSION.oci.tar), TINYCODE_CACHE_DIR (default
# ~/.cache/tinycode-operator),
# PUSH_TLS_VERIFY=false (push to a registry without TLS), SOURCE_DATE_EPOCH
# (the images' timestamps; default 0), HELM (the helm binary
# to ship; default the cached build hack/local-cluster.sh tools makes).
#
# Reproducible: every timestamp in the image is SOURCE_DATE_EPOCH, every file is
# owned by root with fixed modes, and nothing from the build (git revision,
# build time, host name) is recorded, so the same tree gives the same digest.

set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR=${TINYCODE_CACHE_DIR:-${HOME}/.cache/tinycode-operator}
EPOCH=${SOURCE_DATE_EPOCH:-0}
IMAGE_DIR="${REPO_ROOT}/target/image"
NAME=tinycode-operator
# The user the operator runs as; OpenShift's restricted SCC replaces the UID
# with one from the namespace's range and keeps GID 0, so nothing below may be
# writable by group 0 either.
UID_RUN=1001
# Debian packages the image's files come from: the C library and libgcc_s
# (both binaries are dynamically linked against glibc) and the Mozilla CA set.
BASE_SUITE=bookworm
BASE_PACKAGES=(libc6 libgcc-s1 ca-certificates)
DEB_TOOLS=(buildah skopeo umoci mmdebstrap)

log() { printf 'image: %s\n' "$*" >&2; }
die() {
	printf 'image: ERROR: %s\n' "$*" >&2
	exit 1
}

version() {
	awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version *=/ { print $2; exit }' "${REPO_ROOT}/Cargo.toml"
}

archive_path() {
	printf '%s\n' "${IMAGE_ARCHIVE:-${IMAGE_DIR}/${NAME}-$(version).oci.tar}"
}

cmd_tools() {
	local missing=() t
	for t in "${DEB_TOOLS[@]}"; do
		command -v "$t" >/dev/null 2>&1 || missing+=("$t")
	done
	[[ ${#missing[@]} -eq 0 ]] && return 0
	if [[ $(id -u) -ne 0 ]]; then
		die "missing ${missing[*]}: install them with: sudo apt-get install -y --no-install-recommends ${DEB_TOOLS[*]}"
	fi
	log "installing ${missing[*]} from Debian"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${DEB_TOOLS[@]}" >&2 || {
		apt-get update >&2 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${DEB_TOOLS[@]}" >&2
	} || die "apt-get could not install ${DEB_TOOLS[*]}"
}

# The Debian root is keyed by suite and package list; a rebuild picks up the
# suite's current package versions, which a new key (or deleting the directory)
# forces.
cmd_base() {
	local key dir tmp
	key=$(printf '%s %s' "$BASE_SUITE" "${BASE_PACKAGES[*]}" | sha256sum | cut -c1-12)
	dir="${CACHE_DIR}/image-base-${BASE_SUITE}-${key}"
	if [[ ! -f "${dir}/.complete" ]]; then
		command -v mmdebstrap >/dev/null 2>&1 || cmd_tools
		mkdir -p "$CACHE_DIR"
		tmp="${dir}.tmp.$$"
		rm -rf "$tmp"
		log "extracting ${BASE_PACKAGES[*]} (Debian ${BASE_SUITE}) into ${dir}"
		# extract: unpack the packages, run none of their scripts; the CA
		# bundle is concatenated by `rootfs`, not by update-ca-certificates.
		SOURCE_DATE_EPOCH=$EPOCH mmdebstrap --quiet --variant=extract --format=directory \
			--include="$(
				IFS=,
				echo "${BASE_PACKAGES[*]}"
			)" "$BASE_SUITE" "$tmp" >&2 || die "mmdebstrap failed"
		touch "${tmp}/.complete"
		rm -rf "$dir"
		mv "$tmp" "$dir"
	fi
	printf '%s\n' "$dir"
}

# needed_libraries LIBROOT BIN...: the shared objects BIN loads, as paths
# inside LIBROOT (the loader first), resolved by LIBROOT's own loader so no
# library of the build machine can slip in.
needed_libraries() {
	local libroot=$1 bin interp loader libdir line path
	shift
	# The ELF interpreter the binaries name (/lib64/ld-linux-x86-64.so.2 on
	# amd64, /lib/ld-linux-aarch64.so.1 on arm64), a link to the loader.
	for interp in /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1; do
		[[ -e "${libroot}${interp}" ]] && break
	done
	[[ -e "${libroot}${interp}" ]] || die "no dynamic loader in ${libroot:-/}"
	loader=$(in_root "$libroot" "$interp")
	libdir=$(dirname "$loader")
	printf '%s\n%s\n' "$interp" "$loader"
	for bin in "$@"; do
		while read -r line; do
			# "libc.so.6 => /root/lib/x86_64-linux-gnu/libc.so.6 (0x...)"
			[[ "$line" == *" => "* ]] || continue
			path=${line#* => }
			path=${path% (*}
			[[ "$path" == "$libroot"/* ]] || die "${bin} needs ${line%% *}, which ${libroot:-/} does not have"
			printf '%s\n' "${path#"$libroot"}"
		done < <("${libroot}${loader}" --library-path "${libroot}${libdir}:${libroot}/usr${libdir}" --list "$bin")
	done
}

# in_root ROOT PATH: PATH with a symbolic link in its last component resolved
# inside ROOT (an absolute target names a path of the image, not of the build
# machine); the file it names must exist.
in_root() {
	local root=$1 path=$2 target
	if [[ -L "${root}${path}" ]]; then
		target=$(readlink "${root}${path}")
		[[ "$target" == /* ]] || target="$(dirname "$path")/${target}"
		path=$target
	fi
	[[ -f "${root}${path}" && ! -L "${root}${path}" ]] || die "${path} is not a file of ${root:-/}"
	printf '%s\n' "$path"
}

cmd_rootfs() {
	[[ $# -eq 4 ]] || die "usage: rootfs OUT LIBROOT BIN HELM"
	local out=$1 libroot=${2%/} bin=$3 helm=$4 lib real
	[[ -x "$bin" ]] || die "no operator binary at ${bin}"
	[[ -x "$helm" ]] || die "no helm binary at ${helm}"
	[[ -d "${libroot}/usr/share/ca-certificates/mozilla" ]] || die "${libroot} has no Debian ca-certificates"
	rm -rf "$out"
	mkdir -p "$out"/{etc/ssl/certs,tmp,usr/local/bin,licenses,helm-charts}

	install -m 0755 "$bin" "$out/usr/local/bin/tinycode-operator"
	install -m 0755 "$helm" "$out/usr/local/bin/helm"

	# The loader and libraries, plus the symlinks their names go through
	# (/lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/...).
	while read -r lib; do
		mkdir -p "$out/$(dirname "$lib")"
		if [[ -L "${libroot}${lib}" ]]; then
			cp -P "${libroot}${lib}" "$out${lib}"
			real=$(in_root "$libroot" "$lib")
			mkdir -p "$out/$(dirname "$real")"
			install -m 0755 "${libroot}${real}" "$out${real}"
		else
			install -m 0755 "${libroot}${lib}" "$out${lib}"
		fi
	done < <(needed_libraries "$libroot" "$bin" "$helm" | sort -u)

	# One PEM bundle at the path rustls-native-certs and Go's crypto/x509 read.
	find "${libroot}/usr/share/ca-certificates/mozilla" -name '*.crt' -print0 | LC_ALL=C sort -z |
		xargs -0 cat >"$out/etc/ssl/certs/ca-certificates.crt"

	# Names for the two IDs the image runs as, for tools that look them up.
	printf 'root:x:0:0:root:/root:/sbin/nologin\ntinycode-operator:x:%s:0:tinycode-operator:/tmp:/sbin/nologin\n' \
		"$UID_RUN" >"$out/etc/passwd"
	printf 'root:x:0:\n' >"$out/etc/group"

	# The chart with its files/ (scripts the pods run); its CI values stay out.
	cp -R "${REPO_ROOT}/helm-charts/tinycode" "$out/helm-charts/tinycode"
	rm -rf "$out/helm-charts/tinycode/ci"
	install -m 0644 "${REPO_ROOT}/LICENSE" "$out/licenses/LICENSE"

	# Read-only for everyone but root; /tmp (an emptyDir in the pod) is the
	# only place the operator and helm write.
	chmod -R u=rwX,go=rX "$out"
	chmod 0755 "$out/usr/local/bin/"*
	chmod 1777 "$out/tmp"
}

# The image's configuration. The Dockerfile's last stage states the same
# (tools/tests/image.rs compares the two).
CONFIG_ARGS=(
	--user "$UID_RUN"
	--workingdir /tmp
	--entrypoint '["/usr/local/bin/tinycode-operator"]'
	--cmd run
	--env PATH=/usr/local/bin
	--env HELM_CHART_PATH=/helm-charts/tinycode
	--env HELM_BIN=/usr/local/bin/helm
	--env TMPDIR=/tmp
	--env HOME=/tmp
	--env HELM_CACHE_HOME=/tmp/.cache/helm
	--env HELM_CONFIG_HOME=/tmp/.config/helm
	--env HELM_DATA_HOME=/tmp/.local/share/helm
	--port 8081/tcp
	--port 8383/tcp
	--port 8484/tcp
	--label name=tinycode-operator
	--label summary="Installs and manages tinycode AI coding agent instances on OpenShift and Kubernetes"
	--label io.k8s.display-name=tinycode-operator
	--label "io.openshift.tags=tinycode,operator,ai"
	--label org.opencontainers.image.title=tinycode-operator
	--label org.opencontainers.image.licenses=MIT
)

cmd_build() {
	local bin="${REPO_ROOT}/target/release/tinycode-operator" helm=${HELM:-} base root ctr archive ver
	[[ -x "$bin" ]] || die "no release binary at ${bin}: run \`cargo build --release --locked -p tinycode-operator\` (make image does)"
	if [[ -z "$helm" ]]; then
		helm=$("${REPO_ROOT}/hack/local-cluster.sh" tools | sed -n 's/^TINYCODE_HELM=//p')
	fi
	cmd_tools
	base=$(cmd_base)
	ver=$(version)
	archive=$(archive_path)
	WORK="${IMAGE_DIR}/work-$$"
	local work=$WORK
	root="${work}/rootfs"
	mkdir -p "$IMAGE_DIR"
	rm -rf "$work"
	mkdir -p "$work"
	trap 'rm -rf "$WORK"' EXIT
	cmd_rootfs "$root" "$base" "$bin" "$helm"

	# buildah keeps its own storage under target/ (vfs: no overlay mounts, no
	# daemon) and drops it afterwards.
	local b=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
	ctr=$("${b[@]}" from --name "${NAME}-build-$$" scratch)
	# Labels carry only what the tree decides (no revision, no build date).
	"${b[@]}" config "${CONFIG_ARGS[@]}" \
		--label "org.opencontainers.image.version=${ver}" \
		--label "version=${ver}" \
		--created-by "hack/image.sh build" \
		"$ctr" >&2
	"${b[@]}" copy --chown 0:0 "$ctr" "$root/" / >&2
	mkdir -p "$(dirname "$archive")"
	rm -f "$archive"
	# gzip by Go's compress/gzip writes no time or name into its header: the
	# same layer compresses to the same bytes.
	"${b[@]}" commit --quiet --format oci --timestamp "$EPOCH" --identity-label=false --rm \
		--disable-compression=false \
		"$ctr" "oci-archive:${archive}:${NAME}:${ver}" >&2
	printf '%s\n' "$archive"
	cmd_digest "$archive"
}

# A registry for the tests of `push` (crane's, in memory, on loopback), built
# once from the Go module proxy and cached like the control plane's binaries.
CRANE_VERSION=v0.22.1
cmd_crane() {
	local dir="${CACHE_DIR}/crane-${CRANE_VERSION}"
	if [[ ! -x "${dir}/crane" ]]; then
		log "building crane ${CRANE_VERSION} (once; cached in ${dir})"
		mkdir -p "$dir"
		GOBIN="$dir" go install "github.com/google/go-containerregistry/cmd/crane@${CRANE_VERSION}" >&2 ||
			die "go install crane@${CRANE_VERSION} failed"
	fi
	printf '%s\n' "${dir}/crane"
}

cmd_digest() {
	local archive=${1:-$(archive_path)}
	[[ -f "$archive" ]] || die "no image archive at ${archive}: run make image"
	skopeo inspect --raw "oci-archive:${archive}" | sha256sum | sed 's/^\([0-9a-f]*\).*/sha256:\1/'
}

cmd_push() {
	[[ $# -eq 1 && -n "$1" ]] || die "usage: push IMAGE (registry/org/tinycode-operator:$(version))"
	local image=$1 archive
	[[ "$image" =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]*$ ]] || die "'${image}' is not an image reference"
	archive=$(archive_path)
	[[ -f "$archive" ]] || die "no image archive at ${archive}: run make image first"
	cmd_tools
	local tls=()
	# A registry without TLS (a test registry on loopback) needs saying so.
	[[ "${PUSH_TLS_VERIFY:-true}" == false ]] && tls=(--dest-tls-verify=false)
	log "copying ${archive} to ${image}"
	skopeo copy --quiet "${tls[@]}" "oci-archive:${archive}" "docker://${image}" >&2 ||
		die "pushing to ${image} failed (logged in? \`skopeo login ${image%%/*}\`)"
	printf '%s\n' "$image"
}

main() {
	local cmd=${1:-}
	if [[ "$cmd" == -h || "$cmd" == --help ]]; then
		sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
		exit 0
	fi
	shift || true
	case "$cmd" in
	tools) cmd_tools ;;
	base) cmd_base ;;
	rootfs) cmd_rootfs "$@" ;;
	build) cmd_build ;;
	push) cmd_push "$@" ;;
	digest) cmd_digest "$@" ;;
	crane) cmd_crane ;;
	*) die "usage: $0 tools|base|rootfs OUT LIBROOT BIN HELM|build|push IMAGE|digest [ARCHIVE]|crane" ;;
	esac
}

main "$@"
