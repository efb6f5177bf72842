variable "regions" {
  description = <<-EOT
    The regions to deploy, by name. Each region is one Kubernetes cluster (or one namespace of a
    shared cluster), reached through the provider alias of its slot (providers.tf).
      slot         provider slot 0..4, unique; never change it for a live region (its resources
                   would be planned for the cluster of the new slot)
      weight       historical traffic weight, passed to every limiter's --region-weights
      kube         how to reach the cluster, explicitly: config_path AND context, or host +
                   cluster_ca_certificate + exec (e.g. aws eks get-token). No default: a region
                   never lands in whatever kube context is current.
      decommission true = step 1 of removing the region (deploy/RUNBOOK.md "Removing a region"):
                   its objects are destroyed through its own slot, the other regions forget it;
                   keep slot and kube until that apply is done, then delete the entry
      namespace    default quota-<region>; unique across regions
      zones        the cluster's zones (topology.kubernetes.io/zone values) the region's pods
                   may use; [] = the cluster has no zones (spread by node only). With zones, the
                   NATS servers are required to be in different zones (nats.replicas <= zones),
                   the limiters are spread over them (maxSkew 1, DoNotSchedule)
      gateway_url  nats://host:7222 at which the OTHER regions reach this region's NATS gateway
                   (a DNS name you point at the nats-<region>-gateway LoadBalancer)
      gateway_service_type  LoadBalancer (default; needs var.gateway_source_ranges), NodePort
                   (the same), or ClusterIP (regions in one cluster dial each other in-cluster)
      redis        endpoint = managed Redis host:port (or comma-separated cluster seeds with
                   cluster = true), with cidrs = its addresses (required with endpoint: the
                   limiters' egress NetworkPolicy admits those only); null deploys a one-node
                   Redis StatefulSet (AOF on a volume) in the region. allow_eviction: whether its PodDisruptionBudget lets a drain
                   evict it (false: a drain waits until you delete the pod yourself)
      limiter      replicas (the number of limiter processes: one single-replica StatefulSet
                   limiter-<region>-<i> each, with its own NATS user), QoS and resources (each pod
                   keeps its data dir, catalogue cache and usage spool, on its own volume)
      nats         NATS servers per region (3 for JetStream R3), volume, lame-duck duration
  EOT
  type = map(object({
    slot   = number
    weight = number
    kube = object({
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
    })
    decommission                = optional(bool, false)
    namespace                   = optional(string)
    create_namespace            = optional(bool, true)
    zones                       = optional(list(string), [])
    gateway_url                 = string
    gateway_service_type        = optional(string, "LoadBalancer")
    gateway_service_annotations = optional(map(string), {})
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
    limiter = optional(object({
      replicas = optional(number, 3)
      # Guaranteed: requests = limits = cpu_limit (whole CPUs, so that a kubelet with the static
      # CPU manager policy gives the pod exclusive cores) and memory_limit. Burstable: the
      # requests below. GOMEMLIMIT is 90 % of memory_limit either way.
      qos            = optional(string, "Guaranteed")
      cpu_request    = optional(string, "500m")
      cpu_limit      = optional(string, "2")
      memory_request = optional(string, "256Mi")
      memory_limit   = optional(string, "1Gi")
      log_level      = optional(string, "info")
      extra_args     = optional(list(string), [])
      # Envoy's rate limit service (gRPC ShouldRateLimit) on grpc_port (0: off), with the rules
      # stored in the catalogue (rls_config "catalog:", written with PUT /v1/rls/{domain} on the
      # control plane and pushed to every region) or a path in the image; rls_response_headers
      # adds the RateLimit fields to its answers. The Service exposes the port as "grpc".
      grpc_port            = optional(number, 8081)
      rls_config           = optional(string, "catalog:")
      rls_response_headers = optional(bool, false)
      # The fleet's hottest keys on /metrics by rank (--hotkey-metrics, 0..100; no key in labels).
      hotkey_metrics = optional(number, 0)
      # Graceful stop: on SIGTERM /readyz fails and the daemon keeps serving for
      # shutdown_delay_seconds (--shutdown-delay), then has drain_seconds to finish requests,
      # return leases and send final usage reports. Grace period = delay + drain + 5.
      shutdown_delay_seconds = optional(number, 5)
      drain_seconds          = optional(number, 20)
      # The per-pod volume of --data-dir (catalogue cache, usage spool).
      data_volume_size = optional(string, "1Gi")
      storage_class    = optional(string)
    }), {})
    nats = optional(object({
      replicas       = optional(number, 3)
      storage_size   = optional(string, "10Gi")
      storage_class  = optional(string)
      max_file_store = optional(string, "8G")
      # On stop (preStop) a server enters lame-duck mode: it stops accepting clients and moves
      # its clients away over this many seconds before it exits.
      lame_duck_seconds = optional(number, 30)
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
    condition = alltrue([for r in values(var.regions) :
      (r.kube.host == null && r.kube.config_path != null && r.kube.context != null && r.kube.cluster_ca_certificate == null && r.kube.exec == null) ||
      (r.kube.host != null && r.kube.config_path == null && r.kube.context == null && r.kube.cluster_ca_certificate != null && r.kube.exec != null)
    ])
    error_message = "regions: kube must name either a kubeconfig file and a context (config_path + context) or a cluster (host + cluster_ca_certificate + exec), not both and nothing less: no region may fall back to the current kube context."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : r.kube.host == null || startswith(coalesce(r.kube.host, "-"), "https://")])
    error_message = "regions: kube.host must be an https:// URL."
  }
  validation {
    condition     = anytrue([for r in values(var.regions) : !r.decommission])
    error_message = "regions: at least one region must not be decommissioned."
  }
  validation {
    condition = alltrue([for n, r in var.regions :
      can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", coalesce(r.namespace, "quota-${n}")))
    ])
    error_message = "regions: namespace must be a DNS label."
  }
  validation {
    condition     = length(distinct([for n, r in var.regions : coalesce(r.namespace, "quota-${n}")])) == length(var.regions)
    error_message = "regions: every region needs its own namespace (default quota-<region>)."
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
  validation {
    condition     = alltrue([for r in values(var.regions) : r.redis.endpoint == null || length(r.redis.cidrs) > 0])
    error_message = "regions: redis.cidrs is empty but redis.endpoint names a managed Redis: list its CIDRs (e.g. the subnets of its nodes); the limiters' egress NetworkPolicy admits those only."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : alltrue([for c in r.redis.cidrs : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])])
    error_message = "regions: every entry of redis.cidrs must be a CIDR."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : contains(["LoadBalancer", "NodePort", "ClusterIP"], r.gateway_service_type)])
    error_message = "regions: gateway_service_type must be LoadBalancer, NodePort or ClusterIP."
  }
  validation {
    condition = alltrue([for r in values(var.regions) :
      length(distinct(r.zones)) == length(r.zones) && alltrue([for z in r.zones : length(z) > 0]) &&
      (length(r.zones) == 0 || r.nats.replicas <= length(r.zones))
    ])
    error_message = "regions: zones must be distinct, non-empty names, and at least as many as nats.replicas (one NATS server per zone, required)."
  }
  validation {
    condition = alltrue([for r in values(var.regions) :
      r.limiter.replicas >= 1 && floor(r.limiter.replicas) == r.limiter.replicas &&
      r.nats.replicas >= 1 && floor(r.nats.replicas) == r.nats.replicas
    ])
    error_message = "regions: limiter.replicas and nats.replicas must be integers of at least 1."
  }
  validation {
    condition = alltrue([for r in values(var.regions) :
      contains(["Guaranteed", "Burstable"], r.limiter.qos) &&
      (r.limiter.qos == "Burstable" || can(regex("^[1-9][0-9]*$|^[1-9][0-9]*000m$", r.limiter.cpu_limit)))
    ])
    error_message = "regions: limiter.qos must be Guaranteed or Burstable; Guaranteed needs a whole number of CPUs as cpu_limit (e.g. \"2\" or \"2000m\")."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : can(regex("^[1-9][0-9]*(Ki|Mi|Gi|Ti|k|M|G|T)?$", r.limiter.memory_limit))])
    error_message = "regions: limiter.memory_limit must be a whole quantity such as 1Gi, 512Mi or 2G (GOMEMLIMIT is derived from it)."
  }
  validation {
    condition = alltrue([for r in values(var.regions) :
      r.nats.lame_duck_seconds >= 5 && r.nats.lame_duck_seconds <= 300 && floor(r.nats.lame_duck_seconds) == r.nats.lame_duck_seconds
    ])
    error_message = "regions: nats.lame_duck_seconds must be an integer in 5..300."
  }
  validation {
    condition = alltrue([for r in values(var.regions) :
      r.limiter.shutdown_delay_seconds >= 0 && r.limiter.shutdown_delay_seconds <= 300 && floor(r.limiter.shutdown_delay_seconds) == r.limiter.shutdown_delay_seconds
    ])
    error_message = "regions: limiter.shutdown_delay_seconds must be an integer in 0..300."
  }
  validation {
    condition = alltrue([for r in values(var.regions) :
      floor(r.limiter.grpc_port) == r.limiter.grpc_port && (r.limiter.grpc_port == 0 || (r.limiter.grpc_port >= 1024 && r.limiter.grpc_port <= 65535 && !contains([8080, 7946], r.limiter.grpc_port)))
    ])
    error_message = "regions: limiter.grpc_port must be 0 (off) or a port in 1024..65535 other than 8080 (HTTP) and 7946 (memberlist)."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : r.limiter.rls_config != ""])
    error_message = "regions: limiter.rls_config must be \"catalog:\" or a path in the image."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : r.limiter.hotkey_metrics >= 0 && r.limiter.hotkey_metrics <= 100 && floor(r.limiter.hotkey_metrics) == r.limiter.hotkey_metrics])
    error_message = "regions: limiter.hotkey_metrics must be an integer in 0..100."
  }
  validation {
    condition     = alltrue([for r in values(var.regions) : r.limiter.drain_seconds >= 10 && floor(r.limiter.drain_seconds) == r.limiter.drain_seconds])
    error_message = "regions: limiter.drain_seconds must be an integer of at least 10 (the daemon's HTTP write timeout)."
  }
}

