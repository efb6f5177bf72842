# In-cluster Redis, only when the region has no managed endpoint (spec.redis.endpoint == null).
# One node with a persistent volume. Buckets carry their own TTL, so a lost volume costs at most
# one window of refilled buckets; maxmemory-policy noeviction makes memory exhaustion a loud
# store error (degraded mode, flagged) rather than a silent eviction (over-admission).
locals {
  redis_name     = "redis-${local.name}"
  redis_selector = { "app.kubernetes.io/name" = "redis", "quota.dev/region" = local.name }
}

resource "kubernetes_service" "redis" {
  count = local.redis_in_cluster ? 1 : 0

  metadata {
    name      = local.redis_name
    namespace = local.ns
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "redis" })
  }

  spec {
    selector = local.redis_selector

    port {
      name        = "redis"
      port        = 6379
      target_port = "6379"
    }
  }
}

resource "kubernetes_stateful_set" "redis" {
  count = local.redis_in_cluster ? 1 : 0

  metadata {
    name      = local.redis_name
    namespace = local.ns
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "redis" })
  }

  spec {
    service_name = local.redis_name
    replicas     = 1

    selector {
      match_labels = local.redis_selector
    }

    template {
      metadata {
        labels = merge(local.labels, { "app.kubernetes.io/name" = "redis" })
      }

      spec {
        automount_service_account_token = false

        security_context {
          run_as_non_root = true
          run_as_user     = 999
          fs_group        = 999
        }

        container {
          name  = "redis"
          image = var.spec.redis.image
          args = [
            "--requirepass", "$(REDIS_PASSWORD)",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--maxmemory", var.spec.redis.maxmemory,
            "--maxmemory-policy", "noeviction",
            "--dir", "/data",
          ]

          env {
            name = "REDIS_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.limiter.metadata[0].name
                key  = "redis-password"
              }
            }
          }

          port {
            name           = "redis"
            container_port = 6379
          }

          readiness_probe {
            tcp_socket {
              port = "6379"
            }
            period_seconds = 2
          }
          liveness_probe {
            tcp_socket {
              port = "6379"
            }
            initial_delay_seconds = 10
            period_seconds        = 10
          }

          resources {
            requests {
              cpu    = "500m"
              memory = "512Mi"
            }
            limits {
              cpu    = "2"
              memory = "2Gi"
            }
          }

          volume_mount {
            name       = "data"
            mount_path = "/data"
          }
        }
      }
    }

    volume_claim_template {
      metadata {
        name = "data"
      }
      spec {
        access_modes = ["ReadWriteOnce"]
        resources {
          requests = {
            storage = var.spec.redis.storage_size
          }
        }
      }
    }
  }
}
