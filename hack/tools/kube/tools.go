//go:build tools

// Package tools records the Kubernetes commands that hack/local-cluster.sh
// builds from this module, so that go.mod and go.sum pin their dependencies:
// the control plane (kube-apiserver, kubectl) and, for the local node
// (hack/lib/node.sh), kube-scheduler, kube-controller-manager, kube-proxy and
// the kubelet.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