variable "images" {
  description = <<-EOT
    Container images, by digest (name@sha256:<64 hex>), so that what runs is what was reviewed
    and every pod of a set runs the same bytes:
      quota     the repo's Dockerfile (both binaries)
      nats      nats-server >= 2.10, a variant with nats-server on PATH (e.g. nats:2.10-alpine):
                the preStop hook runs `nats-server --signal ldm=...`
      redis     redis >= 7 (needed when a region runs the in-cluster Redis)
      postgres  postgres >= 15 (needed with ledger.postgres.development_in_cluster; its psql
                reads the password with \getenv)
    Tags are refused unless allow_image_tags = true (a kind cluster with locally built images).
  EOT
  type = object({
    quota    = string
    nats     = string
    redis    = optional(string)
    postgres = optional(string)
  })

  validation {
    condition = var.allow_image_tags || alltrue([
      for i in [var.images.quota, var.images.nats, var.images.redis, var.images.postgres] :
      i == null || can(regex("^[^@\\s]+@sha256:[0-9a-f]{64}$", i))
    ])
    error_message = "images: every image must be pinned by digest (name@sha256:<64 hex digits>); set allow_image_tags = true to accept tags."
  }
  validation {
    condition     = var.images.redis != null || alltrue([for r in values(var.regions) : r.decommission || r.redis.endpoint != null])
    error_message = "images.redis is needed: a region runs the in-cluster Redis (regions.<r>.redis.endpoint is null)."
  }
  validation {
    condition     = var.images.postgres != null || !var.ledger.postgres.development_in_cluster
    error_message = "images.postgres is needed with ledger.postgres.development_in_cluster = true."
  }
}

