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
