# Optional monitoring objects (var.monitoring, monitoring.tf, modules/monitoring; deploy/README.md
# "Monitoring"), planned and applied against mocked providers. Three regions: eu (slot 0), us
# (slot 1, the ledger region), ap (slot 2, the control region). Each slot's mock gives the objects
# it creates an id (ConfigMaps) or metadata.uid (kubernetes_manifest) naming the slot, so the
# tests see through which provider each object was created.

mock_provider "kubernetes" {
  alias = "slot0"
  mock_resource "kubernetes_config_map_v1" {
    defaults = { id = "slot0" }
  }
  mock_resource "kubernetes_manifest" {
    defaults = { object = { metadata = { uid = "slot0" } } }
  }
}
mock_provider "kubernetes" {
  alias = "slot1"
  mock_resource "kubernetes_config_map_v1" {
    defaults = { id = "slot1" }
  }
  mock_resource "kubernetes_manifest" {
    defaults = { object = { metadata = { uid = "slot1" } } }
  }
}
mock_provider "kubernetes" {
  alias = "slot2"
  mock_resource "kubernetes_config_map_v1" {
    defaults = { id = "slot2" }
  }
  mock_resource "kubernetes_manifest" {
    defaults = { object = { metadata = { uid = "slot2" } } }
  }
}
mock_provider "kubernetes" {
  alias = "slot3"
}
mock_provider "kubernetes" {
  alias = "slot4"
}

variables {
  images = {
    quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    nats  = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  }
  admin_token = "TEST-ADMIN-TOKEN-0123456789"
  # One key per region (base64 of 32, 16 and 24 bytes: every accepted length).
  memberlist_keys = {
    eu = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    us = ["VEVTVC1NRU1CRVJLRVlVUw=="]
    ap = ["VEVTVC1NRU1CRVJMSVNULUtFWS1BUC0w"]
  }
  nats_tls_secret   = "nats-tls"
  postgres_password = "TEST-PG-PASSWORD"
  redis_passwords   = { eu = "TEST-REDIS-EU", us = "TEST-REDIS-US", ap = "TEST-REDIS-AP" }
  nats_passwords = {
    "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
    "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
    "limiter-ap"    = "TEST-NATS-LIMITER-AP-0001"
    "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
    "reconciler"    = "TEST-NATS-RECONCILER-0001"
    "gateway"       = "TEST-NATS-GATEWAY-000001"
  }
  gateway_source_ranges = ["198.51.100.0/24", "203.0.113.0/24"]
  check_tokens          = { eu = ["TEST-CHECK-TOKEN-EU-01"], us = ["TEST-CHECK-TOKEN-US-01"], ap = ["TEST-CHECK-TOKEN-AP-01"] }
  prometheus_namespace  = "monitoring"
  ledger_region         = "us"
  control_region        = "ap"
  ledger = {
    postgres = { host = "ledger.abc.us-east-1.rds.amazonaws.com", cidrs = ["10.30.0.0/16"], ca_secret = "rds-ca" }
  }
  regions = {
    eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" }, redis = { endpoint = "eu.cache.example.com:6379", cidrs = ["10.20.0.0/16"] } }
    us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" }, redis = { endpoint = "us.cache.example.com:6379", cidrs = ["10.20.0.0/16"] } }
    ap = { slot = 2, weight = 0.2, gateway_url = "nats://gw.ap.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-ap" }, redis = { endpoint = "ap.cache.example.com:6379", cidrs = ["10.20.0.0/16"] } }
  }
}

run "off_by_default" {
  command = plan

  assert {
    condition = (
      length(module.monitoring_0) + length(module.monitoring_1) + length(module.monitoring_2) +
      length(module.monitoring_3) + length(module.monitoring_4) == 0
    )
    error_message = "with var.monitoring unset no monitoring module instance (PodMonitor, PrometheusRule, dashboard ConfigMap) may be planned"
  }
  assert {
    condition     = output.monitoring == {}
    error_message = "with var.monitoring unset output.monitoring must be empty, got ${jsonencode(output.monitoring)}"
  }
}

