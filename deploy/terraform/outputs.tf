# Outputs carry no secret (the tests assert that none is sensitive): addresses, names, flags.

output "regions" {
  description = "Per region: namespace, limiter and memberlist services, Redis endpoint, NATS URL and gateways."
  value = {
    for name, m in local.region_out : name => {
      slot               = var.regions[name].slot
      namespace          = m.namespace
      limiter_service    = m.limiter_service
      memberlist_service = m.memberlist_service
      redis_endpoint     = m.redis_endpoint
      redis_in_cluster   = m.redis_in_cluster
      nats_client_url    = m.nats_client_url
      nats_gateways      = m.nats_gateway_names
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
  description = "Reconciler service and Postgres target (host:port/database, no credentials)."
  value = {
    region              = var.ledger_region
    reconciler_service  = module.ledger.reconciler_service
    postgres_target     = module.ledger.postgres_target
    postgres_in_cluster = module.ledger.postgres_in_cluster
  }
}
