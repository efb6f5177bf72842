output "regions" {
  description = "Per region: services, Redis endpoint (no credentials), NATS gateways."
  value       = module.quota.regions
}

output "ledger" {
  description = "Reconciler service and Aurora target (no credentials)."
  value       = module.quota.ledger
}
