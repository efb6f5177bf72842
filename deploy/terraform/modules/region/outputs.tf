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
  value       = "${kubernetes_service_v1.limiter.metadata[0].name}.${local.svc}:8080"
}

output "memberlist_service" {
  description = "Headless service the limiters join for in-region membership."
  value       = kubernetes_service_v1.memberlist.metadata[0].name
}

output "redis_endpoint" {
  description = "host:port of this region's Redis (no credentials)."
  value       = local.redis_endpoint
}

output "redis_in_cluster" {
  description = "Whether this region runs the in-cluster Redis StatefulSet."
  value       = length(kubernetes_stateful_set_v1.redis) == 1
}

output "nats_client_url" {
  description = "NATS URL for clients in this region (--nats). Known once the NATS servers have rolled out, so that a client of another module (the reconciler) rolls after them."
  value       = local.nats_client_url
  depends_on  = [kubernetes_stateful_set_v1.nats]
}

output "nats_gateway_names" {
  description = "Remote gateways configured on this region's NATS servers."
  value       = local.gateway_names
}

output "nats_config" {
  description = "Rendered nats.conf, as stored in the ConfigMap."
  value       = kubernetes_config_map_v1.nats.data["nats.conf"]
}

output "limiter_processes" {
  description = "The limiter processes: each one's StatefulSet (pod <process>-0), NATS user limiter-<region>.<process> and Secret quota-nats-<process>."
  value       = [for p in local.limiter_processes : kubernetes_stateful_set_v1.limiter[p].metadata[0].name]
}

output "limiter_args" {
  description = "The first limiter process's arguments, as set on its StatefulSet (the others differ only in --nats-user)."
  value       = kubernetes_stateful_set_v1.limiter[local.limiter_processes[0]].spec[0].template[0].spec[0].container[0].args
}

output "limiter_env_names" {
  description = "Names (not values) of the first limiter process's environment variables."
  value       = [for e in kubernetes_stateful_set_v1.limiter[local.limiter_processes[0]].spec[0].template[0].spec[0].container[0].env : e.name]
}

output "limiter_termination_grace_seconds" {
  description = "terminationGracePeriodSeconds of the limiter pods (> shutdown delay + drain)."
  value       = kubernetes_stateful_set_v1.limiter[local.limiter_processes[0]].spec[0].template[0].spec[0].termination_grace_period_seconds
}

output "nats_enabled_users" {
  description = "The NATS users that may log in to this region's servers (their real password is in Secret nats-<region>; every other user's is disabled there)."
  value       = sort(local.nats_users_here)
}

output "nats_env_names" {
  description = "Names (not values) of the NATS container's environment variables: POD_NAME and one QUOTA_NATS_PASSWORD_<USER> per user."
  value       = [for e in kubernetes_stateful_set_v1.nats.spec[0].template[0].spec[0].container[0].env : e.name]
}

output "control_plane_service" {
  description = "In-cluster address of the control-plane limiter's admin API; null outside the control region."
  value       = local.is_control_region ? "${kubernetes_service_v1.control_plane[0].metadata[0].name}.${local.svc}:8080" : null
}

output "control_plane_args" {
  description = "The control-plane container's arguments; [] outside the control region."
  value       = local.is_control_region ? kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].args : []
}

output "objects" {
  description = "Every object of this region: kind/name => id (compared across test runs: an unchanged id means not replaced)."
  value = merge(
    { for o in kubernetes_namespace_v1.this : "namespace/${o.metadata[0].name}" => o.id },
    { for o in concat([kubernetes_secret_v1.limiter, kubernetes_secret_v1.nats], values(kubernetes_secret_v1.limiter_nats)) : "secret/${o.metadata[0].name}" => o.id },
    { for o in kubernetes_secret_v1.control_plane : "secret/${o.metadata[0].name}" => o.id },
    { for o in kubernetes_secret_v1.redis : "secret/${o.metadata[0].name}" => o.id },
    { "configmap/${kubernetes_config_map_v1.nats.metadata[0].name}" = kubernetes_config_map_v1.nats.id },
    {
      for o in concat([kubernetes_service_v1.limiter, kubernetes_service_v1.memberlist, kubernetes_service_v1.nats, kubernetes_service_v1.nats_headless, kubernetes_service_v1.nats_gateway], kubernetes_service_v1.control_plane, kubernetes_service_v1.redis) :
      "service/${o.metadata[0].name}" => o.id
    },
    { for o in concat(values(kubernetes_stateful_set_v1.limiter), [kubernetes_stateful_set_v1.nats], kubernetes_stateful_set_v1.redis) : "statefulset/${o.metadata[0].name}" => o.id },
    { for o in kubernetes_deployment_v1.control_plane : "deployment/${o.metadata[0].name}" => o.id },
    { for o in concat([kubernetes_network_policy_v1.limiter, kubernetes_network_policy_v1.nats], kubernetes_network_policy_v1.control_plane, kubernetes_network_policy_v1.redis) : "networkpolicy/${o.metadata[0].name}" => o.id },
    { for o in concat([kubernetes_pod_disruption_budget_v1.limiter, kubernetes_pod_disruption_budget_v1.nats], kubernetes_pod_disruption_budget_v1.redis) : "poddisruptionbudget/${o.metadata[0].name}" => o.id },
  )
}
