# One NATS cluster per region (JetStream on), joined to the other regions' clusters by gateways
# into one super-cluster: gossip digests and config pushes cross regions over the gateways, and
# usage reports reach the ledger region's reconciler over JetStream.
#
# Users (nats.conf.tftpl): limiter-<region>.<process> for each of this region's limiter processes
# (limiter.tf), limiter-<other> for every other region, control-plane, reconciler, and the
# gateway user of the gateway authorization (cluster routes carry no credentials: the NATS
# NetworkPolicy admits only this region's servers to the route port). Every server's config
# defines every user, and nats-server refuses to start while one of their
# $QUOTA_NATS_PASSWORD_<USER> variables is unset, so the NATS pods get all of them from Secret
# nats-<region>. Only the users that connect to THIS region's servers get their real password
# there: this region's limiter processes, gateway, control-plane in the control region,
# reconciler in the ledger region. A process's password is derived from
# nats_passwords["limiter-<region>"] and its name (SHA-256, the root last, so no length
# extension reaches it): scaling needs no new variable, one process's password gives neither
# the root nor another's, and rotating the root rotates the region's processes together. Every other user gets a password no client has (derived from the gateway
# password, which whoever can read this Secret holds anyway): it cannot log in here, the Secret
# carries no other region's client password, and rotating a client password rolls the NATS pods
# of its own region only.
locals {
  nats_name       = "nats-${local.name}"
  nats_headless   = "nats-${local.name}-headless"
  nats_client_url = "nats://${local.nats_name}.${local.svc}:4222"
  nats_selector   = { "app.kubernetes.io/name" = "nats", "quota.dev/region" = local.name }
  nats_labels     = merge(local.labels, { "app.kubernetes.io/name" = "nats" })

  # Gateways: every OTHER region, sorted by name. The gateway name is the remote cluster's name.
  gateway_names = sort(keys(var.spec.peers))
  nats_routes   = [for i in range(var.spec.nats.replicas) : "nats://${local.nats_name}-${i}.${local.nats_headless}.${local.svc}:6222"]
  gateway_host  = regex("^(?:nats://)?([^/]+)$", var.spec.gateway_url)[0]

  nats_regions      = sort(keys(var.spec.weights))
  control_region    = coalesce(var.spec.control_region, local.name)
  is_control_region = local.control_region == local.name
  hosts_reconciler  = var.spec.reconciler_namespace != null

  # Placement and replicas of what this region's processes create (usage stream, catalogue
  # bucket): spec.jetstream, by default this region's cluster, R3 when it runs three NATS
  # servers or more. The root module places both in the ledger region's cluster.
  js_cluster  = coalesce(var.spec.jetstream.cluster, local.name)
  js_replicas = coalesce(var.spec.jetstream.replicas, var.spec.nats.replicas >= 3 ? 3 : 1)

  # Lame duck: on stop the server stops taking clients and closes the ones it has over
  # lame_duck_seconds (after a grace period), so that they reconnect to the other servers one by
  # one. The kubelet must not kill it before that: grace = grace period + duration + 20 s.
  nats_ldm_grace_seconds = 10
  nats_grace_seconds     = local.nats_ldm_grace_seconds + var.spec.nats.lame_duck_seconds + 20
  nats_pid_dir           = "/var/run/nats"
  nats_pid_file          = "${local.nats_pid_dir}/nats.pid"
  # Every server of a roll waits for JetStream to catch up (startup probe), one at a time.
  nats_rollout_timeout = "${max(900, var.spec.nats.replicas * (local.nats_grace_seconds + 600))}s"

  # TLS (spec.nats_tls_secret): the servers mount the whole kubernetes.io/tls Secret, the clients
  # only its ca.crt.
  nats_tls_dir = "/etc/nats-tls"
  nats_tls = var.spec.nats_tls_secret == null ? null : {
    cert_file = "${local.nats_tls_dir}/tls.crt"
    key_file  = "${local.nats_tls_dir}/tls.key"
    ca_file   = "${local.nats_tls_dir}/ca.crt"
  }
  nats_client_tls_dir  = "/etc/quota/nats-tls"
  nats_client_tls_args = var.spec.nats_tls_secret == null ? [] : ["--nats-tls-ca=${local.nats_client_tls_dir}/ca.crt"]

  # process => its NATS user (natsrole.LimiterProcess) and password.
  nats_process_users = { for p in local.limiter_processes : p => "limiter-${local.name}.${p}" }
  nats_process_passwords = {
    for p in local.limiter_processes : p => sha256("quota-nats-process-password\n${local.name}\n${p}\n${var.nats_passwords["limiter-${local.name}"]}")
  }
  # In the template's order (natsconf.UsersOf), then the gateway.
  nats_users = concat(
    flatten([for r in local.nats_regions : r == local.name ? [for p in local.limiter_processes : local.nats_process_users[p]] : ["limiter-${r}"]]),
    ["control-plane", "reconciler", "gateway"],
  )
  nats_users_here = concat(
    values(local.nats_process_users),
    ["gateway"],
    local.is_control_region ? ["control-plane"] : [],
    local.hosts_reconciler ? ["reconciler"] : [],
  )
  nats_user_passwords = merge(var.nats_passwords, { for p, u in local.nats_process_users : u => local.nats_process_passwords[p] })
  nats_server_passwords = {
    for u in local.nats_users : u => (contains(local.nats_users_here, u)
      ? local.nats_user_passwords[u]
      : "disabled-${sha256("quota-nats-disabled-user\n${var.nats_passwords["gateway"]}\n${local.name}\n${u}")}"
    )
  }
  # user => the variable nats-server resolves its password from (internal/natsconf.PasswordEnv).
  nats_password_env = { for u in local.nats_users : u => "QUOTA_NATS_PASSWORD_${upper(replace(replace(u, "-", "_"), ".", "_"))}" }

  # validate.sh renders this template with sample values and checks it with `nats-server -t`.
  # Subjects, stream and bucket are the daemons' defaults.
  nats_conf = templatefile("${path.module}/nats.conf.tftpl", {
    name                   = local.name
    regions                = local.nats_regions
    pid_file               = local.nats_pid_file
    lame_duck_duration     = "${var.spec.nats.lame_duck_seconds}s"
    lame_duck_grace_period = "${local.nats_ldm_grace_seconds}s"
    control_region         = local.control_region
    listen_host            = "0.0.0.0"
    client_port            = 4222
    http_port              = 8222
    cluster_port           = 6222
    gateway_port           = 7222
    store_dir              = "/data/jetstream"
    max_file_store         = var.spec.nats.max_file_store
    routes                 = local.nats_routes
    advertise              = local.gateway_host
    gateways               = [for g in local.gateway_names : { name = g, urls = [var.spec.peers[g]] }]
    tls                    = local.nats_tls
    usage_subject          = "quota.usage"
    gossip_subject         = "quota.gossip"
    quota_base_subject     = "quota.base"
    quota_base_queue       = "quota-base"
    usage_stream           = "QUOTA_USAGE"
    catalog_bucket         = "quota-catalog"
    # Limiter processes with a user each (natsconf.Params.Processes): this region's. Another
    # region's limiters never connect here: its one user limiter-<r> stays, with a disabled
    # password, and scaling it rolls only its own region's NATS.
    processes = { for r in local.nats_regions : r => r == local.name ? local.limiter_processes : [] }
  })
}

