locals {
  limiter_name       = "limiter-${local.name}"
  memberlist_service = "limiter-memberlist-${local.name}"
  limiter_labels     = merge(local.labels, { "app.kubernetes.io/name" = "regional-limiter" })
  limiter_selector   = { "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = local.name }

  # The daemon's flags (cmd/regional-limiter/README.md). Secrets are not here: --admin-token,
  # --redis, --check-token, --read-token and --nats-password come from env QUOTA_ADMIN_TOKEN,
  # QUOTA_REDIS, QUOTA_CHECK_TOKEN, QUOTA_READ_TOKEN and QUOTA_NATS_PASSWORD (Secret). $(POD_IP)
  # is expanded by the kubelet. No --control-plane: these limiters read the catalogue, never
  # write it (PUT/DELETE answer 403; see controlplane.tf).
  limiter_args = concat([
    "--region=${local.name}",
    "--listen=:8080",
    "--nats=${local.nats_client_url}",
    "--nats-user=limiter-${local.name}",
    "--usage-stream-replicas=${local.js_replicas}",
    "--usage-stream-max-bytes=${var.spec.usage_stream_max_bytes}",
    "--data-dir=/var/lib/quota",
    "--processes=${var.spec.limiter.replicas}",
    "--region-weights=${local.region_weights}",
    "--memberlist-bind=$(POD_IP):7946",
    "--memberlist-join=${local.memberlist_service}.${local.svc}:7946",
    "--log-level=${var.spec.limiter.log_level}",
    "--shutdown-delay=${var.spec.limiter.shutdown_delay_seconds}s",
    ], var.spec.redis.cluster ? ["--redis-cluster"] : [],
    local.nats_client_tls_args,
  var.spec.limiter.extra_args)

  # SIGTERM -> /readyz fails, the daemon serves on for the shutdown delay (no preStop hook: the
  # daemon waits itself), then drains; the kubelet's SIGKILL comes 5 s after that budget.
  limiter_grace_seconds = var.spec.limiter.shutdown_delay_seconds + var.spec.limiter.drain_seconds + 5
}

resource "kubernetes_deployment" "limiter" {
  # After the NATS servers have rolled (wait_for_rollout): see nats.tf.
  depends_on = [kubernetes_stateful_set.nats]

  metadata {
    name      = local.limiter_name
    namespace = local.ns
    labels    = local.limiter_labels
  }

  spec {
    replicas = var.spec.limiter.replicas

    selector {
      match_labels = local.limiter_selector
    }

    strategy {
      type = "RollingUpdate"
      rolling_update {
        max_unavailable = "1"
        max_surge       = "1"
      }
    }

    template {
      metadata {
        labels = local.limiter_labels
        annotations = {
          "prometheus.io/scrape" = "true"
          "prometheus.io/port"   = "8080"
          "prometheus.io/path"   = "/metrics"
          # Environment from a Secret is read at container start: a changed token list (or Redis
          # password) must roll the pods. One hash over all of the Secret's values.
          "quota.dev/secret-hash" = sha256(jsonencode(kubernetes_secret.limiter.data))
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

        affinity {
          pod_anti_affinity {
            preferred_during_scheduling_ignored_during_execution {
              weight = 100
              pod_affinity_term {
                topology_key = "kubernetes.io/hostname"
                label_selector {
                  match_labels = local.limiter_selector
                }
              }
            }
          }
        }

        container {
          name              = "regional-limiter"
          image             = var.spec.image
          image_pull_policy = var.spec.image_pull_policy
          command           = ["/usr/local/bin/regional-limiter"]
          args              = local.limiter_args

          port {
            name           = "http"
            container_port = 8080
          }
          port {
            name           = "memberlist-tcp"
            container_port = 7946
            protocol       = "TCP"
          }
          port {
            name           = "memberlist-udp"
            container_port = 7946
            protocol       = "UDP"
          }

          env {
            name = "POD_IP"
            value_from {
              field_ref {
                field_path = "status.podIP"
              }
            }
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
            name = "QUOTA_ADMIN_TOKEN"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.limiter.metadata[0].name
                key  = "admin-token"
              }
            }
          }
          env {
            name = "QUOTA_REDIS"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.limiter.metadata[0].name
                key  = "redis-url"
              }
            }
          }
          env {
            name = "QUOTA_CHECK_TOKEN"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.limiter.metadata[0].name
                key  = "check-token"
              }
            }
          }
          env {
            name = "QUOTA_READ_TOKEN"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.limiter.metadata[0].name
                key  = "read-token"
              }
            }
          }
          env {
            name = "QUOTA_NATS_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret.limiter.metadata[0].name
                key  = "nats-password"
              }
            }
          }

          # Fails as soon as the shutdown delay starts: two failed probes 1 s apart take the pod
          # out of the Service's endpoints well within the default 5 s delay.
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
            requests {
              cpu    = var.spec.limiter.cpu_request
              memory = var.spec.limiter.memory_request
            }
            limits {
              cpu    = var.spec.limiter.cpu_limit
              memory = var.spec.limiter.memory_limit
            }
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

        # Usage spool and config cache. Final usage reports are sent on SIGTERM, after the
        # shutdown delay (grace period above); a spool lost with a deleted pod shows up as a
        # missing final report in the ledger.
        volume {
          name = "data"
          empty_dir {}
        }
        # The CA of the NATS servers' certificate, and nothing else of their TLS Secret.
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

# Client-facing API (/v1/allow, control plane, /metrics).
resource "kubernetes_service" "limiter" {
  metadata {
    name      = local.limiter_name
    namespace = local.ns
    labels    = local.limiter_labels
  }

  spec {
    type     = "ClusterIP"
    selector = local.limiter_selector

    port {
      name        = "http"
      port        = 8080
      target_port = "8080"
    }
  }
}

# Headless service for in-region memberlist: its DNS name resolves to every limiter pod, ready or
# not, so a starting pod can join before it is ready (--memberlist-join).
resource "kubernetes_service" "memberlist" {
  metadata {
    name      = local.memberlist_service
    namespace = local.ns
    labels    = local.limiter_labels
  }

  spec {
    cluster_ip                  = "None"
    publish_not_ready_addresses = true
    selector                    = local.limiter_selector

    port {
      name        = "memberlist-tcp"
      port        = 7946
      target_port = "7946"
      protocol    = "TCP"
    }
    port {
      name        = "memberlist-udp"
      port        = 7946
      target_port = "7946"
      protocol    = "UDP"
    }
  }
}
