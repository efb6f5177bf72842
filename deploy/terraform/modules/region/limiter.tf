# The regional limiters: one single-replica StatefulSet per process, limiter-<region>-<i> for i
# in 0..replicas-1 (pod limiter-<region>-<i>-0), so that each process gets a NATS credential of
# its own: the pods of one StatefulSet share one template, and so one Secret. Process i's user
# limiter-<region>.limiter-<region>-<i> may publish usage and gossip only on its own subjects
# (nats.conf.tftpl), and its password (derived from nats_passwords["limiter-<region>"], nats.tf)
# is in its own Secret quota-nats-limiter-<region>-<i> alone. QUOTA_PROCESS_ID is the process
# name (the StatefulSet's), which the credential is bound to: the reporter adds its start time,
# so a pod that comes back is a new incarnation of the same process in the ledger. Scaling is
# limiter.replicas: a process added gets its StatefulSet, Secret and NATS user (this region's
# NATS servers roll to learn it); a process removed loses all three.
#
# A StatefulSet, so that each pod keeps its --data-dir on its own volume (PVC
# data-limiter-<region>-<i>-0). The data dir holds the last known good catalogue (catalog.json,
# read at start) and the usage spool: a pod that is deleted, evicted or moved by a node drain
# comes back with both, so it becomes ready from its cached catalogue even while NATS is away
# (/readyz needs a catalogue, fresh or cached, not NATS), and the reports it had not sent yet are
# still there to send. The price: an EBS-like zonal volume pins its pod to a zone
# (deploy/RUNBOOK.md, "Zone lost"); a zone-redundant storage class (limiter.storage_class)
# avoids that. The Service, memberlist, PodDisruptionBudget and topology spread select all of a
# region's processes by their shared labels (limiter_selector).
locals {
  limiter_name       = "limiter-${local.name}"
  memberlist_service = "limiter-memberlist-${local.name}"
  limiter_labels     = merge(local.labels, { "app.kubernetes.io/name" = "regional-limiter" })
  limiter_selector   = { "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = local.name }
  # The processes, by name; each StatefulSet selects its own by the quota.dev/process label.
  limiter_processes = [for i in range(var.spec.limiter.replicas) : "${local.limiter_name}-${i}"]
  process_label     = "quota.dev/process"

  # The daemon's flags (`regional-limiter -help`; hclcheck_test.go checks every one against it).
  # Secrets are not here: --redis, --check-token, --read-token, --nats-password and
  # --memberlist-key come from env QUOTA_REDIS, QUOTA_CHECK_TOKEN, QUOTA_READ_TOKEN,
  # QUOTA_NATS_PASSWORD and QUOTA_MEMBERLIST_KEY (Secrets). $(POD_IP) is expanded by the kubelet.
  # Each process adds its own --nats-user (limiter_process_args).
  # No --control-plane: these limiters read the catalogue, never write it (see controlplane.tf),
  # so they get no admin token either (reads take a read token).
  limiter_args = concat([
    "--region=${local.name}",
    "--listen=:8080",
    "--nats=${local.nats_client_url}",
    "--usage-stream-replicas=${local.js_replicas}",
    "--usage-stream-cluster=${local.js_cluster}",
    "--usage-stream-max-bytes=${var.spec.usage_stream_max_bytes}",
    # Read-only limiters never create the catalogue bucket; the placement is passed all the
    # same, so that every process that could create it agrees on it.
    "--catalog-replicas=${local.js_replicas}",
    "--catalog-cluster=${local.js_cluster}",
    "--data-dir=/var/lib/quota",
    "--processes=${var.spec.limiter.replicas}",
    "--region-weights=${local.region_weights}",
    "--memberlist-bind=$(POD_IP):7946",
    "--memberlist-join=${local.memberlist_service}.${local.svc}:7946",
    "--log-level=${var.spec.limiter.log_level}",
    "--shutdown-delay=${var.spec.limiter.shutdown_delay_seconds}s",
    ], var.spec.redis.cluster ? ["--redis-cluster"] : [],
    local.nats_client_tls_args,
    local.grpc_on ? ["--grpc-listen=:${var.spec.limiter.grpc_port}", "--rls-config=${var.spec.limiter.rls_config}"] : [],
    local.grpc_on && var.spec.limiter.rls_response_headers ? ["--rls-response-headers"] : [],
    var.spec.limiter.hotkey_metrics > 0 ? ["--hotkey-metrics=${var.spec.limiter.hotkey_metrics}"] : [],
    local.otlp_args,
  var.spec.limiter.extra_args)

  # Envoy's rate limit service (gRPC), on unless grpc_port is 0.
  grpc_on = var.spec.limiter.grpc_port > 0
  # Traces of the slow work to an OTLP/HTTP collector, limiters and control plane alike.
  otlp_args = var.spec.otlp_endpoint == null ? [] : ["--otlp-endpoint=${var.spec.otlp_endpoint}"]

  # SIGTERM -> /readyz fails, the daemon serves on for the shutdown delay (no preStop hook: the
  # daemon waits itself), then drains; the kubelet's SIGKILL comes 5 s after that budget.
  limiter_grace_seconds = var.spec.limiter.shutdown_delay_seconds + var.spec.limiter.drain_seconds + 5
  # Terraform waits for each process's roll (one pod).
  limiter_rollout_timeout = "${max(600, local.limiter_grace_seconds + 90)}s"

  # Each process's own arguments: its NATS user (natsrole.LimiterProcess).
  limiter_process_args = { for p in local.limiter_processes : p => concat(local.limiter_args, ["--nats-user=limiter-${local.name}.${p}"]) }

  # Environment variable => key of Secret quota-limiter-<region> (secrets.tf), shared by the
  # region's processes. QUOTA_NATS_PASSWORD comes from the process's own Secret.
  limiter_secret_env = {
    "QUOTA_REDIS"          = "redis-url"
    "QUOTA_CHECK_TOKEN"    = "check-token"
    "QUOTA_READ_TOKEN"     = "read-token"
    "QUOTA_MEMBERLIST_KEY" = "memberlist-key"
  }
}

# Terraform applies the processes' StatefulSets in parallel: a change of the pod template rolls
# every process of a region at once unless applied with -parallelism=1 (deploy/RUNBOOK.md,
# "Procedures"), which rolls them one after the other, each waiting for its pod to be ready.
resource "kubernetes_stateful_set_v1" "limiter" {
  for_each = toset(local.limiter_processes)

  # After the NATS servers have rolled (wait_for_rollout): see nats.tf.
  depends_on = [kubernetes_stateful_set_v1.nats]

  metadata {
    name      = each.key
    namespace = local.ns
    labels    = merge(local.limiter_labels, { (local.process_label) = each.key })
  }

  wait_for_rollout = true

  spec {
    # The memberlist headless Service also gives each pod its DNS name.
    service_name          = kubernetes_service_v1.memberlist.metadata[0].name
    replicas              = 1
    pod_management_policy = "Parallel"

    selector {
      match_labels = merge(local.limiter_selector, { (local.process_label) = each.key })
    }

    update_strategy {
      type = "RollingUpdate"
      rolling_update {
        partition = 0
      }
    }

    # The volumes outlive scale-downs and the StatefulSet itself (Kubernetes' default, said
    # explicitly): a spool with unsent reports is never deleted by a resize. Removing a region
    # with create_namespace = true deletes them with the namespace.
    persistent_volume_claim_retention_policy {
      when_deleted = "Retain"
      when_scaled  = "Retain"
    }

    template {
      metadata {
        labels = merge(local.limiter_labels, { (local.process_label) = each.key })
        annotations = {
          "prometheus.io/scrape" = "true"
          "prometheus.io/port"   = "8080"
          "prometheus.io/path"   = "/metrics"
          # Environment from a Secret is read at container start: a changed token list (or Redis
          # or NATS password) must roll the pods. One hash over all of both Secrets' values.
          "quota.dev/secret-hash" = sha256(jsonencode([kubernetes_secret_v1.limiter.data, kubernetes_secret_v1.limiter_nats[each.key].data]))
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

        # With zones: only the listed zones, and spread evenly over them (a zone may hold at most
        # one pod more than another; DoNotSchedule makes that required). Always: preferably one
        # pod per node.
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
        dynamic "topology_spread_constraint" {
          for_each = local.zoned ? [local.zone_key] : []
          content {
            max_skew           = 1
            topology_key       = topology_spread_constraint.value
            when_unsatisfiable = "DoNotSchedule"
            label_selector {
              match_labels = local.limiter_selector
            }
          }
        }
        topology_spread_constraint {
          max_skew           = 1
          topology_key       = local.host_key
          when_unsatisfiable = "ScheduleAnyway"
          label_selector {
            match_labels = local.limiter_selector
          }
        }

        container {
          name              = "regional-limiter"
          image             = var.spec.images.quota
          image_pull_policy = var.spec.image_pull_policy
          command           = ["/usr/local/bin/regional-limiter"]
          args              = local.limiter_process_args[each.key]

          port {
            name           = "http"
            container_port = 8080
          }
          dynamic "port" {
            for_each = local.grpc_on ? [var.spec.limiter.grpc_port] : []
            content {
              name           = "grpc"
              container_port = port.value
            }
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
          # The process its NATS user is bound to (its subjects: quota.usage.<region>.<process>).
          env {
            name  = "QUOTA_PROCESS_ID"
            value = each.key
          }
          env {
            name  = "GOMEMLIMIT"
            value = local.limiter_gomemlimit
          }
          dynamic "env" {
            for_each = local.limiter_secret_env
            content {
              name = env.key
              value_from {
                secret_key_ref {
                  name = kubernetes_secret_v1.limiter.metadata[0].name
                  key  = env.value
                }
              }
            }
          }
          env {
            name = "QUOTA_NATS_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.limiter_nats[each.key].metadata[0].name
                key  = "nats-password"
              }
            }
          }

          # Fails as soon as the shutdown delay starts: two failed probes 1 s apart take the pod
          # out of the Service's endpoints well within the default 5 s delay. Succeeds once a
          # catalogue is loaded, from NATS or from the cache on the pod's volume.
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

    # --data-dir: catalogue cache and usage spool, one volume per pod.
    volume_claim_template {
      metadata {
        name = "data"
      }
      spec {
        access_modes       = ["ReadWriteOnce"]
        storage_class_name = var.spec.limiter.storage_class
        resources {
          requests = {
            storage = var.spec.limiter.data_volume_size
          }
        }
      }
    }
  }

  timeouts {
    create = local.limiter_rollout_timeout
    update = local.limiter_rollout_timeout
  }
}

# Client-facing API (/v1/allow, catalogue reads, /metrics; gRPC ShouldRateLimit on "grpc").
resource "kubernetes_service_v1" "limiter" {
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
    dynamic "port" {
      for_each = local.grpc_on ? [var.spec.limiter.grpc_port] : []
      content {
        name        = "grpc"
        port        = port.value
        target_port = tostring(port.value)
      }
    }
  }
}

# Headless service for in-region memberlist: its DNS name resolves to every limiter pod, ready or
# not, so a starting pod can join before it is ready (--memberlist-join).
resource "kubernetes_service_v1" "memberlist" {
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
