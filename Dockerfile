# syntax=docker/dockerfile:1
# The tinycode-operator image: `make docker-build` (podman or docker).
#
#   build   static (musl) operator binary; runs on any base image
#   helm    helm 3, pinned by version AND sha256; the build fails on a mismatch
#   runtime UBI9 minimal + the binary + helm + the chart (with files/), UID 1001,
#           works with a read-only root filesystem (writes only below /tmp)

ARG RUST_IMAGE=docker.io/library/rust:1-alpine
ARG HELPER_IMAGE=docker.io/library/alpine:3
ARG RUNTIME_IMAGE=registry.access.redhat.com/ubi9/ubi-minimal:latest

FROM ${RUST_IMAGE} AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# The workspace's other member (tools/: dev tooling, never built here) needs
# only its manifest for cargo to load the workspace.
COPY tools/Cargo.toml ./tools/Cargo.toml
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p tinycode-operator --bin tinycode-operator \
    && install -m 0755 target/release/tinycode-operator /tinycode-operator \
    && /tinycode-operator version

FROM ${HELPER_IMAGE} AS helm
# Set by BuildKit/buildah for the platform being built; amd64 otherwise.
ARG TARGETARCH=amd64
ARG HELM_VERSION=v3.22.0
# sha256 of https://get.helm.sh/helm-${HELM_VERSION}-linux-<arch>.tar.gz, as
# published in the matching .sha256sum files. `make docker-build` verifies the
# download against them (sha256sum -c) and the build stops on a mismatch.
# A new HELM_VERSION needs its checksums too: pass HELM_SHA256=<sha256 of the
# tarball for TARGETARCH>; the build refuses to run without one.
ARG HELM_SHA256_AMD64=1e4ab49e429626cf6c6958d914248b78c9730803c2751b87627e171dc800e7bb
ARG HELM_SHA256_ARM64=f14e804dfee240f55525b667488fe9adca349e63e00c9af634c0beb1421ac310
ARG HELM_SHA256=
RUN set -eu; \
    if [ "$HELM_VERSION" != v3.22.0 ] && [ -z "$HELM_SHA256" ]; then \
        echo "HELM_VERSION=$HELM_VERSION: pass --build-arg HELM_SHA256=<its published sha256 for linux-$TARGETARCH>" >&2; exit 1; \
    fi; \
    case "$TARGETARCH" in \
        amd64) sum=${HELM_SHA256:-$HELM_SHA256_AMD64} ;; \
        arm64) sum=${HELM_SHA256:-$HELM_SHA256_ARM64} ;; \
        *) sum=$HELM_SHA256 ;; \
    esac; \
    if [ -z "$sum" ]; then \
        echo "no helm sha256 for linux-$TARGETARCH: pass --build-arg HELM_SHA256=<published sha256>" >&2; exit 1; \
    fi; \
    tarball="helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz"; \
    wget -q -O "/tmp/$tarball" "https://get.helm.sh/$tarball"; \
    echo "$sum  /tmp/$tarball" | sha256sum -c -; \
    tar -xzf "/tmp/$tarball" -C /tmp "linux-${TARGETARCH}/helm"; \
    install -m 0755 "/tmp/linux-${TARGETARCH}/helm" /helm; \
    /helm version --short

FROM ${RUNTIME_IMAGE}
LABEL name="tinycode-operator" \
      summary="Installs and manages tinycode AI coding assistant instances on OpenShift" \
      description="Reconciles TinycodeInstance resources into Helm releases of the bundled tinycode chart, Routes and SCC grants." \
      io.k8s.display-name="tinycode-operator" \
      io.openshift.tags="tinycode,operator,ai" \
      org.opencontainers.image.source="https://github.com/bobbyjohnstx/tinycode-operator" \
      org.opencontainers.image.licenses="MIT"
COPY --from=helm /helm /usr/local/bin/helm
COPY --from=build /tinycode-operator /usr/local/bin/tinycode-operator
# The chart with its files/ (git-clone.sh, ollama-entrypoint.sh); the chart's
# CI values stay out.
COPY helm-charts/tinycode /helm-charts/tinycode
RUN rm -rf /helm-charts/tinycode/ci && chmod -R a+rX /helm-charts
# Read-only root filesystem: everything writable lives below /tmp (an emptyDir
# in the Deployment); helm's cache, config and data homes included.
ENV HELM_CHART_PATH=/helm-charts/tinycode \
    HELM_BIN=/usr/local/bin/helm \
    TMPDIR=/tmp \
    HOME=/tmp \
    HELM_CACHE_HOME=/tmp/.cache/helm \
    HELM_CONFIG_HOME=/tmp/.config/helm \
    HELM_DATA_HOME=/tmp/.local/share/helm
USER 1001
EXPOSE 8081 8383
ENTRYPOINT ["/usr/local/bin/tinycode-operator"]
CMD ["run"]
