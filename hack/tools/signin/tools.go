//go:build tools

// The oauth2-proxy command that hack/local-cluster.sh builds from this module
// (go build github.com/oauth2-proxy/oauth2-proxy/v7), recorded here so that
// go.mod and go.sum pin its dependencies.
package main

import _ "github.com/oauth2-proxy/oauth2-proxy/v7"
