# The control plane: one regional-limiter with --control-plane in the control region (root
# variable control_region, default the ledger region). It is the only process that writes the
# catalogue (PUT/DELETE /v1/limits, /v1/keys, /v1/costs: entries of the JetStream KV bucket
# quota-catalog, which it creates), as NATS user control-plane, the only user allowed to. Every
# other limiter answers those writes with 403 and reads the catalogue.
#
# It is a limiter of its region in every other respect (same Redis, tokens, weights, extra_args),
# but it has its own labels, so the check Service limiter-<region> and the memberlist never see
# it: admin clients reach it through Service control-plane-<region>:8080. It does not join the
# region's memberlist (it serves no checks through the limiter Service, so it must not shrink
# the limiters' lease caps by counting as one of them).
locals {
  control_plane_name     = "control-plane-${local.name}"
  control_plane_labels   = merge(local.labels, { "app.kubernetes.io/name" = "control-plane" })
  control_plane_selector = { "app.kubernetes.io/name" = "control-plane", "quota.dev/region" = local.name }

  # As for the limiters (limiter.tf), plus --control-plane and the control-plane NATS user; the
  # catalogue bucket and the usage stream are placed like the limiters' usage stream
  # (spec.jetstream: the ledger region's NATS cluster, R3 there).
  control_plane_args = concat([
    "--region=${local.name}",
    "--listen=:8080",
    "--nats=${local.nats_client_url}",
    "--nats-user=control-plane",
    "--control-plane",
    "--catalog-replicas=${local.js_replicas}",
    "--catalog-cluster=${local.js_cluster}",
    "--usage-stream-replicas=${local.js_replicas}",
    "--usage-stream-cluster=${local.js_cluster}",
    "--usage-stream-max-bytes=${var.spec.usage_stream_max_bytes}",
    "--data-dir=/var/lib/quota",
    "--region-weights=${local.region_weights}",
    "--log-level=${var.spec.limiter.log_level}",
    "--shutdown-delay=${var.spec.limiter.shutdown_delay_seconds}s",
    ], var.spec.redis.cluster ? ["--redis-cluster"] : [],
    local.otlp_args,
    local.nats_client_tls_args,
  var.spec.limiter.extra_args)

  # Environment variable => key of Secret quota-control-plane-<region> (secrets.tf).
  control_plane_env = {
    "QUOTA_ADMIN_TOKEN"   = "admin-token"
    "QUOTA_REDIS"         = "redis-url"
    "QUOTA_CHECK_TOKEN"   = "check-token"
    "QUOTA_READ_TOKEN"    = "read-token"
    "QUOTA_NATS_PASSWORD" = "nats-password"
  }
}

resource "kubernetes_deployment_v1" "control_plane" {
  count = local.is_control_region ? 1 : 0
  # After the NATS servers have rolled (wait_for_rollout): see nats.tf.
  depends_on = [kubernetes_stateful_set_v1.nats]

  metadata {
    name      = local.control_plane_name
    namespace = local.ns
    labels    = local.control_plane_labels
  }

  spec {
    replicas = 1

    selector {
      match_labels = local.control_plane_selector
    }

    # The new pod is ready (catalogue read) before the old one stops.
    strategy {
      type = "RollingUpdate"
      rolling_update {
        max_unavailable = "0"
        max_surge       = "1"
      }
    }

    template {
      metadata {
        labels = local.control_plane_labels
        annotations = {
          "prometheus.io/scrape"  = "true"
          "prometheus.io/port"    = "8080"
          "prometheus.io/path"    = "/metrics"
          "quota.dev/secret-hash" = sha256(jsonencode(kubernetes_secret_v1.control_plane[0].data))
        }
      }

      spec {
        automount_service_account_token  = false
        termination_grace_period_seconds = local.limiter_grace_seconds

        security_context {
          run_as_non_root = true
          run_as_user     = 65532
          run_as_group    = 65532
          fs_group        = 65532
        }

        dynamic "affinity" {
          for_each = local.zoned ? [var.spec.zones] : []
          content {
            node_affinity {
              required_during_scheduling_ignored_during_execution {
                node_selector_term {
                  match_expressions {
                    key      = local.zone_key
                    operator = "In"
                    values   = affinity.value
                  }
                }
              }
            }
          }
        }

        container {
          name              = "regional-limiter"
          image             = var.spec.images.quota
          image_pull_policy = var.spec.image_pull_policy
          command           = ["/usr/local/bin/regional-limiter"]
          args              = local.control_plane_args

          port {
            name           = "http"
            container_port = 8080
          }

          env {
            name = "QUOTA_PROCESS_ID"
            value_from {
              field_ref {
                field_path = "metadata.name"
              }
            }
          }
          env {
            name  = "GOMEMLIMIT"
            value = local.limiter_gomemlimit
          }
          dynamic "env" {
            for_each = local.control_plane_env
            content {
              name = env.key
              value_from {
                secret_key_ref {
                  name = kubernetes_secret_v1.control_plane[0].metadata[0].name
                  key  = env.value
                }
              }
            }
          }

          readiness_probe {
            http_get {
              path = "/readyz"
              port = "8080"
            }
            period_seconds    = 1
            timeout_seconds   = 1
            failure_threshold = 2
          }
          liveness_probe {
            http_get {
              path = "/healthz"
              port = "8080"
            }
            initial_delay_seconds = 5
            period_seconds        = 10
            failure_threshold     = 3
          }

          resources {
            limits   = local.limiter_resources.limits
            requests = local.limiter_resources.requests
          }

          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            capabilities {
              drop = ["ALL"]
            }
          }

          volume_mount {
            name       = "data"
            mount_path = "/var/lib/quota"
          }
          dynamic "volume_mount" {
            for_each = var.spec.nats_tls_secret == null ? [] : [local.nats_client_tls_dir]
            content {
              name       = "nats-tls-ca"
              mount_path = volume_mount.value
              read_only  = true
            }
          }
        }

        # The catalogue cache is on an emptyDir here: a new control-plane pod needs NATS to
        # become ready, as every catalogue write does anyway. The old pod serves until then
        # (max_unavailable 0).
        volume {
          name = "data"
          empty_dir {}
        }
        dynamic "volume" {
          for_each = var.spec.nats_tls_secret == null ? [] : [var.spec.nats_tls_secret]
          content {
            name = "nats-tls-ca"
            secret {
              secret_name = volume.value
              items {
                key  = "ca.crt"
                path = "ca.crt"
              }
            }
          }
        }
      }
    }
  }
}

# The admin API (catalogue writes and reads, /metrics); not the check Service.
resource "kubernetes_service_v1" "control_plane" {
  count = local.is_control_region ? 1 : 0

  metadata {
    name      = local.control_plane_name
    namespace = local.ns
    labels    = local.control_plane_labels
  }

  spec {
    type     = "ClusterIP"
    selector = local.control_plane_selector

    port {
      name        = "http"
      port        = 8080
      target_port = "8080"
    }
  }
}
