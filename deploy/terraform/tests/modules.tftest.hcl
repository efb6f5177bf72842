# Plans modules/region and modules/ledger on their own (run "module" blocks) against a mocked
# kubernetes provider, so that assertions can read their resources: the Secrets hold the tokens,
# the Deployments read them by secretKeyRef (never a literal value or an argument), the
# NetworkPolicies admit the configured namespaces only, and the grace periods cover the shutdown
# delay plus the drain.

mock_provider "kubernetes" {}

run "region_tokens_network_shutdown" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "eu"
      image       = "registry.example.com/quota:test"
      weights     = { eu = 0.6, us = 0.4 }
      gateway_url = "nats://gw.eu.example.com:7222"
      peers       = { us = "nats://gw.us.example.com:7222" }
      limiter     = { shutdown_delay_seconds = 7, drain_seconds = 15 }
      network = {
        api_client_namespaces       = ["checkout", "search"]
        api_client_namespace_labels = { "quota.dev/client" = "true" }
        prometheus_namespace        = "monitoring"
      }
    }
    admin_token    = "TEST-ADMIN-TOKEN-0123456789"
    redis_password = "TEST-REDIS-EU"
    check_tokens   = ["TEST-CHECK-TOKEN-0001", "TEST-CHECK-TOKEN-0002"]
    read_tokens    = ["TEST-READ-TOKEN-00001"]
  }

  # The Secret holds the token lists, comma-joined (the daemon's flag format).
  assert {
    condition     = kubernetes_secret.limiter.data["check-token"] == "TEST-CHECK-TOKEN-0001,TEST-CHECK-TOKEN-0002"
    error_message = "the limiter Secret must hold the check tokens under check-token"
  }
  assert {
    condition     = kubernetes_secret.limiter.data["read-token"] == "TEST-READ-TOKEN-00001"
    error_message = "the limiter Secret must hold the read tokens under read-token"
  }

  # The Deployment reads them from that Secret by secretKeyRef.
  assert {
    condition = alltrue([
      for name, key in { QUOTA_CHECK_TOKEN = "check-token", QUOTA_READ_TOKEN = "read-token", QUOTA_ADMIN_TOKEN = "admin-token" } :
      [
        for e in kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].env :
        "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == name
      ] == ["${kubernetes_secret.limiter.metadata[0].name}/${key}"]
    ])
    error_message = "QUOTA_CHECK_TOKEN, QUOTA_READ_TOKEN and QUOTA_ADMIN_TOKEN must come from the limiter Secret by secretKeyRef"
  }
  assert {
    condition = !anytrue([
      for e in kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].env :
      e.value != null && strcontains(coalesce(e.value, "-"), "TEST-")
    ])
    error_message = "a secret is set as a literal environment value"
  }
  assert {
    condition     = !anytrue([for a in kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].args : strcontains(a, "TEST-") || startswith(a, "--check-token") || startswith(a, "--read-token")])
    error_message = "a token is in the limiter arguments"
  }
  assert {
    condition     = !strcontains(jsonencode(kubernetes_deployment.limiter.spec[0].template[0].metadata[0].annotations), "TEST-")
    error_message = "a secret is in the pod annotations"
  }

  # Graceful stop: explicit --shutdown-delay, grace > delay + drain, /readyz readiness, no preStop.
  assert {
    condition     = contains(kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=7s")
    error_message = "--shutdown-delay must be passed explicitly"
  }
  assert {
    condition     = kubernetes_deployment.limiter.spec[0].template[0].spec[0].termination_grace_period_seconds > 7 + 15
    error_message = "terminationGracePeriodSeconds (${kubernetes_deployment.limiter.spec[0].template[0].spec[0].termination_grace_period_seconds}) must exceed shutdown delay + drain (22)"
  }
  assert {
    condition     = kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].path == "/readyz"
    error_message = "the readiness probe must be /readyz"
  }
  assert {
    condition     = length(kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].lifecycle) == 0
    error_message = "no preStop hook: the daemon implements the shutdown delay"
  }

  # NetworkPolicy: HTTP from the named namespaces and the labelled ones, Prometheus separately,
  # memberlist from this region's limiters.
  assert {
    condition = (
      kubernetes_network_policy.limiter.spec[0].policy_types == tolist(["Ingress"]) &&
      kubernetes_network_policy.limiter.spec[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" })
    )
    error_message = "the NetworkPolicy must select this region's limiters, for ingress"
  }
  assert {
    condition = (
      kubernetes_network_policy.limiter.spec[0].ingress[0].ports[0].port == "8080" &&
      length(kubernetes_network_policy.limiter.spec[0].ingress[0].from) == 2 &&
      kubernetes_network_policy.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].key == "kubernetes.io/metadata.name" &&
      kubernetes_network_policy.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].operator == "In" &&
      kubernetes_network_policy.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["checkout", "search"]) &&
      kubernetes_network_policy.limiter.spec[0].ingress[0].from[1].namespace_selector[0].match_labels == tomap({ "quota.dev/client" = "true" })
    )
    error_message = "HTTP ingress must list the API namespaces and the label selector: ${jsonencode(kubernetes_network_policy.limiter.spec[0].ingress[0])}"
  }
  assert {
    condition = (
      length(kubernetes_network_policy.limiter.spec[0].ingress) == 3 &&
      kubernetes_network_policy.limiter.spec[0].ingress[1].ports[0].port == "8080" &&
      kubernetes_network_policy.limiter.spec[0].ingress[1].from[0].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "monitoring" })
    )
    error_message = "Prometheus' namespace must reach :8080"
  }
  assert {
    condition = (
      toset([for p in kubernetes_network_policy.limiter.spec[0].ingress[2].ports : "${p.port}/${p.protocol}"]) == toset(["7946/TCP", "7946/UDP"]) &&
      kubernetes_network_policy.limiter.spec[0].ingress[2].from[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" })
    )
    error_message = "memberlist (7946 TCP+UDP) must be open between this region's limiters"
  }
}

