#!/usr/bin/env bash
# Usage: hack/sbom.sh
#
# CycloneDX SBOMs of what the operator image ships, written beside the image
# archive in target/image/sbom/:
#   tinycode-operator.cdx.json  the operator binary: its crates, from Cargo.lock
#                               (cargo-cyclonedx, for the target the image runs)
#   helm.cdx.json               helm: the Go modules recorded in the binary
#                               itself (cyclonedx-gomod bin)
#
# The two generators are built once from crates.io and the Go module proxy and
# cached outside the repository, keyed by version, like hack/local-cluster.sh's
# control plane. Environment: TINYCODE_CACHE_DIR (default
# ~/.cache/tinycode-operator), HELM (the helm binary to describe; default the
# cached build of hack/local-cluster.sh tools).
#
# Reproducible: the serial number and timestamp each generator invents are
# replaced by ones derived from the content and SOURCE_DATE_EPOCH (default 0).

set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR=${TINYCODE_CACHE_DIR:-${HOME}/.cache/tinycode-operator}
OUT="${REPO_ROOT}/target/image/sbom"
CARGO_CYCLONEDX_VERSION=0.5.9
CYCLONEDX_GOMOD_VERSION=v1.10.0

log() { printf 'sbom: %s\n' "$*" >&2; }
die() {
	printf 'sbom: ERROR: %s\n' "$*" >&2
	exit 1
}

ensure_generators() {
	CARGO_CYCLONEDX="${CACHE_DIR}/cargo-cyclonedx-${CARGO_CYCLONEDX_VERSION}/bin/cargo-cyclonedx"
	if [[ ! -x "$CARGO_CYCLONEDX" ]]; then
		log "building cargo-cyclonedx ${CARGO_CYCLONEDX_VERSION} (once; cached in ${CACHE_DIR})"
		cargo install --quiet --locked --version "$CARGO_CYCLONEDX_VERSION" \
			--root "${CACHE_DIR}/cargo-cyclonedx-${CARGO_CYCLONEDX_VERSION}" cargo-cyclonedx >&2 ||
			die "cargo install cargo-cyclonedx@${CARGO_CYCLONEDX_VERSION} failed"
	fi
	CYCLONEDX_GOMOD="${CACHE_DIR}/cyclonedx-gomod-${CYCLONEDX_GOMOD_VERSION}/cyclonedx-gomod"
	if [[ ! -x "$CYCLONEDX_GOMOD" ]]; then
		log "building cyclonedx-gomod ${CYCLONEDX_GOMOD_VERSION} (once; cached in ${CACHE_DIR})"
		GOBIN="${CACHE_DIR}/cyclonedx-gomod-${CYCLONEDX_GOMOD_VERSION}" \
			go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@${CYCLONEDX_GOMOD_VERSION}" >&2 ||
			die "go install cyclonedx-gomod@${CYCLONEDX_GOMOD_VERSION} failed"
	fi
}

# normalize FILE [SRC]: a serial number derived from the document (without
# it), SOURCE_DATE_EPOCH as its timestamp, and the source directory SRC named
# /src, so the same inputs give the same bytes.
normalize() {
	python3 - "$1" "${SOURCE_DATE_EPOCH:-0}" "${2:-}" <<'EOF'
import hashlib, json, sys, time, uuid
path, epoch, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path) as f:
    text = f.read()
if src:
    text = text.replace("file://" + src, "file:///src")
bom = json.loads(text)
bom.pop("serialNumber", None)
meta = bom.setdefault("metadata", {})
meta["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
body = json.dumps(bom, sort_keys=True, separators=(",", ":")).encode()
bom["serialNumber"] = "urn:uuid:" + str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16], version=5))
with open(path, "w") as f:
    json.dump(bom, f, indent=2, sort_keys=True)
    f.write("\n")
EOF
}

main() {
	local helm=${HELM:-} work
	if [[ -z "$helm" ]]; then
		helm=$("${REPO_ROOT}/hack/local-cluster.sh" tools | sed -n 's/^TINYCODE_HELM=//p')
	fi
	[[ -x "$helm" ]] || die "no helm binary at ${helm}"
	ensure_generators
	mkdir -p "$OUT"

	# cargo-cyclonedx writes beside each Cargo.toml; a copy of the manifests
	# keeps the source tree clean.
	WORK=$(mktemp -d)
	work=$WORK
	trap 'rm -rf "$WORK"' EXIT
	cp "${REPO_ROOT}/Cargo.toml" "${REPO_ROOT}/Cargo.lock" "$work/"
	cp -R "${REPO_ROOT}/src" "$work/src"
	mkdir -p "$work/tools"
	cp "${REPO_ROOT}/tools/Cargo.toml" "$work/tools/"
	# tools/ is only loaded for the workspace; cargo metadata needs its targets to exist.
	mkdir -p "$work/tools/src" && : >"$work/tools/src/lib.rs"
	(cd "$work" && "$CARGO_CYCLONEDX" cyclonedx --quiet --format json \
		--target "$(rustc -vV | sed -n 's/^host: //p')" --describe binaries \
		--manifest-path "$work/Cargo.toml" >&2) || die "cargo-cyclonedx failed"
	local produced
	produced=$(find "$work" -maxdepth 1 -name 'tinycode-operator*.cdx.json' | head -n1)
	[[ -n "$produced" ]] || die "cargo-cyclonedx wrote no SBOM for tinycode-operator"
	cp "$produced" "$OUT/tinycode-operator.cdx.json"
	normalize "$OUT/tinycode-operator.cdx.json" "$work"

	"$CYCLONEDX_GOMOD" bin -json -output "$OUT/helm.cdx.json" "$helm" >&2 || die "cyclonedx-gomod failed on ${helm}"
	normalize "$OUT/helm.cdx.json"
	printf '%s\n' "$OUT/tinycode-operator.cdx.json" "$OUT/helm.cdx.json"
}

case "${1:-}" in
-h | --help) sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" ;;
"") main ;;
*) die "usage: $0 (no arguments; --help)" ;;
esac
