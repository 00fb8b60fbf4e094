# syntax=docker/dockerfile:1
# The tinycode-operator image for machines with a container engine:
# `make docker-build IMAGE=...` (podman or docker). It describes the image
# `make image` builds without one (hack/image.sh): the same root filesystem,
# assembled by the same `hack/image.sh rootfs`, and the same configuration;
# tools/tests/image.rs compares this file's last stage with the built image.
#
#   build   the operator, a glibc release binary (Debian 12, like the runtime)
#   helm    helm 3 built from the Go module proxy, the version the tests use
#   rootfs  the binaries, the glibc libraries they load, Debian's CA bundle,
#           the chart (with files/), passwd/group, /tmp
#   final   scratch + that tree, UID 1001, read-only root (writes only to /tmp)
#
# Architectures: amd64 arm64
# (hack/image.sh looks the loader and library paths up per architecture; the
# CSV's operatorframework.io/arch.* labels name exactly these.)

ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm
ARG DEBIAN_IMAGE=docker.io/library/debian:bookworm

FROM ${RUST_IMAGE} AS build
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

FROM ${GO_IMAGE} AS helm
# hack/local-cluster.sh builds the same version the same way for the tests;
# go.sum's checksum database verifies every module.
ARG HELM_VERSION=v3.22.0
RUN GOBIN=/out go install \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
    helm.sh/helm/v3/cmd/helm@${HELM_VERSION} \
    && /out/helm version --short

FROM ${DEBIAN_IMAGE} AS rootfs
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml LICENSE ./
COPY hack/image.sh ./hack/image.sh
COPY helm-charts/tinycode ./helm-charts/tinycode
COPY --from=build /tinycode-operator /in/tinycode-operator
COPY --from=helm /out/helm /in/helm
RUN hack/image.sh rootfs /rootfs / /in/tinycode-operator /in/helm

FROM scratch
COPY --from=rootfs /rootfs/ /
LABEL name="tinycode-operator" \
      summary="Installs and manages tinycode AI coding agent instances on OpenShift and Kubernetes" \
      io.k8s.display-name="tinycode-operator" \
      io.openshift.tags="tinycode,operator,ai" \
      org.opencontainers.image.title="tinycode-operator" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="0.1.0" \
      version="0.1.0"
# Read-only root filesystem: everything writable lives below /tmp (an emptyDir
# in the Deployment); helm's cache, config and data homes included.
ENV PATH=/usr/local/bin \
    HELM_CHART_PATH=/helm-charts/tinycode \
    HELM_BIN=/usr/local/bin/helm \
    TMPDIR=/tmp \
    HOME=/tmp \
    HELM_CACHE_HOME=/tmp/.cache/helm \
    HELM_CONFIG_HOME=/tmp/.config/helm \
    HELM_DATA_HOME=/tmp/.local/share/helm
USER 1001
WORKDIR /tmp
EXPOSE 8081 8383 8484
ENTRYPOINT ["/usr/local/bin/tinycode-operator"]
CMD ["run"]
