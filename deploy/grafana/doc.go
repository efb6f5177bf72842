// Package grafana holds the Grafana dashboards of the deploy (fleet.json,
// billing.json: plain dashboard JSON, provisioned as files or as ConfigMaps
// by deploy/terraform) and reads the PromQL they and the alert rules in
// deploy/prometheus carry, so that tests can check both against what the
// daemons export.
//
// It owns no metric: the daemons' packages (limitmetrics, region, gossip,
// ledger, ledger/reconcile) define them. It does no I/O beyond reading the
// files it is given, and starts no goroutines.
package grafana
