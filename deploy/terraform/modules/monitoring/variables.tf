variable "spec" {
  description = <<-EOT
    Monitoring objects of one region (deploy/README.md "Monitoring"), all through this region's
    provider. Every object needs the Prometheus Operator's CRDs (PodMonitor, PrometheusRule) in
    the cluster, except the dashboard ConfigMaps.
      region           the region name (object names carry it)
      namespace        where the objects go (must exist)
      pod_namespace    the region's namespace, where its quota pods run
      labels           labels of every object (e.g. release = <kube-prometheus-stack release>,
                       for the operator's podMonitorSelector / ruleSelector)
      pod_monitors     which PodMonitors: limiter (every region), control_plane (the control
                       region), reconciler (the ledger region)
      prometheus_rule  the PrometheusRule of deploy/prometheus/quota-rules.yaml (once: the
                       ledger region's module only)
      dashboards       the ConfigMaps of deploy/grafana/*.json (once: the ledger region's
                       module only), labelled dashboard_label = "1"
  EOT
  type = object({
    region        = string
    namespace     = string
    pod_namespace = string
    labels        = optional(map(string), {})
    pod_monitors = object({
      limiter       = bool
      control_plane = bool
      reconciler    = bool
    })
    prometheus_rule = bool
    dashboards      = bool
    dashboard_label = string
  })
}
