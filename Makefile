# tinycode-operator: `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

IMAGE_REGISTRY ?= quay.io
IMAGE_ORG ?= bjohns
IMAGE_TAG ?= latest
OPERATOR_IMAGE ?= $(IMAGE_REGISTRY)/$(IMAGE_ORG)/tinycode-operator:$(IMAGE_TAG)
BUNDLE_IMAGE ?= $(IMAGE_REGISTRY)/$(IMAGE_ORG)/tinycode-operator-bundle:$(IMAGE_TAG)
CATALOG_IMAGE ?= $(IMAGE_REGISTRY)/$(IMAGE_ORG)/tinycode-operator-catalog:$(IMAGE_TAG)
CONTAINER_TOOL ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
NAMESPACE ?= tinycode-dev
SAMPLE ?= config/samples/tinycode_v1alpha1_basic.yaml

define need_engine
	@if [[ -z "$(CONTAINER_TOOL)" ]] || ! $(CONTAINER_TOOL) info >/dev/null 2>&1; then \
		echo "error: $@ needs a working container engine (podman or docker; set CONTAINER_TOOL); none answers on this machine" >&2; exit 1; fi
endef

.PHONY: help
help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build (once, cached outside the repo) etcd, kube-apiserver, kubectl and helm 3
	hack/local-cluster.sh tools >/dev/null

.PHONY: build
build: ## Build the operator binaries
	cargo build --release --bins

.PHONY: generate
generate: ## Regenerate the CRD, RBAC, SCCs and values schema from the code
	cargo build --quiet --bin tinycode-operator
	target/debug/tinycode-operator crd > config/crd/tinycode.dev_tinycodeinstances.yaml
	target/debug/tinycode-operator rbac > config/rbac/role.yaml
	target/debug/tinycode-operator scc > config/scc/sccs.yaml
	target/debug/tinycode-operator values-schema > helm-charts/tinycode/values.schema.json

.PHONY: lint
lint: tools ## cargo fmt --check, clippy -D warnings, helm lint --strict
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	eval "$$(hack/local-cluster.sh tools)"; for f in helm-charts/tinycode/ci/*.yaml; do "$$TINYCODE_HELM" lint --strict helm-charts/tinycode -f "$$f" >/dev/null; done

.PHONY: test
test: lint ## Lint, then unit, chart and end-to-end tests (starts the local control plane)
	eval "$$(hack/local-cluster.sh tools)"; TINYCODE_HELM="$$TINYCODE_HELM" cargo test --all-targets

.PHONY: run-local
run-local: ## Local control plane + operator in the foreground + the basic sample; prints its URL and status
	hack/run-local.sh

.PHONY: stop-local
stop-local: ## Stop the local control plane
	hack/local-cluster.sh stop

.PHONY: docker-build
docker-build: ## Build the operator image
	$(need_engine)
	$(CONTAINER_TOOL) build -t $(OPERATOR_IMAGE) .

.PHONY: push
push: docker-build ## Build and push the operator image
	$(CONTAINER_TOOL) push $(OPERATOR_IMAGE)
