# In-cluster Postgres, only when spec.postgres.host is null. One instance with a persistent
# volume; production deployments should point spec.postgres.host at a managed, backed-up,
# replicated instance instead (see examples/eks).
locals {
  pg_name     = "postgres-${var.spec.region}"
  pg_selector = { "app.kubernetes.io/name" = "postgres", "quota.dev/region" = var.spec.region }
}

resource "kubernetes_service" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "postgres" })
  }

  spec {
    selector = local.pg_selector

    port {
      name        = "postgres"
      port        = local.pg.port
      target_port = "5432"
    }
  }
}

resource "kubernetes_stateful_set" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "postgres" })
  }

  spec {
    service_name = local.pg_name
    replicas     = 1

    selector {
      match_labels = local.pg_selector
    }

    template {
      metadata {
        labels = merge(local.labels, { "app.kubernetes.io/name" = "postgres" })
      }

      spec {
        automount_service_account_token = false

        security_context {
          run_as_non_root = true
          run_as_user     = 70 # postgres in the alpine image
          fs_group        = 70
        }

        container {
          name  = "postgres"
          image = local.pg.image

          env {
            name  = "POSTGRES_USER"
            value = local.pg.user
          }
          env {
            name  = "POSTGRES_DB"
            value = local.pg.database
          }
          env {
            name  = "PGDATA"
            value = "/var/lib/postgresql/data/pgdata"
          }
          env {
            name = "POSTGRES_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.ledger.metadata[0].name
                key  = "postgres-password"
              }
            }
          }

          port {
            name           = "postgres"
            container_port = 5432
          }

          readiness_probe {
            exec {
              command = ["pg_isready", "-U", local.pg.user, "-d", local.pg.database]
            }
            period_seconds = 5
          }
          liveness_probe {
            tcp_socket {
              port = "5432"
            }
            initial_delay_seconds = 30
            period_seconds        = 10
          }

          resources {
            requests {
              cpu    = "1"
              memory = "2Gi"
            }
            limits {
              cpu    = "4"
              memory = "8Gi"
            }
          }

          volume_mount {
            name       = "data"
            mount_path = "/var/lib/postgresql/data"
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
            storage = local.pg.storage_size
          }
        }
      }
    }
  }
}

# Ingress to the in-cluster Postgres: the reconciler pods (the migrate init container and
# `reconciler serve`) only.
resource "kubernetes_network_policy" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "postgres" })
  }

  spec {
    pod_selector {
      match_labels = local.pg_selector
    }
    policy_types = ["Ingress"]

    ingress {
      ports {
        port     = "5432"
        protocol = "TCP"
      }
      from {
        pod_selector {
          match_labels = local.selector
        }
      }
    }
  }
}
