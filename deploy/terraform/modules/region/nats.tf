# One NATS cluster per region (JetStream on), joined to the other regions' clusters by gateways
# into one super-cluster: gossip digests and config pushes cross regions over the gateways, and
# usage reports reach the ledger region's reconciler over JetStream.
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

  # validate.sh renders this template with sample values and checks it with `nats-server -t`.
  nats_conf = templatefile("${path.module}/nats.conf.tftpl", {
    name           = local.name
    store_dir      = "/data/jetstream"
    max_file_store = var.spec.nats.max_file_store
    routes         = local.nats_routes
    advertise      = local.gateway_host
    gateways       = [for g in local.gateway_names : { name = g, urls = [var.spec.peers[g]] }]
  })
}

resource "kubernetes_config_map" "nats" {
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
resource "kubernetes_service" "nats" {
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
resource "kubernetes_service" "nats_headless" {
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
resource "kubernetes_service" "nats_gateway" {
  metadata {
    name        = "${local.nats_name}-gateway"
    namespace   = local.ns
    labels      = local.nats_labels
    annotations = var.spec.gateway_service_annotations
  }

  spec {
    type     = var.spec.gateway_service_type
    selector = local.nats_selector

    port {
      name        = "gateway"
      port        = 7222
      target_port = "7222"
    }
  }
}

resource "kubernetes_stateful_set" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  spec {
    service_name          = local.nats_headless
    replicas              = var.spec.nats.replicas
    pod_management_policy = "Parallel"

    selector {
      match_labels = local.nats_selector
    }

    template {
      metadata {
        labels = local.nats_labels
        annotations = {
          "quota.dev/config-hash" = sha256(local.nats_conf)
        }
      }

      spec {
        automount_service_account_token  = false
        termination_grace_period_seconds = 60

        affinity {
          pod_anti_affinity {
            preferred_during_scheduling_ignored_during_execution {
              weight = 100
              pod_affinity_term {
                topology_key = "kubernetes.io/hostname"
                label_selector {
                  match_labels = local.nats_selector
                }
              }
            }
          }
        }

        container {
          name  = "nats"
          image = var.spec.nats.image
          args  = ["--config", "/etc/nats/nats.conf"]

          env {
            name = "POD_NAME"
            value_from {
              field_ref {
                field_path = "metadata.name"
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

          readiness_probe {
            http_get {
              path = "/healthz?js-enabled-only=true"
              port = "8222"
            }
            period_seconds = 5
          }
          liveness_probe {
            http_get {
              path = "/healthz?js-enabled-only=true"
              port = "8222"
            }
            initial_delay_seconds = 10
            period_seconds        = 30
          }

          resources {
            requests {
              cpu    = "500m"
              memory = "1Gi"
            }
            limits {
              cpu    = "2"
              memory = "4Gi"
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
        }

        volume {
          name = "config"
          config_map {
            name = kubernetes_config_map.nats.metadata[0].name
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
            storage = var.spec.nats.storage_size
          }
        }
      }
    }
  }
}