variable "allow_image_tags" {
  description = "Accept images by tag instead of digest (development only, e.g. kind with locally built images). Default false."
  type        = bool
  default     = false
}

variable "ledger_region" {
  description = "Region that runs the reconciler and the Postgres ledger, and whose NATS cluster holds the usage stream and the catalogue bucket (a key of var.regions, not decommissioned). Moving it: deploy/RUNBOOK.md \"Moving the ledger region\"."
  type        = string

  validation {
    condition     = contains(keys(var.regions), var.ledger_region) && !try(var.regions[var.ledger_region].decommission, false)
    error_message = "ledger_region must be one of the regions, and not one being decommissioned."
  }
}

variable "ledger" {
  description = <<-EOT
    Reconciler and Postgres settings.
    postgres: production = a managed or operator-run Postgres with backups (RDS/Aurora, Cloud
    SQL, CloudNativePG, ...): host, port, user, database, and TLS: sslmode (default verify-full)
    with ca_secret, a Secret in the ledger region's namespace whose key ca.crt is the CA of the
    server's certificate (sslrootcert; null = the image's system roots, which do not include
    e.g. the RDS CAs), and cidrs: the addresses of host (required with host: the reconciler's
    egress NetworkPolicy admits those only). Development only: host = null with development_in_cluster = true deploys a
    one-instance Postgres StatefulSet (no replica, no backups, sslmode disable).
    usage_stream_max_bytes is the byte limit of the JetStream usage stream (QUOTA_USAGE) when a
    limiter or the reconciler creates it (--usage-stream-max-bytes, --stream-max-bytes; an
    existing stream is never changed). Keep it well below regions.<ledger>.nats.max_file_store:
    the stream's replicas live on the ledger region's NATS servers.
  EOT
  type = object({
    usage_stream_max_bytes = optional(number, 1073741824)
    reconciler = optional(object({
      replicas       = optional(number, 1)
      cpu_request    = optional(string, "250m")
      cpu_limit      = optional(string, "1")
      memory_request = optional(string, "256Mi")
      memory_limit   = optional(string, "1Gi")
      # As for the limiter: --shutdown-delay, then drain_seconds (the reconciler gives its
      # consumer, pools and NATS 30 s to stop after the delay); grace = delay + drain + 5.
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
  })
  default = {}

  validation {
    condition     = (var.ledger.postgres.host == null) == var.ledger.postgres.development_in_cluster
    error_message = "ledger.postgres: set host (a managed or operator-run Postgres with backups: the production path), or, for development only, leave host null and set development_in_cluster = true (one instance, no backups)."
  }
  validation {
    condition     = var.ledger.postgres.sslmode == null || contains(["disable", "allow", "prefer", "require", "verify-ca", "verify-full"], coalesce(var.ledger.postgres.sslmode, "-"))
    error_message = "ledger.postgres.sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full (default verify-full for an external Postgres)."
  }
  validation {
    condition     = var.ledger.postgres.host == null || length(var.ledger.postgres.cidrs) > 0
    error_message = "ledger.postgres.cidrs is empty but ledger.postgres.host names an external Postgres: list its CIDRs (e.g. the subnets of the database); the reconciler's egress NetworkPolicy admits those only."
  }
  validation {
    condition     = alltrue([for c in var.ledger.postgres.cidrs : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "ledger.postgres.cidrs: every entry must be a CIDR."
  }
  validation {
    condition     = var.ledger.postgres.ca_secret == null || var.ledger.postgres.host != null
    error_message = "ledger.postgres.ca_secret is for an external Postgres (host set)."
  }
  validation {
    condition     = can(regex("^[1-9][0-9]*(Ki|Mi|Gi|Ti|k|M|G|T)?$", var.ledger.reconciler.memory_limit))
    error_message = "ledger: reconciler.memory_limit must be a whole quantity such as 1Gi or 512Mi (GOMEMLIMIT is derived from it)."
  }
  validation {
    condition     = var.ledger.reconciler.shutdown_delay_seconds >= 0 && var.ledger.reconciler.shutdown_delay_seconds <= 300 && floor(var.ledger.reconciler.shutdown_delay_seconds) == var.ledger.reconciler.shutdown_delay_seconds
    error_message = "ledger: reconciler.shutdown_delay_seconds must be an integer in 0..300."
  }
  validation {
    condition     = var.ledger.reconciler.drain_seconds >= 10 && floor(var.ledger.reconciler.drain_seconds) == var.ledger.reconciler.drain_seconds
    error_message = "ledger: reconciler.drain_seconds must be an integer of at least 10."
  }
  validation {
    condition     = var.ledger.usage_stream_max_bytes >= 1048576 && floor(var.ledger.usage_stream_max_bytes) == var.ledger.usage_stream_max_bytes
    error_message = "ledger: usage_stream_max_bytes must be an integer of at least 1048576 (1 MiB)."
  }
}

variable "control_region" {
  description = <<-EOT
    Region (a key of var.regions) that runs the control-plane Deployment: one regional-limiter
    with --control-plane and NATS user control-plane, the only process that writes the
    catalogue (PUT/DELETE /v1/limits, /v1/keys, /v1/costs), behind its own Service
    control-plane-<region>:8080. null = var.ledger_region.
  EOT
  type        = string
  default     = null

  validation {
    condition     = var.control_region == null || (contains(keys(var.regions), coalesce(var.control_region, "-")) && !try(var.regions[coalesce(var.control_region, "-")].decommission, false))
    error_message = "control_region must be one of the regions, not one being decommissioned (or null: the ledger region)."
  }
}

variable "labels" {
  description = "Extra labels on every object."
  type        = map(string)
  default     = {}
}

# Network access (NetworkPolicies, see deploy/README.md "HTTP auth and network access"). Namespaces
# are matched by their kubernetes.io/metadata.name label (set by Kubernetes >= 1.21).

variable "api_client_namespaces" {
  description = <<-EOT
    Namespaces whose pods may reach the limiters' HTTP port (8080: /v1/allow, control plane,
    /metrics), in every region's cluster. With api_client_namespace_labels also empty, only pods in
    the region's own namespace may.
  EOT
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.api_client_namespaces : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", n))])
    error_message = "api_client_namespaces: namespace names are DNS labels."
  }
}

variable "api_client_namespace_labels" {
  description = "Namespace labels (a namespaceSelector's matchLabels): namespaces carrying all of them may also reach the limiters' HTTP port. Empty = none by labels."
  type        = map(string)
  default     = {}
}

variable "prometheus_namespace" {
  description = "Namespace of the Prometheus that scrapes /metrics of limiters (:8080) and reconciler (:8081); null = no scraping from another namespace."
  type        = string
  default     = null

  validation {
    condition     = var.prometheus_namespace == null || can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.prometheus_namespace))
    error_message = "prometheus_namespace must be a namespace name (DNS label) or null."
  }
}

