# Ingress to and egress from the limiter pods. Everything not allowed here is refused (by a CNI
# that enforces NetworkPolicy). Egress: DNS (spec.network.dns), this region's NATS :4222, its
# Redis (the in-cluster pods, or spec.redis.cidrs), the other limiters' memberlist, and the OTLP
# collector (spec.network.otlp_namespaces / otlp_cidrs) when tracing is on. Ingress: the HTTP
# port (8080: /v1/allow, catalogue reads, /metrics) and the rate limit service's gRPC port
# (limiter.grpc_port, default 8081) from the API client namespaces, or from this namespace only
# when none is configured; 8080 from Prometheus' namespace when one is named; memberlist (7946
# TCP+UDP) from this region's limiters only.
# Namespaces are matched by name through the kubernetes.io/metadata.name label.
locals {
  api_ns_names  = var.spec.network.api_client_namespaces
  api_ns_labels = var.spec.network.api_client_namespace_labels
  api_ns_own    = length(local.api_ns_names) + length(local.api_ns_labels) == 0 # none given: this namespace only
  prometheus_ns = var.spec.network.prometheus_namespace == null ? [] : [var.spec.network.prometheus_namespace]

  # Egress (limiters and control plane): where DNS is, Redis' port(s), the OTLP collector's port
  # (the URL's, else 443 for https and 80 for http).
  dns         = var.spec.network.dns
  redis_ports = distinct([for hp in split(",", local.redis_endpoint) : try(regex(":([0-9]+)$", trimspace(hp))[0], "6379")])
  otlp_port = var.spec.otlp_endpoint == null ? null : try(
    regex("^https?://[^/?#]*:([0-9]+)(?:[/?#]|$)", var.spec.otlp_endpoint)[0],
    startswith(var.spec.otlp_endpoint, "https://") ? "443" : "80",
  )
}

resource "kubernetes_network_policy_v1" "limiter" {
  metadata {
    name      = local.limiter_name
    namespace = local.ns
    labels    = local.limiter_labels
  }

  spec {
    pod_selector {
      match_labels = local.limiter_selector
    }
    policy_types = ["Ingress", "Egress"]

    # API clients: HTTP, and Envoy's rate limit service (gRPC) when it is on.
    ingress {
      ports {
        port     = "8080"
        protocol = "TCP"
      }
      dynamic "ports" {
        for_each = local.grpc_on ? [var.spec.limiter.grpc_port] : []
        content {
          port     = tostring(ports.value)
          protocol = "TCP"
        }
      }
      dynamic "from" {
        for_each = length(local.api_ns_names) > 0 ? [local.api_ns_names] : []
        content {
          namespace_selector {
            match_expressions {
              key      = "kubernetes.io/metadata.name"
              operator = "In"
              values   = from.value
            }
          }
        }
      }
      dynamic "from" {
        for_each = length(local.api_ns_labels) > 0 ? [local.api_ns_labels] : []
        content {
          namespace_selector {
            match_labels = from.value
          }
        }
      }
      dynamic "from" {
        for_each = local.api_ns_own ? [local.ns] : []
        content {
          namespace_selector {
            match_labels = { "kubernetes.io/metadata.name" = from.value }
          }
        }
      }
    }

    # Prometheus scrapes /metrics on the same port.
    dynamic "ingress" {
      for_each = local.prometheus_ns
      content {
        ports {
          port     = "8080"
          protocol = "TCP"
        }
        from {
          namespace_selector {
            match_labels = { "kubernetes.io/metadata.name" = ingress.value }
          }
        }
      }
    }

    # In-region membership: this region's limiters only (same namespace).
    ingress {
      ports {
        port     = "7946"
        protocol = "TCP"
      }
      ports {
        port     = "7946"
        protocol = "UDP"
      }
      from {
        pod_selector {
          match_labels = local.limiter_selector
        }
      }
    }

    # Egress: DNS, this region's NATS (clients), Redis, the other limiters' memberlist, the OTLP
    # collector when tracing is on; nothing else.
    egress {
      ports {
        port     = "53"
        protocol = "UDP"
      }
      ports {
        port     = "53"
        protocol = "TCP"
      }
      to {
        namespace_selector {
          match_labels = { "kubernetes.io/metadata.name" = local.dns.namespace }
        }
        pod_selector {
          match_labels = local.dns.pod_labels
        }
      }
      dynamic "to" {
        for_each = local.dns.cidrs
        content {
          ip_block {
            cidr = to.value
          }
        }
      }
    }
    egress {
      ports {
        port     = "4222"
        protocol = "TCP"
      }
      to {
        pod_selector {
          match_labels = local.nats_selector
        }
      }
    }
    egress {
      dynamic "ports" {
        for_each = local.redis_ports
        content {
          port     = ports.value
          protocol = "TCP"
        }
      }
      dynamic "to" {
        for_each = local.redis_in_cluster ? [local.redis_selector] : []
        content {
          pod_selector {
            match_labels = to.value
          }
        }
      }
      dynamic "to" {
        for_each = local.redis_in_cluster ? [] : var.spec.redis.cidrs
        content {
          ip_block {
            cidr = to.value
          }
        }
      }
    }
    egress {
      ports {
        port     = "7946"
        protocol = "TCP"
      }
      ports {
        port     = "7946"
        protocol = "UDP"
      }
      to {
        pod_selector {
          match_labels = local.limiter_selector
        }
      }
    }
    dynamic "egress" {
      for_each = var.spec.otlp_endpoint == null ? [] : [local.otlp_port]
      content {
        ports {
          port     = egress.value
          protocol = "TCP"
        }
        dynamic "to" {
          for_each = length(var.spec.network.otlp_namespaces) > 0 ? [var.spec.network.otlp_namespaces] : []
          content {
            namespace_selector {
              match_expressions {
                key      = "kubernetes.io/metadata.name"
                operator = "In"
                values   = to.value
              }
            }
          }
        }
        dynamic "to" {
          for_each = var.spec.network.otlp_cidrs
          content {
            ip_block {
              cidr = to.value
            }
          }
        }
      }
    }
  }
}

