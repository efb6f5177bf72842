variable "spec" {
  description = <<-EOT
    One region of the quota platform. Every resource name carries the region name, so two regions
    can share a cluster and namespace (staging, kind).
      name          region name, also the NATS cluster and gateway name
      weights       historical weights of ALL regions (name => weight), passed to --region-weights
      gateway_url   this region's NATS gateway address as the other regions reach it (nats://host:7222)
      peers         the OTHER regions' gateway addresses (name => nats://host:7222)
      images        quota, nats, redis images by digest (name@sha256:...), unless allow_image_tags
      zones         the zones the region's pods may use ([] = no zones): NATS one server per zone
                    (required anti-affinity), limiters spread over them (topology spread,
                    DoNotSchedule), Redis kept in them
      jetstream     cluster (NATS cluster name = region) and replicas of the usage stream and
                    the catalogue bucket when a process here creates them; default this region,
                    R3 with three NATS servers or more
      redis.endpoint  host:port of an operator-managed Redis (comma-separated seeds when
                      redis.cluster); null deploys a one-node Redis StatefulSet, AOF on a volume
      limiter.shutdown_delay_seconds  --shutdown-delay: on SIGTERM /readyz fails and the daemon
                      keeps serving this long; limiter.drain_seconds: then the time to finish
                      requests, return leases, send final reports. Grace = delay + drain + 5 s.
      gateway_source_ranges  CIDRs allowed to the gateway port: loadBalancerSourceRanges of the
                    gateway Service and ipBlocks of the NATS NetworkPolicy. Required for a
                    LoadBalancer or NodePort gateway; a /0 needs allow_gateway_from_anywhere.
      control_region  the region whose control-plane limiter writes the catalogue (null = this
                    one); the control-plane Deployment is created in that region only.
      reconciler_namespace  namespace of the reconciler when it connects to THIS region's NATS
                    (the ledger region), else null: the NATS NetworkPolicy admits it from there.
      nats_tls_secret  kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) in this namespace for
                    NATS client and gateway TLS; null = none, which a gateway reachable from
                    outside the cluster (LoadBalancer, NodePort) refuses unless
                    gateway_insecure_plaintext = true.
      usage_stream_max_bytes  --usage-stream-max-bytes (the stream's limit when a limiter creates it)
      network       who may reach the limiters' HTTP port (NetworkPolicy): pods in
                    api_client_namespaces (names) or in namespaces carrying all of
                    api_client_namespace_labels; both empty = this namespace only. Plus
                    prometheus_namespace (null = none) for /metrics. admin_client_namespaces:
                    who may reach the control plane (empty = this namespace only).
                    nats_monitor_namespaces: who may reach NATS :8222 (empty = nobody).
                    peer_namespaces: namespaces of the other regions' NATS pods when the
                    gateways are dialled inside one cluster. admin_client_pod_labels: the
                    labels an admin client pod must carry to reach the control plane (in
                    admin_client_namespaces, or this namespace). dns: where the pods resolve
                    names (egress on 53). otlp_namespaces / otlp_cidrs: where otlp_endpoint is
                    (egress to its port; one of them is required with otlp_endpoint).
      redis.cidrs   CIDRs of a managed Redis (redis.endpoint): the limiters' and the control
                    plane's egress to it; required with redis.endpoint.
      allow_unauthenticated_checks  permit an empty check_tokens (open /v1/allow)
      limiter.grpc_port  Envoy's rate limit service (--grpc-listen; 0 = off) with limiter.rls_config
                      (--rls-config, "catalog:" = the rules stored in the catalogue) and
                      limiter.rls_response_headers; exposed by the Service as port "grpc" and
                      reachable from the API client namespaces, as 8080 is
      limiter.hotkey_metrics  --hotkey-metrics: the fleet's N hottest keys on /metrics by rank
      otlp_endpoint  OTLP/HTTP collector for the limiters' and the control plane's traces
                      (--otlp-endpoint); null = none
  EOT
  type = object({
    name             = string
    namespace        = optional(string)
    create_namespace = optional(bool, true)
    zones            = optional(list(string), [])
    images = object({
      quota = string
      nats  = string
      redis = optional(string)
    })
    allow_image_tags            = optional(bool, false)
    image_pull_policy           = optional(string, "IfNotPresent")
    weights                     = map(number)
    gateway_url                 = string
    peers                       = map(string)
    gateway_service_type        = optional(string, "LoadBalancer")
    gateway_service_annotations = optional(map(string), {})
    gateway_source_ranges       = optional(list(string), [])
    allow_gateway_from_anywhere = optional(bool, false)
    labels                      = optional(map(string), {})
    control_region              = optional(string)
    reconciler_namespace        = optional(string)
    nats_tls_secret             = optional(string)
    gateway_insecure_plaintext  = optional(bool, false)
    usage_stream_max_bytes      = optional(number, 1073741824)
    jetstream = optional(object({
      cluster  = optional(string)
      replicas = optional(number)
    }), {})

    limiter = optional(object({
      replicas       = optional(number, 3)
      qos            = optional(string, "Guaranteed")
      cpu_request    = optional(string, "500m")
      cpu_limit      = optional(string, "2")
      memory_request = optional(string, "256Mi")
      memory_limit   = optional(string, "1Gi")
      log_level      = optional(string, "info")
      extra_args     = optional(list(string), [])

      grpc_port            = optional(number, 8081)
      rls_config           = optional(string, "catalog:")
      rls_response_headers = optional(bool, false)
      hotkey_metrics       = optional(number, 0)

      shutdown_delay_seconds = optional(number, 5)
      drain_seconds          = optional(number, 20)

      data_volume_size = optional(string, "1Gi")
      storage_class    = optional(string)
    }), {})

    redis = optional(object({
      endpoint       = optional(string)
      cidrs          = optional(list(string), [])
      tls            = optional(bool, false)
      cluster        = optional(bool, false)
      storage_size   = optional(string, "5Gi")
      storage_class  = optional(string)
      maxmemory      = optional(string, "1gb")
      allow_eviction = optional(bool, false)
    }), {})

    nats = optional(object({
      replicas          = optional(number, 3)
      storage_size      = optional(string, "10Gi")
      storage_class     = optional(string)
      max_file_store    = optional(string, "8G")
      lame_duck_seconds = optional(number, 30)
    }), {})

    network = optional(object({
      api_client_namespaces       = optional(list(string), [])
      api_client_namespace_labels = optional(map(string), {})
      prometheus_namespace        = optional(string)
      admin_client_namespaces     = optional(list(string), [])
      nats_monitor_namespaces     = optional(list(string), [])
      peer_namespaces             = optional(list(string), [])
      admin_client_pod_labels     = optional(map(string), { "quota.dev/admin-client" = "true" })
      otlp_namespaces             = optional(list(string), [])
      otlp_cidrs                  = optional(list(string), [])
      dns = optional(object({
        namespace  = optional(string, "kube-system")
        pod_labels = optional(map(string), { "k8s-app" = "kube-dns" })
        cidrs      = optional(list(string), [])
      }), {})
    }), {})

    allow_unauthenticated_checks = optional(bool, false)
    otlp_endpoint                = optional(string)
  })

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,19}$", var.spec.name))
    error_message = "spec.name must be a DNS label of at most 20 characters (lower case, digits, dashes)."
  }
  validation {
    condition = var.spec.allow_image_tags || alltrue([
      for i in [var.spec.images.quota, var.spec.images.nats, var.spec.images.redis] :
      i == null || can(regex("^[^@\\s]+@sha256:[0-9a-f]{64}$", i))
    ])
    error_message = "spec.images: every image must be pinned by digest (name@sha256:<64 hex>), unless spec.allow_image_tags."
  }
  validation {
    condition     = var.spec.redis.endpoint != null || var.spec.images.redis != null
    error_message = "spec.images.redis is needed for the in-cluster Redis (spec.redis.endpoint is null)."
  }
  validation {
    condition     = length(var.spec.zones) == 0 || var.spec.nats.replicas <= length(var.spec.zones)
    error_message = "spec.zones: one NATS server per zone is required, so nats.replicas must not exceed the number of zones."
  }
  validation {
    condition = contains(["Guaranteed", "Burstable"], var.spec.limiter.qos) && can(regex("^[1-9][0-9]*(Ki|Mi|Gi|Ti|k|M|G|T)?$", var.spec.limiter.memory_limit)) && (
      var.spec.limiter.qos == "Burstable" || can(regex("^[1-9][0-9]*$|^[1-9][0-9]*000m$", var.spec.limiter.cpu_limit))
    )
    error_message = "spec.limiter: qos Guaranteed or Burstable (Guaranteed needs whole CPUs as cpu_limit); memory_limit a whole quantity (1Gi, 512Mi, 2G)."
  }
  validation {
    condition     = var.spec.nats.lame_duck_seconds >= 5 && var.spec.nats.lame_duck_seconds <= 300 && floor(var.spec.nats.lame_duck_seconds) == var.spec.nats.lame_duck_seconds
    error_message = "spec.nats.lame_duck_seconds must be an integer in 5..300."
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
    condition     = var.spec.control_region == null || contains(keys(var.spec.weights), coalesce(var.spec.control_region, "-"))
    error_message = "spec.control_region must be one of the regions of spec.weights (or null: this region)."
  }
  validation {
    condition     = contains(["LoadBalancer", "NodePort", "ClusterIP"], var.spec.gateway_service_type)
    error_message = "spec.gateway_service_type must be LoadBalancer, NodePort or ClusterIP."
  }
  validation {
    condition     = var.spec.gateway_service_type == "ClusterIP" || length(var.spec.gateway_source_ranges) > 0
    error_message = "spec.gateway_source_ranges is empty but the gateway is exposed (LoadBalancer or NodePort): there is no open default."
  }
  validation {
    condition     = var.spec.gateway_service_type == "ClusterIP" || var.spec.nats_tls_secret != null || var.spec.gateway_insecure_plaintext
    error_message = "spec.nats_tls_secret is null but the gateway is reachable from outside the cluster (LoadBalancer or NodePort): its traffic (gossip, catalogue pushes, usage reports, the gateway password) would cross networks in plain text. Set spec.nats_tls_secret, or spec.gateway_insecure_plaintext = true if that is really meant."
  }
  validation {
    condition     = var.spec.redis.endpoint == null || length(var.spec.redis.cidrs) > 0
    error_message = "spec.redis.cidrs is empty but spec.redis.endpoint names a managed Redis: list its CIDRs (the limiters' egress NetworkPolicy admits those only)."
  }
  validation {
    condition     = var.spec.otlp_endpoint == null || length(var.spec.network.otlp_namespaces) + length(var.spec.network.otlp_cidrs) > 0
    error_message = "spec.otlp_endpoint is set but neither spec.network.otlp_namespaces nor otlp_cidrs says where it is (the egress NetworkPolicies admit those only)."
  }
  validation {
    condition     = length(var.spec.network.admin_client_pod_labels) > 0
    error_message = "spec.network.admin_client_pod_labels must not be empty (it would admit every pod of the admin namespaces)."
  }
  validation {
    condition     = alltrue([for c in concat(var.spec.redis.cidrs, var.spec.network.otlp_cidrs, var.spec.network.dns.cidrs) : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "spec.redis.cidrs, spec.network.otlp_cidrs, spec.network.dns.cidrs: every entry must be a CIDR."
  }
  validation {
    condition     = alltrue([for c in var.spec.gateway_source_ranges : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "spec.gateway_source_ranges: every entry must be a CIDR."
  }
  validation {
    condition     = var.spec.allow_gateway_from_anywhere || !anytrue([for c in var.spec.gateway_source_ranges : endswith(c, "/0")])
    error_message = "spec.gateway_source_ranges contains a /0 range: set spec.allow_gateway_from_anywhere = true if that is really meant."
  }
  validation {
    condition     = var.spec.usage_stream_max_bytes >= 1048576 && floor(var.spec.usage_stream_max_bytes) == var.spec.usage_stream_max_bytes
    error_message = "spec.usage_stream_max_bytes must be an integer of at least 1048576 (1 MiB)."
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
  description = "Control-plane bearer token (--admin-token), delivered as env QUOTA_ADMIN_TOKEN from the control plane's Secret only (control region); the limiters never get it."
  type        = string
  sensitive   = true
}

variable "memberlist_keys" {
  description = <<-EOT
    This region's memberlist encryption keys (--memberlist-key, from env QUOTA_MEMBERLIST_KEY of
    Secret quota-limiter-<region>): standard base64 of 16, 24 or 32 bytes each (openssl rand
    -base64 32). The first encrypts, all decrypt (rotation: [old, new], apply; [new, old], apply;
    [new], apply).
  EOT
  type        = list(string)
  sensitive   = true

  validation {
    condition = length(var.memberlist_keys) > 0 && alltrue([for k in var.memberlist_keys :
      can(regex("^([A-Za-z0-9+/]{22}==|[A-Za-z0-9+/]{32}|[A-Za-z0-9+/]{43}=)$", k))
    ])
    error_message = "memberlist_keys: at least one key, each standard base64 of 16, 24 or 32 bytes (e.g. openssl rand -base64 32)."
  }
}

variable "redis_password" {
  description = "Password of this region's Redis (managed endpoint or the in-cluster StatefulSet)."
  type        = string
  sensitive   = true
}

variable "nats_passwords" {
  description = <<-EOT
    NATS passwords by user: limiter-<region> for every region of spec.weights, control-plane,
    reconciler, gateway. Each of this region's limiter processes gets a password derived from
    limiter-<this region> (Secret quota-nats-<process>), the control plane control-plane (in
    spec.control_region only), the NATS servers the users that connect here (Secret
    nats-<region>); see nats.tf.
  EOT
  type        = map(string)
  sensitive   = true

  validation {
    condition = alltrue([
      for u in concat([for r in keys(var.spec.weights) : "limiter-${r}"], ["control-plane", "reconciler", "gateway"]) :
      length(lookup(var.nats_passwords, u, "")) >= 16
    ])
    error_message = "nats_passwords needs a password of at least 16 characters for limiter-<region> (every region), control-plane, reconciler and gateway."
  }
  validation {
    condition     = alltrue([for p in values(var.nats_passwords) : !strcontains(p, "\"") && !strcontains(p, "\\") && !strcontains(p, " ")])
    error_message = "nats_passwords: a password must not contain '\"', '\\' or spaces (nats-server reads it as a quoted config string)."
  }
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