# The servers' passwords, one key per user. nats-server parses the value of an environment
# variable as a config value (an unquoted 1e10... is a number, a ';' ends it), so each value is
# stored double-quoted: the password itself has no '"' or '\' (validated).
resource "kubernetes_secret_v1" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  data = { for u in local.nats_users : u => "\"${local.nats_server_passwords[u]}\"" }
}

resource "kubernetes_config_map_v1" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  data = {
    "nats.conf" = local.nats_conf
  }
}

# Client service: limiters and the reconciler connect here (--nats).
resource "kubernetes_service_v1" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  spec {
    selector = local.nats_selector

    port {
      name        = "client"
      port        = 4222
      target_port = "4222"
    }
  }
}

# Headless service: stable per-pod DNS names for cluster routes.
resource "kubernetes_service_v1" "nats_headless" {
  metadata {
    name      = local.nats_headless
    namespace = local.ns
    labels    = local.nats_labels
  }

  spec {
    cluster_ip                  = "None"
    publish_not_ready_addresses = true
    selector                    = local.nats_selector

    port {
      name        = "cluster"
      port        = 6222
      target_port = "6222"
    }
    port {
      name        = "monitor"
      port        = 8222
      target_port = "8222"
    }
  }
}

# Gateway service: what the other regions dial (spec.gateway_url must resolve to it).
resource "kubernetes_service_v1" "nats_gateway" {
  metadata {
    name        = "${local.nats_name}-gateway"
    namespace   = local.ns
    labels      = local.nats_labels
    annotations = var.spec.gateway_service_annotations
  }

  spec {
    type     = var.spec.gateway_service_type
    selector = local.nats_selector
    # Exposed gateways: only the listed ranges get through the cloud load balancer, and the
    # client address is kept (Local) so that the NetworkPolicy's ipBlocks see it.
    load_balancer_source_ranges = var.spec.gateway_service_type == "LoadBalancer" ? var.spec.gateway_source_ranges : null
    external_traffic_policy     = var.spec.gateway_service_type == "ClusterIP" ? null : "Local"

    port {
      name        = "gateway"
      port        = 7222
      target_port = "7222"
    }
  }
}

