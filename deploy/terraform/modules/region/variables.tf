variable "spec" {
  description = <<-EOT
    One region of the quota platform. Every resource name carries the region name, so two regions
    can share a cluster and namespace (staging, kind).
      name          region name, also the NATS cluster and gateway name
      weights       historical weights of ALL regions (name => weight), passed to --region-weights
      gateway_url   this region's NATS gateway address as the other regions reach it (nats://host:7222)
      peers         the OTHER regions' gateway addresses (name => nats://host:7222)
      redis.endpoint  host:port of an operator-managed Redis (comma-separated seeds when
                      redis.cluster); null deploys a single-node Redis StatefulSet with a volume
      limiter.shutdown_delay_seconds  --shutdown-delay: on SIGTERM /readyz fails and the daemon
                      keeps serving this long; limiter.drain_seconds: then the time to finish
                      requests, return leases, send final reports. Grace = delay + drain + 5 s.
      network       who may reach the limiters' HTTP port (NetworkPolicy): pods in
                    api_client_namespaces (names) or in namespaces carrying all of
                    api_client_namespace_labels; both empty = this namespace only. Plus
                    prometheus_namespace (null = none) for /metrics.
      allow_unauthenticated_checks  permit an empty check_tokens (open /v1/allow)
  EOT
  type = object({
    name                        = string
    namespace                   = optional(string, "quota")
    create_namespace            = optional(bool, true)
    image                       = string
    image_pull_policy           = optional(string, "IfNotPresent")
    weights                     = map(number)
    gateway_url                 = string
    peers                       = map(string)
    gateway_service_type        = optional(string, "LoadBalancer")
    gateway_service_annotations = optional(map(string), {})
    labels                      = optional(map(string), {})

    limiter = optional(object({
      replicas       = optional(number, 3)
      cpu_request    = optional(string, "500m")
      cpu_limit      = optional(string, "2")
      memory_request = optional(string, "256Mi")
      memory_limit   = optional(string, "1Gi")
      log_level      = optional(string, "info")
      extra_args     = optional(list(string), [])

      shutdown_delay_seconds = optional(number, 5)
      drain_seconds          = optional(number, 20)
    }), {})

    redis = optional(object({
      endpoint     = optional(string)
      tls          = optional(bool, false)
      cluster      = optional(bool, false)
      image        = optional(string, "redis:7.2-alpine")
      storage_size = optional(string, "5Gi")
      maxmemory    = optional(string, "1gb")
    }), {})

    nats = optional(object({
      replicas       = optional(number, 3)
      image          = optional(string, "nats:2.10-alpine")
      storage_size   = optional(string, "10Gi")
      max_file_store = optional(string, "8G")
    }), {})

    network = optional(object({
      api_client_namespaces       = optional(list(string), [])
      api_client_namespace_labels = optional(map(string), {})
      prometheus_namespace        = optional(string)
    }), {})

    allow_unauthenticated_checks = optional(bool, false)
  })

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,19}$", var.spec.name))
    error_message = "spec.name must be a DNS label of at most 20 characters (lower case, digits, dashes)."
  }
  validation {
    condition     = contains(keys(var.spec.weights), var.spec.name)
    error_message = "spec.weights must include this region."
  }
  validation {
    condition     = !contains(keys(var.spec.peers), var.spec.name)
    error_message = "spec.peers must list the other regions only."
  }
  validation {
    condition     = var.spec.limiter.replicas >= 1 && var.spec.nats.replicas >= 1
    error_message = "spec.limiter.replicas and spec.nats.replicas must be at least 1."
  }
  validation {
    condition     = var.spec.limiter.shutdown_delay_seconds >= 0 && var.spec.limiter.shutdown_delay_seconds <= 300 && floor(var.spec.limiter.shutdown_delay_seconds) == var.spec.limiter.shutdown_delay_seconds
    error_message = "spec.limiter.shutdown_delay_seconds must be an integer in 0..300."
  }
  validation {
    condition     = var.spec.limiter.drain_seconds >= 10 && floor(var.spec.limiter.drain_seconds) == var.spec.limiter.drain_seconds
    error_message = "spec.limiter.drain_seconds must be an integer of at least 10 (the daemon's HTTP write timeout)."
  }
}

variable "admin_token" {
  description = "Control-plane bearer token (--admin-token), delivered as env QUOTA_ADMIN_TOKEN from a Secret."
  type        = string
  sensitive   = true
}

variable "redis_password" {
  description = "Password of this region's Redis (managed endpoint or the in-cluster StatefulSet)."
  type        = string
  sensitive   = true
}

variable "check_tokens" {
  description = "Bearer tokens of the check API (--check-token), comma-joined into the Secret, env QUOTA_CHECK_TOKEN. Empty only with spec.allow_unauthenticated_checks."
  type        = list(string)
  default     = []
  sensitive   = true

  validation {
    condition     = length(var.check_tokens) > 0 || var.spec.allow_unauthenticated_checks
    error_message = "check_tokens is empty: give at least one, or set spec.allow_unauthenticated_checks = true."
  }
  validation {
    condition     = alltrue([for t in var.check_tokens : length(t) > 0 && !strcontains(t, ",")])
    error_message = "check_tokens: a token must be non-empty and must not contain ','."
  }
}

variable "read_tokens" {
  description = "Bearer tokens for reads (--read-token), comma-joined into the Secret, env QUOTA_READ_TOKEN. Empty = only the admin token reads."
  type        = list(string)
  default     = []
  sensitive   = true

  validation {
    condition     = alltrue([for t in var.read_tokens : length(t) > 0 && !strcontains(t, ",")])
    error_message = "read_tokens: a token must be non-empty and must not contain ','."
  }
}
