// Command coredns is CoreDNS with only the plugins the local node's cluster
// DNS needs (hack/lib/node.sh): the full build links every cloud provider's
// SDK and takes minutes longer on two cores. No forward plugin: names the
// cluster does not know get no answer from elsewhere (nothing routes out of
// the node's network namespace).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order in which the plugins see a query (CoreDNS's plugin.cfg order).
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"cache",
	"loadbalance",
	"hosts",
	"kubernetes",
}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
