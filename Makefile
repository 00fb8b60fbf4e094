# tinycode-operator: `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The operator's version (Cargo.toml) tags its image, bundle and catalog.
VERSION := $(shell awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version *=/ { print $$2; exit }' Cargo.toml)
# The operator image a cluster runs: `make push`, `make install` and `make bundle`
# share it. No default: the install refuses to guess a registry (set e.g.
# IMAGE=registry.example.com/platform/tinycode-operator:$(VERSION)).
IMAGE ?= $(OPERATOR_IMAGE)
IMAGE_REPO = $(shell printf '%s' '$(IMAGE)' | sed -E 's/(@sha256:[0-9a-f]+|:[^:/]+)$$//')
BUNDLE_IMAGE ?= $(IMAGE_REPO)-bundle:$(VERSION)
CATALOG_IMAGE ?= $(IMAGE_REPO)-catalog:$(VERSION)
CONTAINER_TOOL ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
NAMESPACE ?= tinycode-dev
# The one namespace `make install` makes the operator watch; empty: all.
WATCH_NAMESPACES ?=
PLATFORM ?= openshift
SAMPLE ?= config/samples/tinycode_v1alpha1_basic.yaml
BUNDLE_DIR ?= bundle
CATALOG_DIR ?= target/catalog
OPM_IMAGE ?= quay.io/operator-framework/opm:v1.60.0

define need_image
	@if [[ -z "$(IMAGE)" ]]; then \
		echo "error: $@ needs IMAGE=<registry>/<org>/tinycode-operator:$(VERSION), the operator image (make image, then make push IMAGE=...)" >&2; exit 1; fi
endef

define need_engine
	@if [[ -z "$(CONTAINER_TOOL)" ]] || ! $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		echo "error: $@ needs a working container engine (podman or docker; set CONTAINER_TOOL); none answers on this machine" >&2; exit 1; fi
endef

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build (once, cached outside the repo) etcd, kube-apiserver, kubectl, helm 3, oauth2-proxy and mockoidc-server
	hack/local-cluster.sh tools >/dev/null

.PHONY: build
build: ## Build the operator and the dev tooling (tinycode-local) binaries
	cargo build --release --workspace --bins

.PHONY: generate
generate: ## Regenerate the CRD, RBAC, SCCs, values schema, bundle/ and the chart's lint inputs from the code
	cargo build --quiet --workspace --bins
	target/debug/tinycode-operator crd > config/crd/tinycode.dev_tinycodeinstances.yaml
	target/debug/tinycode-operator crd --class > config/crd/tinycode.dev_tinycodeclasses.yaml
	target/debug/tinycode-operator rbac > config/rbac/role.yaml
	target/debug/tinycode-operator scc > config/scc/sccs.yaml
	target/debug/tinycode-operator admission > config/admission/host_paths.yaml
	target/debug/tinycode-operator values-schema > helm-charts/tinycode/values.schema.json
	target/debug/tinycode-operator rbac --leader-election-namespace tinycode-operator-system > config/rbac/leader_election_role.yaml
	target/debug/tinycode-operator rbac --discovery > config/rbac/discovery_role.yaml
	target/debug/tinycode-local bundle --out bundle 2>/dev/null
	target/debug/tinycode-local chart-ci-values --out helm-charts/tinycode/ci

.PHONY: lint
lint: tools ## cargo fmt --check, the layer check, clippy -D warnings, helm lint --strict, shellcheck
	cargo fmt --all -- --check
	python3 hack/layers.py
	cargo clippy --workspace --all-targets -- -D warnings
	eval "$$(hack/local-cluster.sh tools)"; for f in helm-charts/tinycode/ci/*.yaml; do "$$TINYCODE_HELM" lint --strict helm-charts/tinycode -f "$$f" >/dev/null; done
	eval "$$(hack/local-cluster.sh tools)"; "$$TINYCODE_SHELLCHECK" hack/*.sh hack/lib/*.sh hack/tools/*/*.sh .ci/run && \
		"$$TINYCODE_SHELLCHECK" --shell=sh helm-charts/tinycode/files/*.sh

.PHONY: test
test: lint image sbom ## Lint, build the image and its SBOMs, then unit, chart, image and end-to-end tests (starts the local control plane)
	@# Every package of the lock file, other platforms' too: tests/rust_version.rs
	@# reads the whole resolve offline, and a build fetches only this platform's.
	cargo fetch --locked
	eval "$$(hack/local-cluster.sh tools)"; TINYCODE_HELM="$$TINYCODE_HELM" cargo test --workspace --all-targets

.PHONY: run-local
run-local: ## Local control plane + operator in the foreground + the basic sample; prints its URL and status (PLATFORM=kubernetes: no OpenShift APIs)
	PLATFORM="$(PLATFORM)" hack/run-local.sh

.PHONY: stop-local
stop-local: ## Stop the local control plane
	hack/local-cluster.sh stop
	hack/local-cluster.sh stop --node

.PHONY: image
image: ## Build the operator image without a daemon: target/image/tinycode-operator-$(VERSION).oci.tar (buildah, mmdebstrap)
	hack/image.sh tools
	cargo build --release --locked -p tinycode-operator --bin tinycode-operator
	hack/image.sh build

.PHONY: push
push: ## Copy the image archive to $(IMAGE) with skopeo (run make image first; log in with skopeo login)
	$(need_image)
	hack/image.sh push "$(IMAGE)"

.PHONY: sbom
sbom: ## CycloneDX SBOMs of the operator binary and helm into target/image/sbom/ (make image ships them)
	hack/sbom.sh

.PHONY: docker-build
docker-build: ## Build the operator image $(IMAGE) with podman or docker (the Dockerfile describes the make image image)
	$(need_image)
	$(need_engine)
	$(CONTAINER_TOOL) build -t $(IMAGE) .

# With KUBECONFIG pointing at hack/local-cluster.sh's control plane and no
# KUBECTL given, use the control plane's own kubectl and helm.
define local_tools
	if [[ -z "$${KUBECTL:-}" && -n "$${KUBECONFIG:-}" && "$${KUBECONFIG}" == "$$(hack/local-cluster.sh kubeconfig 2>/dev/null)" ]]; then \
		eval "$$(hack/local-cluster.sh tools)"; export KUBECTL="$$TINYCODE_KUBECTL" HELM="$$TINYCODE_HELM"; fi;
endef

.PHONY: install
install: ## Install the operator on $KUBECONFIG's cluster (cluster-admin; INSTALL_WAIT=false: no rollout wait; WATCH_NAMESPACES=ns: watch only ns)
	$(local_tools) OPERATOR_IMAGE="$(IMAGE)" WATCH_NAMESPACES="$(WATCH_NAMESPACES)" hack/install.sh

.PHONY: uninstall
uninstall: ## Remove the operator; keeps the CRD and instances unless DELETE_CRD=true
	$(local_tools) hack/uninstall.sh

.PHONY: prepare-namespace
prepare-namespace: ## Prepare $(NAMESPACE) for instances (operator admin RoleBinding, generated password Secret)
	$(local_tools) hack/prepare-namespace.sh "$(NAMESPACE)" --generate-password

.PHONY: deploy-sample
deploy-sample: ## Apply $(SAMPLE) to $(NAMESPACE) (prepare it first: make prepare-namespace)
	$(local_tools) k="$${KUBECTL:-$$(command -v oc || command -v kubectl)}"; \
		[[ -n "$$k" ]] || { echo "error: neither oc nor kubectl is in PATH (or set KUBECTL)" >&2; exit 1; }; \
		"$$k" apply -n "$(NAMESPACE)" -f "$(SAMPLE)"

.PHONY: bundle
bundle: ## Regenerate bundle/ from the code (tinycode-local bundle); IMAGE=... BUNDLE_DIR=target/bundle: a bundle naming your pushed image
	cargo build --quiet -p tinycode-tools --bin tinycode-local
	target/debug/tinycode-local bundle --out $(BUNDLE_DIR) $(if $(IMAGE),--image "$(IMAGE)")

.PHONY: bundle-validate
bundle-validate: ## Validate bundle/ with operator-framework's validators (built once from the Go module proxy)
	hack/olm-validate.sh -suite operatorhub $(BUNDLE_DIR)

.PHONY: bundle-build
bundle-build: ## Build the bundle image $(BUNDLE_IMAGE)
	$(need_image)
	$(need_engine)
	$(CONTAINER_TOOL) build -f $(BUNDLE_DIR)/bundle.Dockerfile -t $(BUNDLE_IMAGE) $(BUNDLE_DIR)

.PHONY: bundle-push
bundle-push: bundle-build ## Build and push the bundle image
	$(CONTAINER_TOOL) push $(BUNDLE_IMAGE)

.PHONY: catalog-build
catalog-build: ## Build a file-based catalog image $(CATALOG_IMAGE) with the pushed $(BUNDLE_IMAGE) (opm runs in $(OPM_IMAGE))
	$(need_image)
	$(need_engine)
	rm -rf $(CATALOG_DIR) && mkdir -p $(CATALOG_DIR)/configs/tinycode-operator
	v=$$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n1); \
	ch=$$(sed -nE 's/^ *operators.operatorframework.io.bundle.channel.default.v1: *//p' $(BUNDLE_DIR)/metadata/annotations.yaml); \
	{ printf -- '---\nschema: olm.package\nname: tinycode-operator\ndefaultChannel: %s\n' "$$ch"; \
	  printf -- '---\nschema: olm.channel\npackage: tinycode-operator\nname: %s\nentries:\n  - name: tinycode-operator.v%s\n' "$$ch" "$$v"; \
	  $(CONTAINER_TOOL) run --rm $(OPM_IMAGE) render $(BUNDLE_IMAGE) --output=yaml; \
	} > $(CATALOG_DIR)/configs/tinycode-operator/index.yaml
	$(CONTAINER_TOOL) run --rm -v "$(abspath $(CATALOG_DIR))/configs:/configs:Z" $(OPM_IMAGE) validate /configs
	$(CONTAINER_TOOL) build -f hack/catalog.Dockerfile --build-arg OPM_IMAGE=$(OPM_IMAGE) -t $(CATALOG_IMAGE) $(CATALOG_DIR)

.PHONY: catalog-push
catalog-push: catalog-build ## Build and push the catalog image
	$(CONTAINER_TOOL) push $(CATALOG_IMAGE)

.PHONY: shellcheck
shellcheck: ## shellcheck the hack/ scripts
	shellcheck -x hack/*.sh hack/lib/*.sh .ci/run

.PHONY: bench-model-keys
bench-model-keys: ## What the model-key proxy adds to a model request and the memory it holds (docs/benchmarks.md)
	cargo build --release --bin tinycode-operator
	cargo run --release --example model_keys_bench -- target/release/tinycode-operator

.PHONY: bench-egress
bench-egress: ## What the egress proxy adds to a request and the memory it holds (docs/benchmarks.md)
	cargo build --release --bin tinycode-operator
	cargo run --release --example egress_bench -- target/release/tinycode-operator

.PHONY: bench-front
bench-front: ## What the sign-in front's hop adds to each request of a sign-in instance (docs/benchmarks.md)
	cargo build --release --bin tinycode-operator
	cargo run --release --example front_bench -- target/release/tinycode-operator
