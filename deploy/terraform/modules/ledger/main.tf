locals {
  name = "reconciler-${var.spec.region}"
  svc  = "${var.spec.namespace}.svc.cluster.local"
  labels = merge(var.spec.labels, {
    "app.kubernetes.io/part-of"    = "quota"
    "app.kubernetes.io/managed-by" = "terraform"
    "quota.dev/region"             = var.spec.region
  })
  selector = { "app.kubernetes.io/name" = "reconciler", "quota.dev/region" = var.spec.region }

  pg            = var.spec.postgres
  pg_in_cluster = local.pg.development_in_cluster
  pg_host       = local.pg_in_cluster ? "postgres-${var.spec.region}.${local.svc}" : local.pg.host
  # An external Postgres is verified by default (verify-full: the CA signed the certificate AND
  # it names the host), against ca_secret's ca.crt when given, else the image's system roots.
  # The development instance speaks no TLS.
  pg_sslmode      = coalesce(local.pg.sslmode, local.pg_in_cluster ? "disable" : "verify-full")
  pg_ca_dir       = "/etc/quota/postgres-ca"
  pg_ca_param     = local.pg.ca_secret == null ? "" : "&sslrootcert=${local.pg_ca_dir}/ca.crt"
  postgres_target = "${local.pg_host}:${local.pg.port}/${local.pg.database}"
  postgres_url    = "postgres://${urlencode(local.pg.user)}:${urlencode(var.postgres_password)}@${local.postgres_target}?sslmode=${local.pg_sslmode}${local.pg_ca_param}"

  # GOMEMLIMIT: 90 % of the reconciler's memory limit, in bytes (see modules/region/main.tf).
  mem_units           = { "" = 1, "k" = 1000, "M" = 1000000, "G" = 1000000000, "T" = 1000000000000, "Ki" = 1024, "Mi" = 1048576, "Gi" = 1073741824, "Ti" = 1099511627776 }
  reconciler_mem      = regex("^([0-9]+)([A-Za-z]*)$", var.spec.reconciler.memory_limit)
  reconciler_memlimit = format("%d", floor(tonumber(local.reconciler_mem[0]) * local.mem_units[local.reconciler_mem[1]] * 0.9))

  # `reconciler serve -help` (hclcheck_test.go checks every flag against it). --postgres,
  # --billing-token and --nats-password come from env QUOTA_POSTGRES, QUOTA_BILLING_TOKEN and
  # QUOTA_NATS_PASSWORD (Secret). The usage stream is placed in spec.usage_stream.cluster (the
  # ledger region's NATS cluster) when the reconciler is the one that creates it.
  nats_client_tls_dir = "/etc/quota/nats-tls"
  reconciler_args = concat([
    "serve",
    "--listen=:8081",
    "--nats=${var.spec.nats_url}",
    "--nats-user=reconciler",
    "--stream-replicas=${var.spec.usage_stream.replicas}",
    ], var.spec.usage_stream.cluster == null ? [] : ["--stream-cluster=${var.spec.usage_stream.cluster}"], [
    "--stream-max-bytes=${var.spec.usage_stream.max_bytes}",
    "--shutdown-delay=${var.spec.reconciler.shutdown_delay_seconds}s",
    ], var.spec.nats_tls_secret == null ? [] : ["--nats-tls-ca=${local.nats_client_tls_dir}/ca.crt"],
    var.spec.otlp_endpoint == null ? [] : ["--otlp-endpoint=${var.spec.otlp_endpoint}"],
  )
  # Namespaces allowed to reach :8081: billing clients and Prometheus (for /metrics).
  reconciler_client_namespaces = distinct(concat(
    var.spec.network.billing_client_namespaces,
    var.spec.network.prometheus_namespace == null ? [] : [var.spec.network.prometheus_namespace],
  ))
  # SIGTERM -> /readyz fails, serve on for the delay (no preStop hook), then stop (the reconciler
  # allows itself 30 s); SIGKILL 5 s after that budget.
  reconciler_grace_seconds = var.spec.reconciler.shutdown_delay_seconds + var.spec.reconciler.drain_seconds + 5
}

resource "kubernetes_secret_v1" "ledger" {
  metadata {
    name      = "quota-ledger-${var.spec.region}"
    namespace = var.spec.namespace
    labels    = local.labels
  }

  data = {
    "postgres-url" = local.postgres_url
    # Comma-joined, the --billing-token format; empty counts as unset (billing API off, 503).
    "billing-token" = join(",", var.billing_tokens)
    # NATS user reconciler only.
    "nats-password" = var.nats_password
  }
}

