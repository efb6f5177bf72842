# No output carries a secret: the tests assert that none of them is sensitive.

output "name" {
  description = "Region name."
  value       = local.name
}

output "namespace" {
  description = "Namespace of this region's resources."
  value       = local.ns
}

output "limiter_service" {
  description = "In-cluster address of the limiter API."
  value       = "${kubernetes_service.limiter.metadata[0].name}.${local.svc}:8080"
}

output "memberlist_service" {
  description = "Headless service the limiters join for in-region membership."
  value       = kubernetes_service.memberlist.metadata[0].name
}

output "redis_endpoint" {
  description = "host:port of this region's Redis (no credentials)."
  value       = local.redis_endpoint
}

output "redis_in_cluster" {
  description = "Whether this region runs the in-cluster Redis StatefulSet."
  value       = length(kubernetes_stateful_set.redis) == 1
}

output "nats_client_url" {
  description = "NATS URL for clients in this region (--nats)."
  value       = local.nats_client_url
}

output "nats_gateway_names" {
  description = "Remote gateways configured on this region's NATS servers."
  value       = local.gateway_names
}

output "nats_config" {
  description = "Rendered nats.conf, as stored in the ConfigMap."
  value       = kubernetes_config_map.nats.data["nats.conf"]
}

output "limiter_args" {
  description = "The limiter container's arguments, as set on the Deployment."
  value       = kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].args
}

output "limiter_env_names" {
  description = "Names (not values) of the limiter container's environment variables."
  value       = [for e in kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].env : e.name]
}

output "limiter_termination_grace_seconds" {
  description = "terminationGracePeriodSeconds of the limiter pods (> shutdown delay + drain)."
  value       = kubernetes_deployment.limiter.spec[0].template[0].spec[0].termination_grace_period_seconds
}
