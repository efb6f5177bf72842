# In-cluster Postgres, for DEVELOPMENT ONLY (spec.postgres.development_in_cluster, host null):
# one instance on one zonal volume, no replica, no backups, no TLS. Production points
# spec.postgres.host at a managed or operator-run Postgres with a replica and backups (RDS or
# Aurora as in examples/eks, Cloud SQL, CloudNativePG with barman backups), verified with
# sslmode verify-full.
#
# The official image applies POSTGRES_PASSWORD only when it initialises an empty data directory.
# So that a rotated postgres_password reaches the server too, a postStart hook sets the role's
# password from the environment on every start (over the local socket, where the image trusts
# local connections), and the pod template carries a hash of Secret postgres-<region>: a new
# password restarts Postgres, and the hook applies it. The password is read by psql's \getenv
# from the environment: it is never in an argument.
locals {
  pg_name     = "postgres-${var.spec.region}"
  pg_selector = { "app.kubernetes.io/name" = "postgres", "quota.dev/region" = var.spec.region }
  pg_labels   = merge(local.labels, { "app.kubernetes.io/name" = "postgres" })

  # The postStart hook. PGHOST is the socket directory.
  pg_password_sync = <<-EOT
    i=0
    while [ "$i" -lt 120 ]; do
      if pg_isready -q -U "$POSTGRES_USER" -d "$POSTGRES_DB" &&
        psql -X -q -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" <<'SQL'
    \getenv quota_password POSTGRES_PASSWORD
    \getenv quota_user POSTGRES_USER
    ALTER ROLE :"quota_user" WITH PASSWORD :'quota_password';
    SQL
      then exit 0; fi
      i=$((i + 1))
      sleep 1
    done
    echo "could not set the password of $POSTGRES_USER" >&2
    exit 1
  EOT
}

resource "kubernetes_secret_v1" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = local.pg_labels
  }

  data = {
    "password" = var.postgres_password
  }
}

resource "kubernetes_service_v1" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = local.pg_labels
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

resource "kubernetes_stateful_set_v1" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = local.pg_labels
  }

  spec {
    service_name = local.pg_name
    replicas     = 1

    selector {
      match_labels = local.pg_selector
    }

    template {
      metadata {
        labels = local.pg_labels
        annotations = {
          # A new password restarts Postgres; the postStart hook applies it.
          "quota.dev/secret-hash" = sha256(jsonencode(kubernetes_secret_v1.postgres[0].data))
        }
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
          image = var.spec.images.postgres

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
            name  = "PGHOST"
            value = "/var/run/postgresql"
          }
          env {
            name = "POSTGRES_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.postgres[0].metadata[0].name
                key  = "password"
              }
            }
          }

          lifecycle {
            post_start {
              exec {
                command = ["/bin/sh", "-c", local.pg_password_sync]
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
            requests = { cpu = "1", memory = "2Gi" }
            limits   = { cpu = "4", memory = "8Gi" }
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
        access_modes       = ["ReadWriteOnce"]
        storage_class_name = local.pg.storage_class
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
resource "kubernetes_network_policy_v1" "postgres" {
  count = local.pg_in_cluster ? 1 : 0

  metadata {
    name      = local.pg_name
    namespace = var.spec.namespace
    labels    = local.pg_labels
  }

  spec {
    pod_selector {
      match_labels = local.pg_selector
    }
    # Egress without a rule: none. The development Postgres dials nobody.
    policy_types = ["Ingress", "Egress"]

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
