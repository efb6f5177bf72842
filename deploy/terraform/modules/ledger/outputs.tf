# No output carries a secret: postgres_target has host, port and database only.

output "reconciler_service" {
  description = "In-cluster address of the reconciler (/v1/usage, /metrics)."
  value       = "${kubernetes_service_v1.reconciler.metadata[0].name}.${local.svc}:8081"
}

output "postgres_target" {
  description = "host:port/database of the ledger (no credentials)."
  value       = local.postgres_target
}

output "postgres_sslmode" {
  description = "sslmode of the reconciler's Postgres URL (verify-full by default for an external Postgres)."
  value       = local.pg_sslmode
}

output "postgres_in_cluster" {
  description = "Whether the ledger runs the in-cluster (development) Postgres StatefulSet."
  value       = length(kubernetes_stateful_set_v1.postgres) == 1
}

output "reconciler_args" {
  description = "The reconciler container's arguments, as set on the Deployment."
  value       = kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].args
}

output "reconciler_termination_grace_seconds" {
  description = "terminationGracePeriodSeconds of the reconciler pods (> shutdown delay + drain)."
  value       = kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].termination_grace_period_seconds
}

output "reconciler_env_names" {
  description = "Names (not values) of the reconciler container's environment variables."
  value       = [for e in kubernetes_deployment_v1.reconciler.spec[0].template[0].spec[0].container[0].env : e.name]
}

output "postgres_password_sync" {
  description = "The in-cluster Postgres' postStart script (sets the role's password from the environment); validate.sh runs it."
  value       = local.pg_password_sync
}

output "objects" {
  description = "Every object of the ledger: kind/name => id."
  value = merge(
    { "secret/${kubernetes_secret_v1.ledger.metadata[0].name}" = kubernetes_secret_v1.ledger.id },
    { "deployment/${kubernetes_deployment_v1.reconciler.metadata[0].name}" = kubernetes_deployment_v1.reconciler.id },
    { "service/${kubernetes_service_v1.reconciler.metadata[0].name}" = kubernetes_service_v1.reconciler.id },
    { "networkpolicy/${kubernetes_network_policy_v1.reconciler.metadata[0].name}" = kubernetes_network_policy_v1.reconciler.id },
    { for o in kubernetes_secret_v1.postgres : "secret/${o.metadata[0].name}" => o.id },
    { for o in kubernetes_service_v1.postgres : "service/${o.metadata[0].name}" => o.id },
    { for o in kubernetes_stateful_set_v1.postgres : "statefulset/${o.metadata[0].name}" => o.id },
    { for o in kubernetes_network_policy_v1.postgres : "networkpolicy/${o.metadata[0].name}" => o.id },
  )
}