variable "otlp_endpoint" {
  description = "OTLP/HTTP collector URL (e.g. http://otel-collector.observability:4318) that every limiter, the control plane and the reconciler send traces of their slow work to (--otlp-endpoint); null = no tracing."
  type        = string
  default     = null

  validation {
    condition     = var.otlp_endpoint == null || can(regex("^https?://[^/?#]+(/[^?#]*)?$", var.otlp_endpoint))
    error_message = "otlp_endpoint must be an http:// or https:// URL or null."
  }
}

variable "billing_client_namespaces" {
  description = "Namespaces whose pods may reach the reconciler's port (8081: /v1/usage billing API). Empty = none (Prometheus still may, if prometheus_namespace is set)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.billing_client_namespaces : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", n))])
    error_message = "billing_client_namespaces: namespace names are DNS labels."
  }
}

variable "admin_client_namespaces" {
  description = "Namespaces whose pods may reach the control-plane limiter's HTTP port (8080: catalogue writes and reads with the admin token). Empty = the control region's own namespace only."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.admin_client_namespaces : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", n))])
    error_message = "admin_client_namespaces: namespace names are DNS labels."
  }
}

variable "admin_client_pod_labels" {
  description = <<-EOT
    Labels an admin client's pod must carry (all of them) to reach the control plane's HTTP port,
    in admin_client_namespaces (or the control region's namespace when that is empty): no whole
    namespace reaches the admin API. Default quota.dev/admin-client = "true".
  EOT
  type        = map(string)
  default     = { "quota.dev/admin-client" = "true" }

  validation {
    condition     = length(var.admin_client_pod_labels) > 0
    error_message = "admin_client_pod_labels must not be empty (it would admit every pod of the admin namespaces)."
  }
}

variable "cluster_dns" {
  description = <<-EOT
    Where the pods resolve names, for the egress NetworkPolicies (port 53, UDP and TCP): the
    cluster DNS pods (namespace, pod labels; default kube-system, k8s-app = kube-dns, which
    CoreDNS carries too), plus cidrs (e.g. a NodeLocal DNSCache's 169.254.20.10/32). The same in
    every region's cluster.
  EOT
  type = object({
    namespace  = optional(string, "kube-system")
    pod_labels = optional(map(string), { "k8s-app" = "kube-dns" })
    cidrs      = optional(list(string), [])
  })
  default  = {}
  nullable = false

  validation {
    condition     = alltrue([for c in var.cluster_dns.cidrs : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "cluster_dns.cidrs: every entry must be a CIDR."
  }
}

variable "otlp_egress" {
  description = "Where otlp_endpoint is, for the egress NetworkPolicies of the limiters, the control plane and the reconciler (the URL's port only): namespaces (names) and/or cidrs. One of them is required with otlp_endpoint."
  type = object({
    namespaces = optional(list(string), [])
    cidrs      = optional(list(string), [])
  })
  default  = {}
  nullable = false

  validation {
    condition     = var.otlp_endpoint == null || length(var.otlp_egress.namespaces) + length(var.otlp_egress.cidrs) > 0
    error_message = "otlp_egress is empty but otlp_endpoint is set: name the collector's namespaces or CIDRs (the egress NetworkPolicies admit those only)."
  }
  validation {
    condition     = alltrue([for c in var.otlp_egress.cidrs : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "otlp_egress.cidrs: every entry must be a CIDR."
  }
}

variable "nats_monitor_namespaces" {
  description = "Namespaces whose pods may reach the NATS monitoring port (8222: /varz, /jsz, /gatewayz; e.g. a prometheus-nats-exporter or NATS surveyor). Empty = none (kubelet probes need no rule)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.nats_monitor_namespaces : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", n))])
    error_message = "nats_monitor_namespaces: namespace names are DNS labels."
  }
}

variable "gateway_source_ranges" {
  description = <<-EOT
    CIDRs that may reach the NATS gateway port (7222) of every region: the egress addresses (NAT
    gateways) of the other regions' clusters. Set as the gateway Service's
    loadBalancerSourceRanges and as ipBlocks of the NATS NetworkPolicy. Required (non-empty) when
    any region exposes its gateway (gateway_service_type LoadBalancer or NodePort); a /0 range
    (0.0.0.0/0, ::/0) is refused unless allow_gateway_from_anywhere = true.
  EOT
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.gateway_source_ranges : can(cidrhost(c, 0)) && can(regex("/[0-9]+$", c))])
    error_message = "gateway_source_ranges: every entry must be a CIDR (e.g. 203.0.113.0/24)."
  }
  validation {
    condition = length(var.gateway_source_ranges) > 0 || alltrue([
      for r in values(var.regions) : r.gateway_service_type == "ClusterIP"
    ])
    error_message = "gateway_source_ranges is empty but a region exposes its NATS gateway (gateway_service_type LoadBalancer or NodePort): list the other regions' egress CIDRs. There is no open default."
  }
  validation {
    condition     = var.allow_gateway_from_anywhere || !anytrue([for c in var.gateway_source_ranges : endswith(c, "/0")])
    error_message = "gateway_source_ranges contains a /0 range (the whole Internet): set allow_gateway_from_anywhere = true if that is really meant."
  }
}

