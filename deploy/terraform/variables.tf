variable "regions" {
  description = <<-EOT
    The regions to deploy, by name. Each region is one Kubernetes cluster (or one namespace of a
    shared cluster), reached through the provider alias of its slot (providers.tf).
      slot         provider slot 0..4, unique; never change it for a live region (its resources
                   would be planned for the cluster of the new slot)
      weight       historical traffic weight, passed to every limiter's --region-weights
      kube         how to reach the cluster: config_path/context, or host + cluster_ca_certificate
                   + exec (e.g. aws eks get-token); config_path defaults to ~/.kube/config
      gateway_url  nats://host:7222 at which the OTHER regions reach this region's NATS gateway
                   (a DNS name you point at the nats-<region>-gateway LoadBalancer)
      redis        endpoint = managed Redis host:port (or comma-separated cluster seeds with
                   cluster = true); null deploys a Redis StatefulSet in the region
      limiter      replicas and resources of the regional-limiter Deployment
      nats         NATS servers per region (3 for JetStream R3), image, volume size
  EOT
  type = map(object({
    slot   = number
    weight = number
    kube = optional(object({
      config_path            = optional(string)
      context                = optional(string)
      host                   = optional(string)
      cluster_ca_certificate = optional(string)
      exec = optional(object({
        api_version = string
        command     = string
        args        = optional(list(string), [])
        env         = optional(map(string), {})
      }))
    }), {})
    namespace                   = optional(string, "quota")
    create_namespace            = optional(bool, true)
    gateway_url                 = string
    gateway_service_type        = optional(string, "LoadBalancer")
    gateway_service_annotations = optional(map(string), {})
    redis = optional(object({
      endpoint     = optional(string)
      tls          = optional(bool, false)
      cluster      = optional(bool, false)
      image        = optional(string, "redis:7.2-alpine")
      storage_size = optional(string, "5Gi")
      maxmemory    = optional(string, "1gb")
    }), {})
    limiter = optional(object({
      replicas       = optional(number, 3)
      cpu_request    = optional(string, "500m")
      cpu_limit      = optional(string, "2")
      memory_request = optional(string, "256Mi")
      memory_limit   = optional(string, "1Gi")
      log_level      = optional(string, "info")
      extra_args     = optional(list(string), [])
    }), {})
    nats = optional(object({
      replicas       = optional(number, 3)
      image          = optional(string, "nats:2.10-alpine")
      storage_size   = optional(string, "10Gi")
      max_file_store = optional(string, "8G")
    }), {})
  }))

  validation {
    condition     = length(var.regions) >= 1 && length(var.regions) <= 5
    error_message = "regions: between 1 and 5 regions (5 provider slots; see deploy/README.md to add slots)."
  }
  validation {
    condition     = alltrue([for n, r in var.regions : can(regex("^[a-z][a-z0-9-]{0,19}$", n))])
    error_message = "regions: names must be DNS labels of at most 20 characters (lower case, digits, dashes)."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : r.slot >= 0 && r.slot <= 4 && floor(r.slot) == r.slot])
    error_message = "regions: slot must be an integer in 0..4."
  }
  validation {
    condition     = length(distinct([for r in values(var.regions) : r.slot])) == length(var.regions)
    error_message = "regions: every region needs its own slot."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : r.weight > 0])
    error_message = "regions: weight must be positive."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : can(regex("^(nats://)?[^/:]+:[0-9]+$", r.gateway_url))])
    error_message = "regions: gateway_url must be nats://host:port."
  }
  validation {
    condition     = length(distinct([for r in values(var.regions) : r.gateway_url])) == length(var.regions)
    error_message = "regions: every region needs its own gateway_url."
  }
}

variable "image" {
  description = "Container image with both binaries (the repo's Dockerfile), e.g. registry.example.com/quota:v1.2.3."
  type        = string
}

variable "ledger_region" {
  description = "Region that runs the reconciler and the Postgres ledger (a key of var.regions)."
  type        = string

  validation {
    condition     = contains(keys(var.regions), var.ledger_region)
    error_message = "ledger_region must be one of the regions."
  }
}

variable "ledger" {
  description = "Reconciler and Postgres settings; postgres.host = null deploys Postgres in the ledger region."
  type = object({
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
  default = {}
}

variable "labels" {
  description = "Extra labels on every object."
  type        = map(string)
  default     = {}
}

# Secrets: sensitive, no defaults. Delivered only through kubernetes_secret and QUOTA_* env vars;
# never in args, annotations or outputs.

variable "admin_token" {
  description = "Control-plane bearer token of the limiters (--admin-token / QUOTA_ADMIN_TOKEN)."
  type        = string
  sensitive   = true

  validation {
    condition     = length(var.admin_token) >= 16
    error_message = "admin_token must be at least 16 characters."
  }
}

variable "redis_passwords" {
  description = "Redis password per region (region name => password), for managed and in-cluster Redis alike."
  type        = map(string)
  sensitive   = true

  validation {
    condition     = alltrue([for n in keys(var.regions) : length(lookup(var.redis_passwords, n, "")) > 0])
    error_message = "redis_passwords needs a non-empty password for every region."
  }
}

variable "postgres_password" {
  description = "Password of the Postgres ledger user."
  type        = string
  sensitive   = true

  validation {
    condition     = length(var.postgres_password) > 0
    error_message = "postgres_password must not be empty."
  }
}
