# Optional monitoring objects (var.monitoring, deploy/README.md "Monitoring"): one module block per
# slot, bound to that slot's provider like module.region_<n>, so every object is created (and
# destroyed) in its own region's cluster. PodMonitors go to every active region; the
# PrometheusRule and the dashboards only to the ledger region's instance, so that each alert
# fires once and Grafana loads each board once (tests/monitoring.tftest.hcl).
locals {
  monitoring_any_pods = var.monitoring.pod_monitors
  monitoring_once     = var.monitoring.prometheus_rule || var.monitoring.dashboards

  monitoring_specs = {
    for name, r in local.active : name => {
      region        = name
      namespace     = coalesce(var.monitoring.namespace, local.region_out[name].namespace)
      pod_namespace = local.region_out[name].namespace
      labels        = merge(var.labels, var.monitoring.labels)
      pod_monitors = {
        limiter       = var.monitoring.pod_monitors
        control_plane = var.monitoring.pod_monitors && name == local.control_region
        reconciler    = var.monitoring.pod_monitors && name == var.ledger_region
      }
      prometheus_rule = var.monitoring.prometheus_rule && name == var.ledger_region
      dashboards      = var.monitoring.dashboards && name == var.ledger_region
      dashboard_label = var.monitoring.dashboard_label
    }
  }

  # Slots with a monitoring instance: every active region with PodMonitors, else the ledger
  # region's slot when the rule or the dashboards are on. Known at plan time (count).
  monitoring_slots = toset([
    for slot, name in local.slot_region : slot
    if local.monitoring_any_pods || (local.monitoring_once && name == var.ledger_region)
  ])

  monitoring_out = merge(
    { for m in module.monitoring_0 : m.region => m },
    { for m in module.monitoring_1 : m.region => m },
    { for m in module.monitoring_2 : m.region => m },
    { for m in module.monitoring_3 : m.region => m },
    { for m in module.monitoring_4 : m.region => m },
  )
}

module "monitoring_0" {
  source    = "./modules/monitoring"
  count     = contains(local.monitoring_slots, "0") ? 1 : 0
  providers = { kubernetes = kubernetes.slot0 }

  spec = local.monitoring_specs[local.slot_region["0"]]
}

module "monitoring_1" {
  source    = "./modules/monitoring"
  count     = contains(local.monitoring_slots, "1") ? 1 : 0
  providers = { kubernetes = kubernetes.slot1 }

  spec = local.monitoring_specs[local.slot_region["1"]]
}

module "monitoring_2" {
  source    = "./modules/monitoring"
  count     = contains(local.monitoring_slots, "2") ? 1 : 0
  providers = { kubernetes = kubernetes.slot2 }

  spec = local.monitoring_specs[local.slot_region["2"]]
}

module "monitoring_3" {
  source    = "./modules/monitoring"
  count     = contains(local.monitoring_slots, "3") ? 1 : 0
  providers = { kubernetes = kubernetes.slot3 }

  spec = local.monitoring_specs[local.slot_region["3"]]
}

module "monitoring_4" {
  source    = "./modules/monitoring"
  count     = contains(local.monitoring_slots, "4") ? 1 : 0
  providers = { kubernetes = kubernetes.slot4 }

  spec = local.monitoring_specs[local.slot_region["4"]]
}
