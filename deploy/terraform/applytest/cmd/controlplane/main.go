// Command controlplane is the apply test's Kubernetes control plane in one multi-call binary:
// started through a link named etcd, kube-apiserver, kube-controller-manager or kube-scheduler
// (apply-test.sh makes the four), it is that program, with upstream's main. The four share most
// of their packages; one binary is linked once where four would be linked four times, the
// longest part of a build whose packages are cached.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // as upstream: time zone support

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as upstream: JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as upstream: client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // as upstream: version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	switch name := filepath.Base(os.Args[0]); name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "controlplane: start me through a link named etcd, kube-apiserver, kube-controller-manager or kube-scheduler, not %q\n", name)
		os.Exit(2)
	}
}