# Ingress to the control-plane limiter (control region only): its HTTP port from the pods that
# carry spec.network.admin_client_pod_labels in the admin client namespaces (this namespace when
# none is named), never from a whole namespace, and from Prometheus' namespace.
locals {
  admin_ns_names = length(var.spec.network.admin_client_namespaces) > 0 ? var.spec.network.admin_client_namespaces : [local.ns]
}

resource "kubernetes_network_policy_v1" "control_plane" {
  count = local.is_control_region ? 1 : 0

  metadata {
    name      = local.control_plane_name
    namespace = local.ns
    labels    = local.control_plane_labels
  }

  spec {
    pod_selector {
      match_labels = local.control_plane_selector
    }
    policy_types = ["Ingress", "Egress"]

    ingress {
      ports {
        port     = "8080"
        protocol = "TCP"
      }
      from {
        namespace_selector {
          match_expressions {
            key      = "kubernetes.io/metadata.name"
            operator = "In"
            values   = local.admin_ns_names
          }
        }
        pod_selector {
          match_labels = var.spec.network.admin_client_pod_labels
        }
      }
    }

    dynamic "ingress" {
      for_each = local.prometheus_ns
      content {
        ports {
          port     = "8080"
          protocol = "TCP"
        }
        from {
          namespace_selector {
            match_labels = { "kubernetes.io/metadata.name" = ingress.value }
          }
        }
      }
    }

    # Egress: DNS, this region's NATS (clients), Redis, the OTLP collector when tracing is on;
    # nothing else. No memberlist: the control plane does not join it.
    egress {
      ports {
        port     = "53"
        protocol = "UDP"
      }
      ports {
        port     = "53"
        protocol = "TCP"
      }
      to {
        namespace_selector {
          match_labels = { "kubernetes.io/metadata.name" = local.dns.namespace }
        }
        pod_selector {
          match_labels = local.dns.pod_labels
        }
      }
      dynamic "to" {
        for_each = local.dns.cidrs
        content {
          ip_block {
            cidr = to.value
          }
        }
      }
    }
    egress {
      ports {
        port     = "4222"
        protocol = "TCP"
      }
      to {
        pod_selector {
          match_labels = local.nats_selector
        }
      }
    }
    egress {
      dynamic "ports" {
        for_each = local.redis_ports
        content {
          port     = ports.value
          protocol = "TCP"
        }
      }
      dynamic "to" {
        for_each = local.redis_in_cluster ? [local.redis_selector] : []
        content {
          pod_selector {
            match_labels = to.value
          }
        }
      }
      dynamic "to" {
        for_each = local.redis_in_cluster ? [] : var.spec.redis.cidrs
        content {
          ip_block {
            cidr = to.value
          }
        }
      }
    }
    dynamic "egress" {
      for_each = var.spec.otlp_endpoint == null ? [] : [local.otlp_port]
      content {
        ports {
          port     = egress.value
          protocol = "TCP"
        }
        dynamic "to" {
          for_each = length(var.spec.network.otlp_namespaces) > 0 ? [var.spec.network.otlp_namespaces] : []
          content {
            namespace_selector {
              match_expressions {
                key      = "kubernetes.io/metadata.name"
                operator = "In"
                values   = to.value
              }
            }
          }
        }
        dynamic "to" {
          for_each = var.spec.network.otlp_cidrs
          content {
            ip_block {
              cidr = to.value
            }
          }
        }
      }
    }
  }
}

