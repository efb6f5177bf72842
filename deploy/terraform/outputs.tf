# Outputs carry no secret (the tests assert that none is sensitive): addresses, names, flags.

output "regions" {
  description = "Per active region: slot, namespace, zones, limiter service and processes, memberlist service, Redis endpoint, NATS URL and gateways."
  value = {
    for name, m in local.region_out : name => {
      slot               = var.regions[name].slot
      namespace          = m.namespace
      zones              = var.regions[name].zones
      limiter_service    = m.limiter_service
      limiter_processes  = m.limiter_processes
      memberlist_service = m.memberlist_service
      redis_endpoint     = m.redis_endpoint
      redis_in_cluster   = m.redis_in_cluster
      nats_client_url    = m.nats_client_url
      nats_gateways      = m.nats_gateway_names
      nats_config_sha256 = sha256(m.nats_config)
    }
  }
}

output "limiter_args" {
  description = "regional-limiter arguments per region (secrets come from env, not args)."
  value       = { for name, m in local.region_out : name => m.limiter_args }
}

output "control_plane" {
  description = "The control-plane limiter (the only catalogue writer): region, admin API service, arguments."
  value = {
    region  = local.control_region
    service = local.region_out[local.control_region].control_plane_service
    args    = local.region_out[local.control_region].control_plane_args
  }
}

output "ledger" {
  description = "Reconciler service, its arguments, and the Postgres target (host:port/database, no credentials)."
  value = {
    region              = var.ledger_region
    slot                = var.regions[var.ledger_region].slot
    reconciler_service  = local.ledger_out.reconciler_service
    reconciler_args     = local.ledger_out.reconciler_args
    postgres_target     = local.ledger_out.postgres_target
    postgres_in_cluster = local.ledger_out.postgres_in_cluster
    postgres_sslmode    = local.ledger_out.postgres_sslmode
  }
}

output "kube_targets" {
  description = "What each provider slot points at (kubeconfig file and context, or API host; no credentials). A slot no region uses points at an unresolvable .invalid host."
  value       = { for s, t in local.kube_target : s => { region = lookup(local.slot_of_any_region, s, null), target = t } }
}

output "objects" {
  description = "Every Kubernetes object Terraform manages, per region and for the ledger: kind/name => id. Lets a plan be compared with the previous apply (the tests use it to show that adding, removing or moving a region replaces nothing else)."
  value = {
    regions = { for name, m in local.region_out : name => m.objects }
    ledger  = local.ledger_out.objects
  }
}

output "monitoring" {
  description = "Monitoring objects per region (var.monitoring): slot, namespace, PodMonitors, PrometheusRule, dashboard ConfigMaps."
  value = {
    for name, m in local.monitoring_out : name => {
      slot            = var.regions[name].slot
      namespace       = m.namespace
      pod_monitors    = m.pod_monitors
      prometheus_rule = m.prometheus_rule
      dashboards      = m.dashboards
    }
  }
}
