// Command kube-controller-manager is k8s.io/kubernetes/cmd/kube-controller-manager built from the release this module pins, for
// the apply test (deploy/terraform/applytest/apply-test.sh); its main is upstream's.
package main

import (
	"os"
	_ "time/tzdata" // as upstream: time zone support

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as upstream: JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as upstream: client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // as upstream: version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
