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
  description = "NATS URL for clients in this region (--nats). Known once the NATS servers have rolled out, so that a client of another module (the reconciler) rolls after them."
  value       = local.nats_client_url
  depends_on  = [kubernetes_stateful_set.nats]
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

output "nats_env_names" {
  description = "Names (not values) of the NATS container's environment variables: POD_NAME and one QUOTA_NATS_PASSWORD_<USER> per user."
  value       = [for e in kubernetes_stateful_set.nats.spec[0].template[0].spec[0].container[0].env : e.name]
}

output "control_plane_service" {
  description = "In-cluster address of the control-plane limiter's admin API; null outside the control region."
  value       = local.is_control_region ? "${kubernetes_service.control_plane[0].metadata[0].name}.${local.svc}:8080" : null
}

output "control_plane_args" {
  description = "The control-plane container's arguments; [] outside the control region."
  value       = local.is_control_region ? kubernetes_deployment.control_plane[0].spec[0].template[0].spec[0].container[0].args : []
}
