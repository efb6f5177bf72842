variable "spec" {
  description = <<-EOT
    The billing ledger: the reconciler (JetStream usage stream -> Postgres) and, when
    postgres.host is null, a single-node Postgres StatefulSet with a persistent volume.
    Migrations run as an init container of every reconciler pod (`reconciler migrate`,
    idempotent), so the schema is current before `reconciler serve` starts.
  EOT
  type = object({
    region            = string
    namespace         = string
    image             = string
    image_pull_policy = optional(string, "IfNotPresent")
    nats_url          = string
    labels            = optional(map(string), {})

    reconciler = optional(object({
      replicas       = optional(number, 1)
      cpu_request    = optional(string, "250m")
      cpu_limit      = optional(string, "1")
      memory_request = optional(string, "256Mi")
      memory_limit   = optional(string, "1Gi")
    }), {})

    postgres = optional(object({
      host         = optional(string)
      port         = optional(number, 5432)
      user         = optional(string, "quota")
      database     = optional(string, "quota")
      sslmode      = optional(string)
      image        = optional(string, "postgres:16-alpine")
      storage_size = optional(string, "50Gi")
    }), {})
  })

  validation {
    condition     = var.spec.reconciler.replicas >= 1
    error_message = "spec.reconciler.replicas must be at least 1."
  }
}

variable "postgres_password" {
  description = "Password of the Postgres ledger user, delivered only through a Secret."
  type        = string
  sensitive   = true
}
