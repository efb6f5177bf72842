output "region" {
  description = "The region of these objects."
  value       = var.spec.region
}

output "pod_monitors" {
  description = "Names of the PodMonitors."
  value       = sort([for m in kubernetes_manifest.pod_monitor : m.manifest.metadata.name])
}

output "prometheus_rule" {
  description = "Name of the PrometheusRule, or null."
  value       = one([for r in kubernetes_manifest.prometheus_rule : r.manifest.metadata.name])
}

output "dashboards" {
  description = "Names of the dashboard ConfigMaps."
  value       = sort([for c in kubernetes_config_map_v1.dashboard : c.metadata[0].name])
}

output "namespace" {
  description = "Namespace of the objects."
  value       = var.spec.namespace
}

output "pod_monitor_specs" {
  description = "spec of each PodMonitor, by name (for the tests)."
  value       = { for m in kubernetes_manifest.pod_monitor : m.manifest.metadata.name => m.manifest.spec }
}

output "prometheus_rule_groups" {
  description = "spec.groups of the PrometheusRule, or null (for the tests)."
  value       = one([for r in kubernetes_manifest.prometheus_rule : r.manifest.spec.groups])
}

output "dashboard_configmaps" {
  description = "Each dashboard ConfigMap by name: its labels and data (for the tests)."
  value = {
    for c in kubernetes_config_map_v1.dashboard : c.metadata[0].name => {
      labels = c.metadata[0].labels
      data   = c.data
    }
  }
}

output "objects" {
  description = "Every object: kind/name => id (manifests: metadata.uid of the applied object)."
  value = merge(
    { for m in kubernetes_manifest.pod_monitor : "podmonitor/${m.manifest.metadata.name}" => try(m.object.metadata.uid, null) },
    { for r in kubernetes_manifest.prometheus_rule : "prometheusrule/${r.manifest.metadata.name}" => try(r.object.metadata.uid, null) },
    { for c in kubernetes_config_map_v1.dashboard : "configmap/${c.metadata[0].name}" => c.id },
  )
}
