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
                  The in-cluster Postgres takes connections from the reconciler only.
      nats_url    the ledger region's NATS; the reconciler connects as NATS user reconciler
                  (--nats-user, password var.nats_password via env QUOTA_NATS_PASSWORD).
      usage_stream  replicas and byte limit of the usage stream when the reconciler creates it
                  (--stream-replicas, --stream-max-bytes; an existing stream is never changed).
      nats_tls_secret  the kubernetes.io/tls Secret of the NATS servers in this namespace: the
                  reconciler mounts its ca.crt only (--nats-tls-ca); null = no TLS.
  EOT
  type = object({
    region            = string
    namespace         = string
    image             = string
    image_pull_policy = optional(string, "IfNotPresent")
    nats_url          = string
    nats_tls_secret   = optional(string)
    labels            = optional(map(string), {})

    usage_stream = optional(object({
      replicas  = optional(number, 1)
      max_bytes = optional(number, 1073741824)
    }), {})

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
    condition     = var.spec.usage_stream.replicas >= 1 && var.spec.usage_stream.replicas <= 5 && floor(var.spec.usage_stream.replicas) == var.spec.usage_stream.replicas && var.spec.usage_stream.max_bytes >= 1048576 && floor(var.spec.usage_stream.max_bytes) == var.spec.usage_stream.max_bytes
    error_message = "spec.usage_stream: replicas must be an integer in 1..5 and max_bytes an integer of at least 1048576 (1 MiB)."
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

variable "nats_password" {
  description = "Password of NATS user reconciler, delivered only through the ledger Secret (env QUOTA_NATS_PASSWORD)."
  type        = string
  sensitive   = true

  validation {
    condition     = length(var.nats_password) >= 16
    error_message = "nats_password must be at least 16 characters."
  }
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