resource "kubernetes_deployment_v1" "reconciler" {
  metadata {
    name      = local.name
    namespace = var.spec.namespace
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "reconciler" })
  }

  spec {
    replicas = var.spec.reconciler.replicas

    selector {
      match_labels = local.selector
    }

    template {
      metadata {
        labels = merge(local.labels, { "app.kubernetes.io/name" = "reconciler" })
        annotations = {
          "prometheus.io/scrape" = "true"
          "prometheus.io/port"   = "8081"
          "prometheus.io/path"   = "/metrics"
          # Environment from a Secret is read at container start: a changed token list (or
          # Postgres password) must roll the pods. One hash over all of the Secret's values.
          "quota.dev/secret-hash" = sha256(jsonencode(kubernetes_secret_v1.ledger.data))
        }
      }

      spec {
        automount_service_account_token  = false
        termination_grace_period_seconds = local.reconciler_grace_seconds

        security_context {
          run_as_non_root = true
          run_as_user     = 65532
          run_as_group    = 65532
        }

        # Schema first: `reconciler migrate` is idempotent and safe to run from every pod.
        init_container {
          name              = "migrate"
          image             = var.spec.images.quota
          image_pull_policy = var.spec.image_pull_policy
          command           = ["/usr/local/bin/reconciler"]
          args              = ["migrate"]

          env {
            name = "QUOTA_POSTGRES"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.ledger.metadata[0].name
                key  = "postgres-url"
              }
            }
          }

          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            capabilities {
              drop = ["ALL"]
            }
          }

          dynamic "volume_mount" {
            for_each = local.pg.ca_secret == null ? [] : [local.pg_ca_dir]
            content {
              name       = "postgres-ca"
              mount_path = volume_mount.value
              read_only  = true
            }
          }
        }

        container {
          name              = "reconciler"
          image             = var.spec.images.quota
          image_pull_policy = var.spec.image_pull_policy
          command           = ["/usr/local/bin/reconciler"]
          args              = local.reconciler_args

          port {
            name           = "http"
            container_port = 8081
          }

          env {
            name = "QUOTA_POSTGRES"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.ledger.metadata[0].name
                key  = "postgres-url"
              }
            }
          }
          env {
            name  = "GOMEMLIMIT"
            value = local.reconciler_memlimit
          }
          env {
            name = "QUOTA_BILLING_TOKEN"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.ledger.metadata[0].name
                key  = "billing-token"
              }
            }
          }
          env {
            name = "QUOTA_NATS_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.ledger.metadata[0].name
                key  = "nats-password"
              }
            }
          }

          # Fails as soon as the shutdown delay starts (two probes 1 s apart).
          readiness_probe {
            http_get {
              path = "/readyz"
              port = "8081"
            }
            period_seconds    = 1
            timeout_seconds   = 1
            failure_threshold = 2
          }
          liveness_probe {
            http_get {
              path = "/healthz"
              port = "8081"
            }
            initial_delay_seconds = 10
            period_seconds        = 10
          }

          resources {
            requests = { cpu = var.spec.reconciler.cpu_request, memory = var.spec.reconciler.memory_request }
            limits   = { cpu = var.spec.reconciler.cpu_limit, memory = var.spec.reconciler.memory_limit }
          }

          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            capabilities {
              drop = ["ALL"]
            }
          }

          dynamic "volume_mount" {
            for_each = var.spec.nats_tls_secret == null ? [] : [local.nats_client_tls_dir]
            content {
              name       = "nats-tls-ca"
              mount_path = volume_mount.value
              read_only  = true
            }
          }
          dynamic "volume_mount" {
            for_each = local.pg.ca_secret == null ? [] : [local.pg_ca_dir]
            content {
              name       = "postgres-ca"
              mount_path = volume_mount.value
              read_only  = true
            }
          }
        }

        # The CA of the external Postgres' certificate (sslrootcert of QUOTA_POSTGRES).
        dynamic "volume" {
          for_each = local.pg.ca_secret == null ? [] : [local.pg.ca_secret]
          content {
            name = "postgres-ca"
            secret {
              secret_name = volume.value
              items {
                key  = "ca.crt"
                path = "ca.crt"
              }
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
  }
}

resource "kubernetes_service_v1" "reconciler" {
  metadata {
    name      = local.name
    namespace = var.spec.namespace
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "reconciler" })
  }

  spec {
    selector = local.selector

    port {
      name        = "http"
      port        = 8081
      target_port = "8081"
    }
  }
}

# Ingress to the reconciler pods: port 8081 (/v1/usage, /metrics) from the billing client
# namespaces and Prometheus' namespace only; with neither, no pod may connect (kubelet probes are
# not subject to NetworkPolicy). Namespaces are matched by their kubernetes.io/metadata.name label.
# Egress: DNS, the ledger region's NATS servers (:4222, this namespace), Postgres (the in-cluster
# pods, or spec.postgres.cidrs) and the OTLP collector when tracing is on; nothing else.
locals {
  dns           = var.spec.network.dns
  nats_selector = { "app.kubernetes.io/name" = "nats", "quota.dev/region" = var.spec.region }
  nats_port     = try(regex(":([0-9]+)$", var.spec.nats_url)[0], "4222")
  otlp_port = var.spec.otlp_endpoint == null ? null : try(
    regex("^https?://[^/?#]*:([0-9]+)(?:[/?#]|$)", var.spec.otlp_endpoint)[0],
    startswith(var.spec.otlp_endpoint, "https://") ? "443" : "80",
  )
}

resource "kubernetes_network_policy_v1" "reconciler" {
  metadata {
    name      = local.name
    namespace = var.spec.namespace
    labels    = merge(local.labels, { "app.kubernetes.io/name" = "reconciler" })
  }

  spec {
    pod_selector {
      match_labels = local.selector
    }
    policy_types = ["Ingress", "Egress"]

    dynamic "ingress" {
      for_each = length(local.reconciler_client_namespaces) > 0 ? [local.reconciler_client_namespaces] : []
      content {
        ports {
          port     = "8081"
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
        port     = local.nats_port
        protocol = "TCP"
      }
      to {
        pod_selector {
          match_labels = local.nats_selector
        }
      }
    }
    egress {
      ports {
        port     = tostring(local.pg.port)
        protocol = "TCP"
      }
      dynamic "to" {
        for_each = local.pg_in_cluster ? [local.pg_selector] : []
        content {
          pod_selector {
            match_labels = to.value
          }
        }
      }
      dynamic "to" {
        for_each = local.pg_in_cluster ? [] : local.pg.cidrs
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
