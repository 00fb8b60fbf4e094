//go:build tools

// Package tools records the Kubernetes commands that hack/local-cluster.sh
// builds from this module, so that go.mod and go.sum pin their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
