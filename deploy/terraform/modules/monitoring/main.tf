# Monitoring objects of one region, created only when var.monitoring turns them on (root module).
# PodMonitors and the PrometheusRule are kubernetes_manifest objects: planning them needs the
# cluster's API and the Prometheus Operator's CRDs. The rule and dashboard files are the repo's
# (deploy/prometheus, deploy/grafana), read relative to this module: keep deploy/ together.
locals {
  deploy_dir = "${path.module}/../../.."
  labels = merge(var.spec.labels, {
    "app.kubernetes.io/part-of"    = "quota"
    "app.kubernetes.io/managed-by" = "terraform"
    "quota.dev/region"             = var.spec.region
  })

  # The pods each PodMonitor selects (the selectors of modules/region and modules/ledger; every
  # quota pod carries quota.dev/region), and the port named http on each (8080, reconciler 8081).
  pod_monitors = {
    for kind, app in {
      limiter       = "regional-limiter"
      control_plane = "control-plane"
      reconciler    = "reconciler"
    } : replace(kind, "_", "-") => app if var.spec.pod_monitors[kind]
  }

  # source_region: the region of the process that exported a series (deploy/README.md
  # "Monitoring"); the rules and dashboards group by it.
  relabelings = [{
    action       = "replace"
    sourceLabels = ["__meta_kubernetes_pod_label_quota_dev_region"]
    targetLabel  = "source_region"
  }]

  dashboards = { fleet = "fleet.json", billing = "billing.json" }
}

resource "kubernetes_manifest" "pod_monitor" {
  for_each = local.pod_monitors

  manifest = {
    apiVersion = "monitoring.coreos.com/v1"
    kind       = "PodMonitor"
    metadata = {
      name      = "quota-${each.key}-${var.spec.region}"
      namespace = var.spec.namespace
      labels    = local.labels
    }
    spec = {
      namespaceSelector = { matchNames = [var.spec.pod_namespace] }
      selector = {
        matchLabels = { "app.kubernetes.io/name" = each.value, "quota.dev/region" = var.spec.region }
      }
      podMetricsEndpoints = [{
        port        = "http"
        path        = "/metrics"
        relabelings = local.relabelings
      }]
    }
  }
}

resource "kubernetes_manifest" "prometheus_rule" {
  count = var.spec.prometheus_rule ? 1 : 0

  manifest = {
    apiVersion = "monitoring.coreos.com/v1"
    kind       = "PrometheusRule"
    metadata = {
      name      = "quota"
      namespace = var.spec.namespace
      labels    = local.labels
    }
    spec = {
      groups = yamldecode(file("${local.deploy_dir}/prometheus/quota-rules.yaml")).groups
    }
  }
}

resource "kubernetes_config_map_v1" "dashboard" {
  for_each = var.spec.dashboards ? local.dashboards : {}

  metadata {
    name      = "quota-dashboard-${each.key}"
    namespace = var.spec.namespace
    labels    = merge(local.labels, { (var.spec.dashboard_label) = "1" })
  }

  data = {
    (each.value) = file("${local.deploy_dir}/grafana/${each.value}")
  }
}
