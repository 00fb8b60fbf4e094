// Command etcd is the etcd server, built from the pinned
// go.etcd.io/etcd/server/v3 module so that the local test control plane does
// not depend on a downloaded release archive.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
