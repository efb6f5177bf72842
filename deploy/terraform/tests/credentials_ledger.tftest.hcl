# The ledger's side of tests/credentials.tftest.hcl: the reconciler may reach DNS, its region's
# NATS servers, Postgres and the OTLP collector only; the development Postgres reaches nothing; an
# external Postgres needs its CIDRs.

mock_provider "kubernetes" {}

run "ledger_egress" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region        = "eu"
      namespace     = "quota"
      images        = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", postgres = "postgres@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      nats_url      = "nats://nats-eu.quota.svc.cluster.local:4222"
      postgres      = { development_in_cluster = true }
      otlp_endpoint = "https://otel.example.com/v1/traces"
      network       = { otlp_cidrs = ["192.0.2.10/32"] }
    }
    postgres_password = "TEST-PG-PASSWORD"
    nats_password     = "TEST-NATS-RECONCILER-0001"
  }

  assert {
    condition = (
      kubernetes_network_policy_v1.reconciler.spec[0].policy_types == tolist(["Ingress", "Egress"]) &&
      [for e in kubernetes_network_policy_v1.reconciler.spec[0].egress : join(",", sort([for p in e.ports : p.port]))] == ["53,53", "4222", "5432", "443"] &&
      kubernetes_network_policy_v1.reconciler.spec[0].egress[0].to[0].pod_selector[0].match_labels == tomap({ "k8s-app" = "kube-dns" }) &&
      kubernetes_network_policy_v1.reconciler.spec[0].egress[1].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "nats", "quota.dev/region" = "eu" }) &&
      kubernetes_network_policy_v1.reconciler.spec[0].egress[2].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "postgres", "quota.dev/region" = "eu" }) &&
      [for t in kubernetes_network_policy_v1.reconciler.spec[0].egress[3].to : t.ip_block[0].cidr] == ["192.0.2.10/32"]
    )
    error_message = "the reconciler's egress must be DNS, NATS, Postgres and the collector (https: 443) only: ${jsonencode(kubernetes_network_policy_v1.reconciler.spec[0].egress)}"
  }
  assert {
    condition     = kubernetes_network_policy_v1.postgres[0].spec[0].policy_types == tolist(["Ingress", "Egress"]) && length(kubernetes_network_policy_v1.postgres[0].spec[0].egress) == 0
    error_message = "the development Postgres must have no egress"
  }
}

run "ledger_external_postgres_egress" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region    = "eu"
      namespace = "quota"
      images    = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      nats_url  = "nats://nats-eu.quota.svc.cluster.local:4222"
      postgres  = { host = "ledger.example.internal", port = 6432, cidrs = ["10.30.0.0/16"] }
    }
    postgres_password = "TEST-PG-PASSWORD"
    nats_password     = "TEST-NATS-RECONCILER-0001"
  }

  assert {
    condition = (
      length(kubernetes_network_policy_v1.reconciler.spec[0].egress) == 3 &&
      [for p in kubernetes_network_policy_v1.reconciler.spec[0].egress[2].ports : p.port] == ["6432"] &&
      [for t in kubernetes_network_policy_v1.reconciler.spec[0].egress[2].to : t.ip_block[0].cidr] == ["10.30.0.0/16"]
    )
    error_message = "an external Postgres is reached at postgres.cidrs on its port: ${jsonencode(kubernetes_network_policy_v1.reconciler.spec[0].egress)}"
  }
}

run "ledger_external_postgres_needs_cidrs" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region    = "eu"
      namespace = "quota"
      images    = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      nats_url  = "nats://nats-eu.quota.svc.cluster.local:4222"
      postgres  = { host = "ledger.example.internal" }
    }
    postgres_password = "TEST-PG-PASSWORD"
    nats_password     = "TEST-NATS-RECONCILER-0001"
  }

  expect_failures = [var.spec]
}