# Ingress to the NATS servers:
#   4222 (clients)  this region's limiters; the control plane (control region); the reconciler
#                   (ledger region), from its namespace (spec.reconciler_namespace)
#   6222 (routes)   this region's NATS servers
#   7222 (gateways) spec.gateway_source_ranges (ipBlocks: the other regions' egress addresses,
#                   seen as such because the gateway Service keeps client addresses), and the
#                   other regions' NATS pods in spec.network.peer_namespaces (gateways dialled
#                   inside one cluster). Neither: no rule, nobody.
#   8222 (monitor)  spec.network.nats_monitor_namespaces only (an exporter or surveyor); the
#                   kubelet's probes need no rule.
locals {
  nats_peer_regions = sort(keys(var.spec.peers))
  nats_gateway_from = length(var.spec.gateway_source_ranges) + (
    length(local.nats_peer_regions) > 0 && length(var.spec.network.peer_namespaces) > 0 ? 1 : 0
  )
  reconciler_selector = { "app.kubernetes.io/name" = "reconciler", "quota.dev/region" = local.name }
}

resource "kubernetes_network_policy_v1" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  spec {
    pod_selector {
      match_labels = local.nats_selector
    }
    policy_types = ["Ingress"]

    # Clients: limiters, control plane, reconciler.
    ingress {
      ports {
        port     = "4222"
        protocol = "TCP"
      }
      from {
        pod_selector {
          match_labels = local.limiter_selector
        }
      }
      dynamic "from" {
        for_each = local.is_control_region ? [local.control_plane_selector] : []
        content {
          pod_selector {
            match_labels = from.value
          }
        }
      }
      dynamic "from" {
        for_each = local.hosts_reconciler ? [var.spec.reconciler_namespace] : []
        content {
          namespace_selector {
            match_labels = { "kubernetes.io/metadata.name" = from.value }
          }
          pod_selector {
            match_labels = local.reconciler_selector
          }
        }
      }
    }

    # Cluster routes: this region's servers.
    ingress {
      ports {
        port     = "6222"
        protocol = "TCP"
      }
      from {
        pod_selector {
          match_labels = local.nats_selector
        }
      }
    }

    # Gateways. An ingress rule without any from would admit everybody: only with sources.
    dynamic "ingress" {
      for_each = local.nats_gateway_from > 0 ? [1] : []
      content {
        ports {
          port     = "7222"
          protocol = "TCP"
        }
        dynamic "from" {
          for_each = var.spec.gateway_source_ranges
          content {
            ip_block {
              cidr = from.value
            }
          }
        }
        dynamic "from" {
          for_each = length(local.nats_peer_regions) > 0 && length(var.spec.network.peer_namespaces) > 0 ? [1] : []
          content {
            namespace_selector {
              match_expressions {
                key      = "kubernetes.io/metadata.name"
                operator = "In"
                values   = var.spec.network.peer_namespaces
              }
            }
            pod_selector {
              match_labels = { "app.kubernetes.io/name" = "nats" }
              match_expressions {
                key      = "quota.dev/region"
                operator = "In"
                values   = local.nats_peer_regions
              }
            }
          }
        }
      }
    }

    # Monitoring.
    dynamic "ingress" {
      for_each = length(var.spec.network.nats_monitor_namespaces) > 0 ? [var.spec.network.nats_monitor_namespaces] : []
      content {
        ports {
          port     = "8222"
          protocol = "TCP"
        }
        from {
          namespace_selector {
            match_expressions {
              key      = "kubernetes.io/metadata.name"
              operator = "In"
              values   = ingress.value
            }
          }
        }
      }
    }
  }
}

# Ingress to the in-cluster Redis: this region's limiters and control plane only (it also needs
# the password); no egress at all. A managed Redis is outside the cluster: restrict it with its
# security group (the limiters' egress admits only spec.redis.cidrs).
resource "kubernetes_network_policy_v1" "redis" {
  count = local.redis_in_cluster ? 1 : 0

  metadata {
    name      = local.redis_name
    namespace = local.ns
    labels    = local.redis_labels
  }

  spec {
    pod_selector {
      match_labels = local.redis_selector
    }
    # Egress without a rule: none. A one-node Redis dials nobody.
    policy_types = ["Ingress", "Egress"]

    ingress {
      ports {
        port     = "6379"
        protocol = "TCP"
      }
      from {
        pod_selector {
          match_labels = local.limiter_selector
        }
      }
      dynamic "from" {
        for_each = local.is_control_region ? [local.control_plane_selector] : []
        content {
          pod_selector {
            match_labels = from.value
          }
        }
      }
    }
  }
}