resource "kubernetes_stateful_set_v1" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  # Terraform waits until every server runs the new template: the limiters, the control plane
  # and (through the nats_client_url output) the reconciler roll only after it, which is the
  # order a password rotation needs (deploy/RUNBOOK.md, "Rotating a NATS password").
  wait_for_rollout = true

  spec {
    service_name          = local.nats_headless
    replicas              = var.spec.nats.replicas
    pod_management_policy = "Parallel"

    selector {
      match_labels = local.nats_selector
    }

    # A roll replaces one server at a time, and the next only once the new one's startup probe
    # says JetStream has caught up: R3 streams never lose two replicas to a roll.
    update_strategy {
      type = "RollingUpdate"
      rolling_update {
        partition = 0
      }
    }

    # JetStream data outlives the StatefulSet and scale-downs (Kubernetes' default, explicit).
    persistent_volume_claim_retention_policy {
      when_deleted = "Retain"
      when_scaled  = "Retain"
    }

    template {
      metadata {
        labels = local.nats_labels
        annotations = {
          "quota.dev/config-hash" = sha256(local.nats_conf)
          # nats-server reads its environment only at start: a changed password rolls the pods.
          "quota.dev/secret-hash" = sha256(jsonencode(kubernetes_secret_v1.nats.data))
        }
      }

      spec {
        automount_service_account_token  = false
        termination_grace_period_seconds = local.nats_grace_seconds

        # Not root: nats-server needs no privilege (ports above 1024, its own volume).
        security_context {
          run_as_non_root = true
          run_as_user     = 1000
          run_as_group    = 1000
          fs_group        = 1000
        }

        # Two servers of one region on one node (or, with zones, in one zone) would make one
        # failure cost JetStream its quorum: both are required apart.
        affinity {
          dynamic "node_affinity" {
            for_each = local.zoned ? [var.spec.zones] : []
            content {
              required_during_scheduling_ignored_during_execution {
                node_selector_term {
                  match_expressions {
                    key      = local.zone_key
                    operator = "In"
                    values   = node_affinity.value
                  }
                }
              }
            }
          }
          pod_anti_affinity {
            dynamic "required_during_scheduling_ignored_during_execution" {
              for_each = local.zoned ? [local.host_key, local.zone_key] : [local.host_key]
              content {
                topology_key = required_during_scheduling_ignored_during_execution.value
                label_selector {
                  match_labels = local.nats_selector
                }
              }
            }
          }
        }

        container {
          name  = "nats"
          image = var.spec.images.nats
          args  = ["--config", "/etc/nats/nats.conf"]

          env {
            name = "POD_NAME"
            value_from {
              field_ref {
                field_path = "metadata.name"
              }
            }
          }
          dynamic "env" {
            for_each = local.nats_users
            content {
              name = local.nats_password_env[env.value]
              value_from {
                secret_key_ref {
                  name = kubernetes_secret_v1.nats.metadata[0].name
                  key  = env.value
                }
              }
            }
          }

          port {
            name           = "client"
            container_port = 4222
          }
          port {
            name           = "cluster"
            container_port = 6222
          }
          port {
            name           = "gateway"
            container_port = 7222
          }
          port {
            name           = "monitor"
            container_port = 8222
          }

          # Lame duck on stop: the server stops accepting clients and moves its clients away over
          # lame_duck_duration, then exits. The hook returns at once; the kubelet's SIGTERM
          # that follows finds the server already in lame duck, and the grace period
          # (lame_duck_grace_period + lame_duck_duration + 20 s) lets it finish.
          lifecycle {
            pre_stop {
              exec {
                command = ["nats-server", "--signal", "ldm=${local.nats_pid_file}"]
              }
            }
          }

          # Started = JetStream is current: /healthz without options fails until this server has
          # caught up with the meta group and its streams and consumers. Up to 15 minutes.
          startup_probe {
            http_get {
              path = "/healthz"
              port = "8222"
            }
            period_seconds    = 10
            timeout_seconds   = 5
            failure_threshold = 90
          }
          # Ready = the server and its JetStream run; not tied to the whole super-cluster, so a
          # meta-leader election elsewhere does not empty the client Service.
          readiness_probe {
            http_get {
              path = "/healthz?js-server-only=true"
              port = "8222"
            }
            period_seconds    = 10
            timeout_seconds   = 5
            failure_threshold = 3
          }
          liveness_probe {
            http_get {
              path = "/healthz?js-enabled-only=true"
              port = "8222"
            }
            period_seconds    = 30
            timeout_seconds   = 10
            failure_threshold = 3
          }

          resources {
            requests = { cpu = "500m", memory = "1Gi" }
            limits   = { cpu = "2", memory = "4Gi" }
          }

          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            capabilities {
              drop = ["ALL"]
            }
          }

          volume_mount {
            name       = "config"
            mount_path = "/etc/nats"
          }
          volume_mount {
            name       = "data"
            mount_path = "/data"
          }
          volume_mount {
            name       = "pid"
            mount_path = local.nats_pid_dir
          }
          dynamic "volume_mount" {
            for_each = var.spec.nats_tls_secret == null ? [] : [local.nats_tls_dir]
            content {
              name       = "tls"
              mount_path = volume_mount.value
              read_only  = true
            }
          }
        }

        volume {
          name = "config"
          config_map {
            name = kubernetes_config_map_v1.nats.metadata[0].name
          }
        }
        # The pid file, for the preStop hook's `nats-server --signal`.
        volume {
          name = "pid"
          empty_dir {}
        }
        dynamic "volume" {
          for_each = var.spec.nats_tls_secret == null ? [] : [var.spec.nats_tls_secret]
          content {
            name = "tls"
            secret {
              secret_name  = volume.value
              default_mode = "0440"
            }
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
        storage_class_name = var.spec.nats.storage_class
        resources {
          requests = {
            storage = var.spec.nats.storage_size
          }
        }
      }
    }
  }

  timeouts {
    create = local.nats_rollout_timeout
    update = local.nats_rollout_timeout
  }
}