run "region_default_network_is_own_namespace" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "us"
      namespace   = "quota-us"
      image       = "registry.example.com/quota:test"
      weights     = { eu = 0.6, us = 0.4 }
      gateway_url = "nats://gw.us.example.com:7222"
      peers       = { eu = "nats://gw.eu.example.com:7222" }
    }
    admin_token    = "TEST-ADMIN-TOKEN-0123456789"
    redis_password = "TEST-REDIS-US"
    check_tokens   = ["TEST-CHECK-TOKEN-0001"]
  }

  assert {
    condition = (
      length(kubernetes_network_policy.limiter.spec[0].ingress) == 2 &&
      length(kubernetes_network_policy.limiter.spec[0].ingress[0].from) == 1 &&
      kubernetes_network_policy.limiter.spec[0].ingress[0].from[0].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "quota-us" })
    )
    error_message = "with no API namespaces, only the region's own namespace reaches :8080 (and no Prometheus rule)"
  }
  assert {
    condition     = kubernetes_secret.limiter.data["read-token"] == "" && contains(kubernetes_deployment.limiter.spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=5s")
    error_message = "defaults: no read tokens (empty value = unset), --shutdown-delay=5s"
  }
  assert {
    condition     = kubernetes_deployment.limiter.spec[0].template[0].spec[0].termination_grace_period_seconds > 5 + 20
    error_message = "the default grace period must exceed the default delay + drain"
  }
}

run "region_requires_check_tokens" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name        = "us"
      image       = "registry.example.com/quota:test"
      weights     = { us = 1 }
      gateway_url = "nats://gw.us.example.com:7222"
      peers       = {}
    }
    admin_token    = "TEST-ADMIN-TOKEN-0123456789"
    redis_password = "TEST-REDIS-US"
  }

  expect_failures = [var.check_tokens]
}

run "ledger_tokens_network_shutdown" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region     = "eu"
      namespace  = "quota"
      image      = "registry.example.com/quota:test"
      nats_url   = "nats://nats-eu.quota.svc.cluster.local:4222"
      reconciler = { shutdown_delay_seconds = 8 }
      network = {
        billing_client_namespaces = ["billing", "finance"]
        prometheus_namespace      = "monitoring"
      }
    }
    postgres_password = "TEST-PG-PASSWORD"
    billing_tokens    = ["TEST-BILLING-TOKEN-001", "prefix:acct_=TEST-BILLING-TOKEN-002"]
  }

  assert {
    condition     = kubernetes_secret.ledger.data["billing-token"] == "TEST-BILLING-TOKEN-001,prefix:acct_=TEST-BILLING-TOKEN-002"
    error_message = "the ledger Secret must hold the billing tokens under billing-token"
  }
  assert {
    condition = [
      for e in kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].env :
      "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == "QUOTA_BILLING_TOKEN"
    ] == ["${kubernetes_secret.ledger.metadata[0].name}/billing-token"]
    error_message = "QUOTA_BILLING_TOKEN must come from the ledger Secret by secretKeyRef"
  }
  assert {
    condition     = !anytrue([for a in kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].args : strcontains(a, "TEST-") || startswith(a, "--billing-token")])
    error_message = "a token is in the reconciler arguments"
  }
  assert {
    condition = (
      contains(kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].args, "--shutdown-delay=8s") &&
      kubernetes_deployment.reconciler.spec[0].template[0].spec[0].termination_grace_period_seconds > 8 + 30 &&
      kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].readiness_probe[0].http_get[0].path == "/readyz" &&
      length(kubernetes_deployment.reconciler.spec[0].template[0].spec[0].container[0].lifecycle) == 0
    )
    error_message = "reconciler: explicit --shutdown-delay, grace > delay + drain, /readyz readiness, no preStop"
  }
  assert {
    condition = (
      kubernetes_network_policy.reconciler.spec[0].policy_types == tolist(["Ingress"]) &&
      length(kubernetes_network_policy.reconciler.spec[0].ingress) == 1 &&
      kubernetes_network_policy.reconciler.spec[0].ingress[0].ports[0].port == "8081" &&
      kubernetes_network_policy.reconciler.spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["billing", "finance", "monitoring"])
    )
    error_message = "the reconciler's :8081 must admit the billing namespaces and Prometheus' only: ${jsonencode(kubernetes_network_policy.reconciler.spec[0].ingress)}"
  }
}

run "ledger_closed_by_default" {
  command = plan

  module {
    source = "./modules/ledger"
  }

  variables {
    spec = {
      region    = "eu"
      namespace = "quota"
      image     = "registry.example.com/quota:test"
      nats_url  = "nats://nats-eu.quota.svc.cluster.local:4222"
    }
    postgres_password = "TEST-PG-PASSWORD"
  }

  assert {
    condition     = length(kubernetes_network_policy.reconciler.spec[0].ingress) == 0 && kubernetes_secret.ledger.data["billing-token"] == ""
    error_message = "no billing namespaces and no Prometheus: no ingress to the reconciler; no billing tokens: empty value (billing API off)"
  }
}
