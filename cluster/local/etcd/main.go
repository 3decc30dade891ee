// Command etcd is etcd's own main function, built at the etcd version that
// k8s.io/kubernetes pins (go.etcd.io/etcd/server/v3 in ../go.mod).
//
// Why not Debian's etcd-server (3.4.23): kube-apiserver 1.34 serves watches
// without a resourceVersion (resourceVersion "" or "0", e.g. a plain
// `kubectl get -w` or an informer's first watch) as streaming watch-lists,
// and rejects them when etcd lacks progress notifications (< 3.4.31/3.5.13):
// "a watch stream was requested by the client but the required storage
// feature RequestWatchProgress is disabled".
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
