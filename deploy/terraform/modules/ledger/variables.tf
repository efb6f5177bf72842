variable "spec" {
  description = <<-EOT
    The billing ledger: the reconciler (JetStream usage stream -> Postgres) and, for
    development only (postgres.host null and postgres.development_in_cluster), a one-instance
    Postgres StatefulSet with a persistent volume and no backups.
    Migrations run as an init container of every reconciler pod (`reconciler migrate`,
    idempotent), so the schema is current before `reconciler serve` starts.
      reconciler.shutdown_delay_seconds  --shutdown-delay: on SIGTERM /readyz fails and the
                  reconciler keeps serving this long; reconciler.drain_seconds: then its stop (it
                  allows itself 30 s). Grace = delay + drain + 5 s.
      network     who may reach the reconciler's port 8081 (NetworkPolicy): pods in
                  billing_client_namespaces, and prometheus_namespace (null = none); nothing else.
                  The in-cluster Postgres takes connections from the reconciler only. Egress of
                  the reconciler: dns (port 53), the NATS pods of its region (nats_url, same
                  namespace), Postgres (the in-cluster pods, or postgres.cidrs, required with
                  postgres.host), and otlp_namespaces / otlp_cidrs (required with otlp_endpoint).
      nats_url    the ledger region's NATS; the reconciler connects as NATS user reconciler
                  (--nats-user, password var.nats_password via env QUOTA_NATS_PASSWORD).
      usage_stream  placement (NATS cluster), replicas and byte limit of the usage stream when
                  the reconciler creates it (--stream-cluster, --stream-replicas,
                  --stream-max-bytes; an existing stream is never changed).
      postgres    host etc. of an external Postgres, TLS sslmode (default verify-full) and
                  ca_secret (a Secret in this namespace with key ca.crt, mounted and passed as
                  sslrootcert); or development_in_cluster.
      nats_tls_secret  the kubernetes.io/tls Secret of the NATS servers in this namespace: the
                  reconciler mounts its ca.crt only (--nats-tls-ca); null = no TLS.
      otlp_endpoint  OTLP/HTTP collector for the reconciler's traces (--otlp-endpoint); null = none.
  EOT
  type = object({
    region    = string
    namespace = string
    images = object({
      quota    = string
      postgres = optional(string)
    })
    allow_image_tags  = optional(bool, false)
    image_pull_policy = optional(string, "IfNotPresent")
    nats_url          = string
    nats_tls_secret   = optional(string)
    otlp_endpoint     = optional(string)
    labels            = optional(map(string), {})

    usage_stream = optional(object({
      cluster   = optional(string)
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
      host                   = optional(string)
      cidrs                  = optional(list(string), [])
      port                   = optional(number, 5432)
      user                   = optional(string, "quota")
      database               = optional(string, "quota")
      sslmode                = optional(string)
      ca_secret              = optional(string)
      development_in_cluster = optional(bool, false)
      storage_size           = optional(string, "50Gi")
      storage_class          = optional(string)
    }), {})

    network = optional(object({
      billing_client_namespaces = optional(list(string), [])
      prometheus_namespace      = optional(string)
      otlp_namespaces           = optional(list(string), [])
      otlp_cidrs                = optional(list(string), [])
      dns = optional(object({
        namespace  = optional(string, "kube-system")
        pod_labels = optional(map(string), { "k8s-app" = "kube-dns" })
        cidrs      = optional(list(string), [])
      }), {})
    }), {})
  })

  validation {
    condition     = var.spec.postgres.host == null || length(var.spec.postgres.cidrs) > 0
    error_message = "spec.postgres.cidrs is empty but spec.postgres.host names an external Postgres: list its CIDRs (the reconciler's egress NetworkPolicy admits those only)."
  }
  validation {
    condition     = var.spec.otlp_endpoint == null || length(var.spec.network.otlp_namespaces) + length(var.spec.network.otlp_cidrs) > 0
    error_message = "spec.otlp_endpoint is set but neither spec.network.otlp_namespaces nor otlp_cidrs says where it is (the egress NetworkPolicy admits those only)."
  }
  validation {
    condition     = alltrue([for c in concat(var.spec.postgres.cidrs, var.spec.network.otlp_cidrs, var.spec.network.dns.cidrs) : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "spec.postgres.cidrs, spec.network.otlp_cidrs, spec.network.dns.cidrs: every entry must be a CIDR."
  }
  validation {
    condition     = (var.spec.postgres.host == null) == var.spec.postgres.development_in_cluster
    error_message = "spec.postgres: set host (managed or operator-run Postgres with backups), or leave it null with development_in_cluster = true (development only)."
  }
  validation {
    condition = var.spec.allow_image_tags || alltrue([
      for i in [var.spec.images.quota, var.spec.images.postgres] : i == null || can(regex("^[^@\\s]+@sha256:[0-9a-f]{64}$", i))
    ])
    error_message = "spec.images: every image must be pinned by digest (name@sha256:<64 hex>), unless spec.allow_image_tags."
  }
  validation {
    condition     = !var.spec.postgres.development_in_cluster || var.spec.images.postgres != null
    error_message = "spec.images.postgres is needed for the in-cluster (development) Postgres."
  }
  validation {
    condition     = can(regex("^[1-9][0-9]*(Ki|Mi|Gi|Ti|k|M|G|T)?$", var.spec.reconciler.memory_limit))
    error_message = "spec.reconciler.memory_limit must be a whole quantity (1Gi, 512Mi, 2G): GOMEMLIMIT is derived from it."
  }
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