variable "allow_gateway_from_anywhere" {
  description = "Permit a /0 range (0.0.0.0/0, ::/0) in gateway_source_ranges, i.e. a NATS gateway open to the Internet (still authenticated by the gateway password). Default false."
  type        = bool
  default     = false
}

variable "nats_tls_secret" {
  description = <<-EOT
    Name of a kubernetes.io/tls Secret (keys tls.crt, tls.key, ca.crt; e.g. from cert-manager)
    that exists in every region's namespace. null = no TLS, refused while a region's gateway is
    reachable from outside its cluster (gateway_service_type LoadBalancer or NodePort) unless
    nats_gateway_insecure_plaintext = true. When set, the NATS servers serve TLS
    to clients and on the gateways with it (the template's tls blocks), and the limiters, the
    control plane and the reconciler get only its ca.crt (--nats-tls-ca). The certificate must
    name nats-<region>.<namespace>.svc.cluster.local and the host of the region's gateway_url,
    allow server and client auth (gateways verify each other), and be signed by a CA whose
    ca.crt every region shares.
  EOT
  type        = string
  default     = null

  validation {
    condition     = var.nats_tls_secret == null || can(regex("^[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?$", coalesce(var.nats_tls_secret, "-")))
    error_message = "nats_tls_secret must be a Secret name (DNS subdomain) or null."
  }
  validation {
    condition = var.nats_tls_secret != null || var.nats_gateway_insecure_plaintext || alltrue([
      for r in values(var.regions) : r.decommission || r.gateway_service_type == "ClusterIP"
    ])
    error_message = "nats_tls_secret is null but a region's NATS gateway is reachable from outside its cluster (gateway_service_type LoadBalancer or NodePort): gossip, catalogue pushes, usage reports and the gateway password would cross networks in plain text. Set nats_tls_secret (a kubernetes.io/tls Secret in every region's namespace), or nats_gateway_insecure_plaintext = true if that is really meant."
  }
}

variable "nats_gateway_insecure_plaintext" {
  description = "Permit NATS gateways reachable from outside their cluster (LoadBalancer, NodePort) without TLS (nats_tls_secret null). Default false."
  type        = bool
  default     = false
}

variable "allow_unauthenticated_checks" {
  description = "Serve POST /v1/allow and /v1/allow/batch without a bearer token. Must be set explicitly to deploy with an empty check_tokens; refused together with check tokens."
  type        = bool
  default     = false
}

# Secrets: sensitive, no defaults (the token lists below default to empty, which validation
# refuses for check_tokens). Delivered only through kubernetes_secret and QUOTA_* env vars;
# never in args, annotations or outputs.

variable "admin_token" {
  description = "Control-plane bearer token (--admin-token / QUOTA_ADMIN_TOKEN): catalogue writes. Only the control-plane pod gets it (Secret quota-control-plane-<control region>); the limiters do not."
  type        = string
  sensitive   = true

  validation {
    condition     = length(var.admin_token) >= 16
    error_message = "admin_token must be at least 16 characters."
  }
}

variable "memberlist_keys" {
  description = <<-EOT
    Memberlist encryption keys per region (region name => keys): the limiters of a region get
    theirs as --memberlist-key (env QUOTA_MEMBERLIST_KEY from Secret quota-limiter-<region>), so
    that only holders of the key join the region's membership (and count towards its lease caps).
    Each key is standard base64 of 16, 24 or 32 bytes (openssl rand -base64 32); every region
    needs its own. The first key encrypts, all decrypt: rotate with [old, new], apply; [new,
    old], apply; [new], apply.
  EOT
  type        = map(list(string))
  sensitive   = true

  validation {
    condition     = alltrue([for n, r in var.regions : r.decommission || length(lookup(var.memberlist_keys, n, [])) > 0])
    error_message = "memberlist_keys needs at least one key for every region (openssl rand -base64 32)."
  }
  validation {
    condition = alltrue([for keys in values(var.memberlist_keys) : alltrue([for k in keys :
      can(regex("^([A-Za-z0-9+/]{22}==|[A-Za-z0-9+/]{32}|[A-Za-z0-9+/]{43}=)$", k))
    ])])
    error_message = "memberlist_keys: every key must be standard base64 of 16, 24 or 32 bytes (e.g. openssl rand -base64 32)."
  }
  validation {
    condition     = length(distinct(flatten(values(var.memberlist_keys)))) == length(flatten(values(var.memberlist_keys)))
    error_message = "memberlist_keys: a key is listed twice (in one region or two): every region needs its own."
  }
}

variable "redis_passwords" {
  description = "Redis password per region (region name => password), for managed and in-cluster Redis alike; printable ASCII. Needed for every region not being decommissioned."
  type        = map(string)
  sensitive   = true

  validation {
    condition     = alltrue([for n, r in var.regions : r.decommission || length(lookup(var.redis_passwords, n, "")) > 0])
    error_message = "redis_passwords needs a non-empty password for every region."
  }
  validation {
    condition     = alltrue([for p in values(var.redis_passwords) : can(regex("^[\\x20-\\x7e]*$", p))])
    error_message = "redis_passwords: printable ASCII only (the in-cluster Redis reads it from a config file)."
  }
}

variable "nats_passwords" {
  description = <<-EOT
    NATS passwords by user (deploy/README.md "NATS users, passwords and TLS"): limiter-<region> for every
    region (a decommissioned region's may stay until its entry is removed), control-plane,
    reconciler, and gateway (the gateways between regions authenticate
    with it). Every key is required, no other is accepted, and no two users
    may share a password. Each is 16..256 bytes of printable ASCII without spaces, '"' or '\'
    (e.g. openssl rand -hex 32). limiter-<region> is the root of that region's limiter processes'
    passwords (user limiter-<region>.limiter-<region>-<i>, password SHA-256 of the process name
    and the root): each process gets only its own, the root reaches no Secret. The control plane
    and the reconciler get their own (env QUOTA_NATS_PASSWORD from their Secret); the NATS
    servers get theirs from Secret nats-<region> (env QUOTA_NATS_PASSWORD_<USER>).
  EOT
  type        = map(string)
  sensitive   = true

  validation {
    condition = alltrue([
      for u in concat([for n, r in var.regions : "limiter-${n}" if !r.decommission], ["control-plane", "reconciler", "gateway"]) :
      contains(keys(var.nats_passwords), u)
    ])
    error_message = "nats_passwords needs a password for every user: limiter-<region> for each region, control-plane, reconciler and gateway."
  }
  validation {
    condition = alltrue([
      for u in keys(var.nats_passwords) :
      contains(concat([for r in keys(var.regions) : "limiter-${r}"], ["control-plane", "reconciler", "gateway"]), u)
    ])
    error_message = "nats_passwords has a key that is no NATS user (users: limiter-<region> for each region, control-plane, reconciler, gateway)."
  }
  validation {
    condition     = alltrue([for p in values(var.nats_passwords) : can(regex("^[\\x21\\x23-\\x5b\\x5d-\\x7e]{16,256}$", p))])
    error_message = "nats_passwords: every password must be 16..256 bytes of printable ASCII without spaces, '\"' or '\\'."
  }
  validation {
    condition     = length(distinct(values(var.nats_passwords))) == length(var.nats_passwords)
    error_message = "nats_passwords: two users share a password (each role must be its own secret)."
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

# Bearer token lists, per region (region name => tokens): a region's limiters accept only its own
# tokens, so a token taken from one region's pods or clients works in no other region. A list, so
# that a token can be rotated: add the new one, apply (the pods roll), move the clients, remove the
# old one, apply. Each token: 16..256 bytes of printable ASCII without ',' (the lists are
# comma-joined into one Secret value), listed once across all regions. Generate them, e.g.
# openssl rand -hex 32.

variable "check_tokens" {
  description = "Bearer tokens of the check API (POST /v1/allow, /v1/allow/batch) per region (region name => tokens), env QUOTA_CHECK_TOKEN of that region's limiters. Every region not being decommissioned needs at least one, unless allow_unauthenticated_checks = true."
  type        = map(list(string))
  default     = {}
  sensitive   = true

  validation {
    condition     = var.allow_unauthenticated_checks || alltrue([for n, r in var.regions : r.decommission || length(lookup(var.check_tokens, n, [])) > 0])
    error_message = "check_tokens needs at least one token for every region (region name => tokens), or set allow_unauthenticated_checks = true to serve /v1/allow without authentication."
  }
  validation {
    condition     = !(var.allow_unauthenticated_checks && length(flatten(values(var.check_tokens))) > 0)
    error_message = "check_tokens is set but so is allow_unauthenticated_checks = true (the limiters would require a token all the same): set one or the other."
  }
  validation {
    condition     = alltrue([for t in flatten(values(var.check_tokens)) : can(regex("^[\\x21-\\x2b\\x2d-\\x7e]{16,256}$", t))]) && length(distinct(flatten(values(var.check_tokens)))) == length(flatten(values(var.check_tokens)))
    error_message = "check_tokens: every token must be 16..256 bytes of printable ASCII without ',' or spaces, and listed once (in one region or two: every region needs its own)."
  }
}

variable "read_tokens" {
  description = "Bearer tokens for reads (GET /v1/keys/{key}, /debug/*, history) per region (region name => tokens), env QUOTA_READ_TOKEN of that region's limiters; the admin token also reads. A region without an entry: only the admin token reads there."
  type        = map(list(string))
  default     = {}
  sensitive   = true

  validation {
    condition     = alltrue([for t in flatten(values(var.read_tokens)) : can(regex("^[\\x21-\\x2b\\x2d-\\x7e]{16,256}$", t))]) && length(distinct(flatten(values(var.read_tokens)))) == length(flatten(values(var.read_tokens)))
    error_message = "read_tokens: every token must be 16..256 bytes of printable ASCII without ',' or spaces, and listed once (in one region or two: every region needs its own)."
  }
}

variable "billing_tokens" {
  description = <<-EOT
    Bearer tokens of the reconciler's billing API (/v1/usage), env QUOTA_BILLING_TOKEN. An entry
    is TOKEN (reads every key) or prefix:PREFIX=TOKEN (reads keys starting with PREFIX). Empty =
    the billing API answers 503.
  EOT
  type        = list(string)
  default     = []
  sensitive   = true

  validation {
    condition = alltrue([for t in var.billing_tokens :
      can(regex("^prefix:[\\x21-\\x2b\\x2d-\\x3c\\x3e-\\x7e]{1,256}=[\\x21-\\x2b\\x2d-\\x7e]{16,256}$", t)) ||
      (!startswith(t, "prefix:") && can(regex("^[\\x21-\\x2b\\x2d-\\x7e]{16,256}$", t)))
    ])
    error_message = "billing_tokens: every entry must be TOKEN or prefix:PREFIX=TOKEN, TOKEN 16..256 bytes of printable ASCII without ',' (not starting with \"prefix:\"), PREFIX printable ASCII without ',' and '='."
  }
  validation {
    condition     = length(distinct([for t in var.billing_tokens : startswith(t, "prefix:") ? try(regex("^prefix:[^=]*=(.*)$", t)[0], t) : t])) == length(var.billing_tokens)
    error_message = "billing_tokens: the same token is listed twice."
  }
}

variable "monitoring" {
  description = <<-EOT
    Optional monitoring objects (deploy/README.md "Monitoring"), all off by default. PodMonitors
    and the PrometheusRule need the Prometheus Operator's CRDs in the clusters concerned (plan
    fails without them); the dashboards are plain ConfigMaps.
      pod_monitors     per region, through its own slot: PodMonitors (monitoring.coreos.com/v1)
                       quota-limiter-<r>, and quota-control-plane-<r> (control region),
                       quota-reconciler-<r> (ledger region), scraping /metrics on port http and
                       setting source_region from the pod label quota.dev/region. Needs
                       prometheus_namespace (the NetworkPolicies admit only that namespace).
      prometheus_rule  PrometheusRule "quota" with the groups of deploy/prometheus/quota-rules.yaml,
                       ONCE, in the ledger region's cluster: the Prometheus there (or the ruler
                       that sees every region's series) evaluates it; one per region would fire
                       every alert once per region.
      dashboards       ConfigMaps quota-dashboard-fleet and quota-dashboard-billing with
                       deploy/grafana/fleet.json and billing.json, ONCE, in the ledger region's
                       cluster, labelled <dashboard_label> = "1" (the label Grafana's dashboard
                       sidecar watches; kube-prometheus-stack: grafana_dashboard).
      namespace        where these objects go (must exist); null = the region's own namespace
      labels           extra labels on these objects, e.g. { release = "kube-prometheus-stack" }
                       for the operator's podMonitorSelector / ruleSelector
  EOT
  type = object({
    pod_monitors    = optional(bool, false)
    prometheus_rule = optional(bool, false)
    dashboards      = optional(bool, false)
    dashboard_label = optional(string, "grafana_dashboard")
    namespace       = optional(string)
    labels          = optional(map(string), {})
  })
  default  = {}
  nullable = false

  validation {
    condition     = can(regex("^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$", var.monitoring.dashboard_label))
    error_message = "monitoring.dashboard_label must be a Kubernetes label key (e.g. grafana_dashboard)."
  }
  validation {
    condition     = var.monitoring.namespace == null || can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", coalesce(var.monitoring.namespace, "-")))
    error_message = "monitoring.namespace must be a namespace name (DNS label) or null."
  }
  validation {
    condition     = !var.monitoring.pod_monitors || var.prometheus_namespace != null
    error_message = "monitoring.pod_monitors needs prometheus_namespace: the NetworkPolicies admit scrapes from that namespace only."
  }
}
