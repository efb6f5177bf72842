variable "spec" {
  description = <<-EOT
    The billing ledger: the reconciler (JetStream usage stream -> Postgres) and, when
    postgres.host is null, a single-node Postgres StatefulSet with a persistent volume.
    Migrations run as an init container of every reconciler pod (`reconciler migrate`,
    idempotent), so the schema is current before `reconciler serve` starts.
      reconciler.shutdown_delay_seconds  --shutdown-delay: on SIGTERM /readyz fails and the
                  reconciler keeps serving this long; reconciler.drain_seconds: then its stop (it
                  allows itself 30 s). Grace = delay + drain + 5 s.
      network     who may reach the reconciler's port 8081 (NetworkPolicy): pods in
                  billing_client_namespaces, and prometheus_namespace (null = none); nothing else.
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

      shutdown_delay_seconds = optional(number, 5)
      drain_seconds          = optional(number, 30)
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

    network = optional(object({
      billing_client_namespaces = optional(list(string), [])
      prometheus_namespace      = optional(string)
    }), {})
  })

  validation {
    condition     = var.spec.reconciler.replicas >= 1
    error_message = "spec.reconciler.replicas must be at least 1."
  }
  validation {
    condition     = var.spec.reconciler.shutdown_delay_seconds >= 0 && var.spec.reconciler.shutdown_delay_seconds <= 300 && floor(var.spec.reconciler.shutdown_delay_seconds) == var.spec.reconciler.shutdown_delay_seconds
    error_message = "spec.reconciler.shutdown_delay_seconds must be an integer in 0..300 (the daemon allows up to 5m)."
  }
  validation {
    condition     = var.spec.reconciler.drain_seconds >= 10 && floor(var.spec.reconciler.drain_seconds) == var.spec.reconciler.drain_seconds
    error_message = "spec.reconciler.drain_seconds must be an integer of at least 10."
  }
}

variable "postgres_password" {
  description = "Password of the Postgres ledger user, delivered only through a Secret."
  type        = string
  sensitive   = true
}

variable "billing_tokens" {
  description = "Bearer tokens of the billing API (--billing-token: TOKEN or prefix:PREFIX=TOKEN), comma-joined into the Secret, env QUOTA_BILLING_TOKEN. Empty = /v1/usage answers 503."
  type        = list(string)
  default     = []
  sensitive   = true

  validation {
    condition     = alltrue([for t in var.billing_tokens : length(t) > 0 && !strcontains(t, ",")])
    error_message = "billing_tokens: an entry must be non-empty and must not contain ','."
  }
}
