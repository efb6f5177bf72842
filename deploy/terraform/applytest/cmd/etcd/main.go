// Command etcd is etcd's server (go.etcd.io/etcd/server/v3/etcdmain, the release k8s.io/kubernetes
// requires) for the apply test's control plane; the same main as etcd's own binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
