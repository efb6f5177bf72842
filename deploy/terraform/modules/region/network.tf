# Ingress to the limiter pods. Everything not allowed here is refused (by a CNI that enforces
# NetworkPolicy): the HTTP port (8080: /v1/allow, control plane, /metrics) from the API client
# namespaces, or from this namespace only when none is configured; 8080 from Prometheus'
# namespace when one is named; memberlist (7946 TCP+UDP) from this region's limiters only.
# Namespaces are matched by name through the kubernetes.io/metadata.name label.
locals {
  api_ns_names  = var.spec.network.api_client_namespaces
  api_ns_labels = var.spec.network.api_client_namespace_labels
  api_ns_own    = length(local.api_ns_names) + length(local.api_ns_labels) == 0 # none given: this namespace only
  prometheus_ns = var.spec.network.prometheus_namespace == null ? [] : [var.spec.network.prometheus_namespace]
}

resource "kubernetes_network_policy" "limiter" {
  metadata {
    name      = local.limiter_name
    namespace = local.ns
    labels    = local.limiter_labels
  }

  spec {
    pod_selector {
      match_labels = local.limiter_selector
    }
    policy_types = ["Ingress"]

    # API clients.
    ingress {
      ports {
        port     = "8080"
        protocol = "TCP"
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
  }
}
