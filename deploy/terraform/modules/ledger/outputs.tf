# No output carries a secret: postgres_target has host, port and database only.

output "reconciler_service" {
  description = "In-cluster address of the reconciler (/v1/usage, /metrics)."
  value       = "${kubernetes_service.reconciler.metadata[0].name}.${local.svc}:8081"
}

output "postgres_target" {
  description = "host:port/database of the ledger (no credentials)."
  value       = local.postgres_target
}

output "postgres_in_cluster" {
  description = "Whether the ledger runs the in-cluster Postgres StatefulSet."
  value       = length(kubernetes_stateful_set.postgres) == 1
}

output "reconciler_args" {
  description = "The reconciler container's arguments, as set on the Deployment."
  value       = kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].args
}

output "reconciler_termination_grace_seconds" {
  description = "terminationGracePeriodSeconds of the reconciler pods (> shutdown delay + drain)."
  value       = kubernetes_deployment.reconciler.spec[0].template[0].spec[0].termination_grace_period_seconds
}

output "reconciler_env_names" {
  description = "Names (not values) of the reconciler container's environment variables."
  value       = [for e in kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].env : e.name]
}