run "all_on" {
  command = apply

  variables {
    monitoring = { pod_monitors = true, prometheus_rule = true, dashboards = true }
  }

  assert {
    condition = (
      length(module.monitoring_0) == 1 && length(module.monitoring_1) == 1 && length(module.monitoring_2) == 1 &&
      length(module.monitoring_3) == 0 && length(module.monitoring_4) == 0
    )
    error_message = "pod_monitors: one monitoring instance per active region's slot (0, 1, 2), none for the unused slots"
  }

  # PodMonitors: the limiters everywhere, the control plane in ap, the reconciler in us.
  assert {
    condition = (
      keys(module.monitoring_0[0].pod_monitor_specs) == ["quota-limiter-eu"] &&
      keys(module.monitoring_1[0].pod_monitor_specs) == ["quota-limiter-us", "quota-reconciler-us"] &&
      keys(module.monitoring_2[0].pod_monitor_specs) == ["quota-control-plane-ap", "quota-limiter-ap"]
    )
    error_message = "PodMonitors: limiter per region, control plane in the control region (ap), reconciler in the ledger region (us); got ${jsonencode([keys(module.monitoring_0[0].pod_monitor_specs), keys(module.monitoring_1[0].pod_monitor_specs), keys(module.monitoring_2[0].pod_monitor_specs)])}"
  }
  # Each selects its pods by the labels of their StatefulSet/Deployment selector (which every pod
  # of it carries), in the region's namespace.
  assert {
    condition = (
      jsonencode(module.monitoring_0[0].pod_monitor_specs["quota-limiter-eu"].selector.matchLabels) == jsonencode({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" }) &&
      jsonencode(module.monitoring_2[0].pod_monitor_specs["quota-control-plane-ap"].selector.matchLabels) == jsonencode({ "app.kubernetes.io/name" = "control-plane", "quota.dev/region" = "ap" }) &&
      jsonencode(module.monitoring_1[0].pod_monitor_specs["quota-reconciler-us"].selector.matchLabels) == jsonencode({ "app.kubernetes.io/name" = "reconciler", "quota.dev/region" = "us" }) &&
      jsonencode(module.monitoring_0[0].pod_monitor_specs["quota-limiter-eu"].namespaceSelector.matchNames) == jsonencode(["quota-eu"]) &&
      jsonencode(module.monitoring_1[0].pod_monitor_specs["quota-reconciler-us"].namespaceSelector.matchNames) == jsonencode(["quota-us"])
    )
    error_message = "PodMonitor selectors must be the pods' selector labels (app.kubernetes.io/name, quota.dev/region) in quota-<region>"
  }
  # Every PodMonitor scrapes /metrics on the port named http and sets source_region from the pod
  # label quota.dev/region.
  assert {
    condition = alltrue(flatten([
      for m in [module.monitoring_0[0], module.monitoring_1[0], module.monitoring_2[0]] : [
        for name, spec in m.pod_monitor_specs : length(spec.podMetricsEndpoints) == 1 && alltrue([
          for e in spec.podMetricsEndpoints : e.port == "http" && e.path == "/metrics" && anytrue([
            for r in e.relabelings : jsonencode(r.sourceLabels) == jsonencode(["__meta_kubernetes_pod_label_quota_dev_region"]) && r.targetLabel == "source_region" && r.action == "replace"
          ])
        ])
      ]
    ]))
    error_message = "every PodMonitor must scrape /metrics on port http and relabel __meta_kubernetes_pod_label_quota_dev_region to source_region"
  }

  # One PrometheusRule, in the ledger region (us, slot 1), with the repo's rule groups.
  assert {
    condition     = module.monitoring_0[0].prometheus_rule == null && module.monitoring_1[0].prometheus_rule == "quota" && module.monitoring_2[0].prometheus_rule == null
    error_message = "the PrometheusRule must exist once, in the ledger region (us), not per region"
  }
  assert {
    condition = (
      length(flatten([for g in yamldecode(file("../prometheus/quota-rules.yaml")).groups : g.rules])) >= 10 &&
      jsonencode(flatten([for g in module.monitoring_1[0].prometheus_rule_groups : [for r in g.rules : "${g.name}/${r.alert}"]])) ==
      jsonencode(flatten([for g in yamldecode(file("../prometheus/quota-rules.yaml")).groups : [for r in g.rules : "${g.name}/${r.alert}"]]))
    )
    error_message = "the PrometheusRule's alerts (group/alert) must be those of deploy/prometheus/quota-rules.yaml, in order"
  }
  assert {
    condition     = jsonencode(module.monitoring_1[0].prometheus_rule_groups) == jsonencode(yamldecode(file("../prometheus/quota-rules.yaml")).groups)
    error_message = "the PrometheusRule's spec.groups must equal the groups of deploy/prometheus/quota-rules.yaml (expressions, for, labels, annotations)"
  }

  # Dashboards: once, in the ledger region, byte for byte the repo's JSON, with the sidecar label.
  assert {
    condition = (
      length(module.monitoring_0[0].dashboards) == 0 && length(module.monitoring_2[0].dashboards) == 0 &&
      jsonencode(module.monitoring_1[0].dashboards) == jsonencode(["quota-dashboard-billing", "quota-dashboard-fleet"])
    )
    error_message = "the dashboard ConfigMaps must exist once, in the ledger region (us)"
  }
  assert {
    condition = (
      sha256(module.monitoring_1[0].dashboard_configmaps["quota-dashboard-fleet"].data["fleet.json"]) == filesha256("../grafana/fleet.json") &&
      sha256(module.monitoring_1[0].dashboard_configmaps["quota-dashboard-billing"].data["billing.json"]) == filesha256("../grafana/billing.json") &&
      jsondecode(module.monitoring_1[0].dashboard_configmaps["quota-dashboard-fleet"].data["fleet.json"]).uid == "quota-fleet" &&
      length(module.monitoring_1[0].dashboard_configmaps["quota-dashboard-fleet"].data) == 1 &&
      length(module.monitoring_1[0].dashboard_configmaps["quota-dashboard-billing"].data) == 1
    )
    error_message = "each dashboard ConfigMap must hold exactly one key, the repo's deploy/grafana/<board>.json unchanged"
  }
  assert {
    condition = alltrue([
      for c in values(module.monitoring_1[0].dashboard_configmaps) : lookup(c.labels, "grafana_dashboard", "") == "1"
    ])
    error_message = "the dashboard ConfigMaps must carry grafana_dashboard = \"1\" (the default dashboard_label)"
  }

  # Through whose provider: every object of monitoring_<n> was created by kubernetes.slot<n>.
  assert {
    condition = (
      length(module.monitoring_1[0].objects) == 5 &&
      alltrue([for id in values(module.monitoring_0[0].objects) : id == "slot0"]) &&
      alltrue([for id in values(module.monitoring_1[0].objects) : id == "slot1"]) &&
      alltrue([for id in values(module.monitoring_2[0].objects) : id == "slot2"])
    )
    error_message = "each region's monitoring objects must be created through its own slot's provider: ${jsonencode([module.monitoring_0[0].objects, module.monitoring_1[0].objects, module.monitoring_2[0].objects])}"
  }
  assert {
    condition = (
      output.monitoring.us.slot == 1 && output.monitoring.us.namespace == "quota-us" &&
      output.monitoring.us.prometheus_rule == "quota" && output.monitoring.eu.slot == 0 && output.monitoring.ap.slot == 2
    )
    error_message = "output.monitoring: per region its slot, namespace and objects"
  }
}

# Rule and dashboards only: a single instance, the ledger region's, and no PodMonitor.
run "rule_and_dashboards_only" {
  command = apply

  variables {
    monitoring = { prometheus_rule = true, dashboards = true }
  }

  assert {
    condition     = length(module.monitoring_0) == 0 && length(module.monitoring_1) == 1 && length(module.monitoring_2) == 0
    error_message = "without pod_monitors only the ledger region's slot (1) has a monitoring instance"
  }
  assert {
    condition     = module.monitoring_1[0].pod_monitor_specs == {} && length(module.monitoring_1[0].objects) == 3 && alltrue([for id in values(module.monitoring_1[0].objects) : id == "slot1"])
    error_message = "rule + dashboards: 3 objects through slot 1, no PodMonitor; got ${jsonencode(module.monitoring_1[0].objects)}"
  }
}

# Another namespace and sidecar label: the objects go there, the PodMonitors still select the
# region's namespace.
run "namespace_and_label" {
  command = plan

  variables {
    monitoring = { pod_monitors = true, dashboards = true, dashboard_label = "example.com/dashboard", namespace = "observability", labels = { release = "kps" } }
  }

  assert {
    condition     = alltrue([for r in ["eu", "us", "ap"] : output.monitoring[r].namespace == "observability"])
    error_message = "monitoring.namespace must be the namespace of every monitoring object"
  }
  assert {
    condition     = jsonencode(module.monitoring_0[0].pod_monitor_specs["quota-limiter-eu"].namespaceSelector.matchNames) == jsonencode(["quota-eu"])
    error_message = "a PodMonitor in another namespace must still select the pods of quota-<region>"
  }
  assert {
    condition = alltrue([
      for c in values(module.monitoring_1[0].dashboard_configmaps) :
      lookup(c.labels, "example.com/dashboard", "") == "1" && lookup(c.labels, "release", "") == "kps" && !contains(keys(c.labels), "grafana_dashboard")
    ])
    error_message = "the dashboard ConfigMaps must carry dashboard_label = \"1\" and monitoring.labels"
  }
  assert {
    condition     = module.monitoring_1[0].prometheus_rule == null
    error_message = "prometheus_rule off: no PrometheusRule"
  }
}

run "pod_monitors_need_prometheus_namespace" {
  command = plan

  variables {
    prometheus_namespace = null
    monitoring           = { pod_monitors = true }
  }

  expect_failures = [var.monitoring]
}

run "bad_dashboard_label" {
  command = plan

  variables {
    monitoring = { dashboards = true, dashboard_label = "not a label" }
  }

  expect_failures = [var.monitoring]
}
