# What a stolen credential or a taken-over pod can reach (issue 28): plans modules/region and
# modules/ledger on their own against a mocked kubernetes provider and checks that
#   - every region's memberlist is encrypted with its key, delivered from the limiter Secret by
#     secretKeyRef (never an argument);
#   - the admin token is in the control plane's Secret and pod only, not the limiters';
#   - every role's NetworkPolicy restricts egress to the peers it needs (limiters: DNS, NATS,
#     Redis, memberlist, OTLP; control plane: the same without memberlist; reconciler: DNS, NATS,
#     Postgres, OTLP; in-cluster Redis and Postgres: nothing);
#   - the control plane's ingress names admin client pods, never a whole namespace;
#   - a gateway reachable from outside the cluster is refused without TLS unless opted out.

mock_provider "kubernetes" {}

run "region_memberlist_key_and_admin_token" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                  = "eu"
      namespace             = "quota"
      images                = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights               = { eu = 0.6, us = 0.4 }
      gateway_url           = "nats://gw.eu.example.com:7222"
      peers                 = { us = "nats://gw.us.example.com:7222" }
      gateway_source_ranges = ["198.51.100.0/24"]
      nats_tls_secret       = "nats-tls"
      otlp_endpoint         = "http://otel-collector.observability:4318"
      network = {
        admin_client_namespaces = ["ops"]
        otlp_namespaces         = ["observability"]
      }
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg=", "VEVTVC1NRU1CRVJLRVlVUw=="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  # The memberlist key: in the limiter Secret (comma-joined, the first encrypts), read by
  # secretKeyRef as QUOTA_MEMBERLIST_KEY, never an argument.
  assert {
    condition     = kubernetes_secret_v1.limiter.data["memberlist-key"] == "VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg=,VEVTVC1NRU1CRVJLRVlVUw=="
    error_message = "the limiter Secret must hold the memberlist keys under memberlist-key, comma-joined"
  }
  assert {
    condition = [
      for e in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].env :
      "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == "QUOTA_MEMBERLIST_KEY"
    ] == ["quota-limiter-eu/memberlist-key"]
    error_message = "the limiters must read QUOTA_MEMBERLIST_KEY from Secret quota-limiter-eu by secretKeyRef"
  }
  assert {
    condition = !anytrue([for a in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].args :
      startswith(a, "--memberlist-key") || strcontains(a, "VEVTVC1NRU1CRVJ")
    ])
    error_message = "the memberlist key must not be an argument"
  }

  # The admin token: the control plane's Secret and pod only.
  assert {
    condition = (
      !contains(keys(kubernetes_secret_v1.limiter.data), "admin-token") &&
      !strcontains(jsonencode(kubernetes_secret_v1.limiter.data), "TEST-ADMIN-TOKEN") &&
      !contains([for e in values(kubernetes_stateful_set_v1.limiter)[0].spec[0].template[0].spec[0].container[0].env : e.name], "QUOTA_ADMIN_TOKEN")
    )
    error_message = "the limiters must not get the admin token (Secret key admin-token, env QUOTA_ADMIN_TOKEN)"
  }
  assert {
    condition = kubernetes_secret_v1.control_plane[0].data["admin-token"] == "TEST-ADMIN-TOKEN-0123456789" && [
      for e in kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].env :
      "${e.value_from[0].secret_key_ref[0].name}/${e.value_from[0].secret_key_ref[0].key}" if e.name == "QUOTA_ADMIN_TOKEN"
    ] == ["quota-control-plane-eu/admin-token"]
    error_message = "the control plane must read QUOTA_ADMIN_TOKEN from its own Secret"
  }
  assert {
    condition = (
      !contains(keys(kubernetes_secret_v1.control_plane[0].data), "memberlist-key") &&
      !contains([for e in kubernetes_deployment_v1.control_plane[0].spec[0].template[0].spec[0].container[0].env : e.name], "QUOTA_MEMBERLIST_KEY")
    )
    error_message = "the control plane joins no memberlist: it must not get the memberlist key"
  }
}

run "region_egress_and_admin_ingress" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                  = "eu"
      namespace             = "quota"
      images                = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights               = { eu = 0.6, us = 0.4 }
      gateway_url           = "nats://gw.eu.example.com:7222"
      peers                 = { us = "nats://gw.us.example.com:7222" }
      gateway_source_ranges = ["198.51.100.0/24"]
      nats_tls_secret       = "nats-tls"
      otlp_endpoint         = "http://otel-collector.observability:4318"
      network = {
        admin_client_namespaces = ["ops"]
        otlp_namespaces         = ["observability"]
      }
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg=", "VEVTVC1NRU1CRVJLRVlVUw=="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  # Limiters: egress to DNS, NATS, their Redis, the other limiters' memberlist, the collector.
  assert {
    condition = (
      kubernetes_network_policy_v1.limiter.spec[0].policy_types == tolist(["Ingress", "Egress"]) &&
      length(kubernetes_network_policy_v1.limiter.spec[0].egress) == 5
    )
    error_message = "the limiter NetworkPolicy must restrict egress to five rules: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress)}"
  }
  assert {
    condition = (
      toset([for p in kubernetes_network_policy_v1.limiter.spec[0].egress[0].ports : "${p.port}/${p.protocol}"]) == toset(["53/UDP", "53/TCP"]) &&
      kubernetes_network_policy_v1.limiter.spec[0].egress[0].to[0].namespace_selector[0].match_labels == tomap({ "kubernetes.io/metadata.name" = "kube-system" }) &&
      kubernetes_network_policy_v1.limiter.spec[0].egress[0].to[0].pod_selector[0].match_labels == tomap({ "k8s-app" = "kube-dns" })
    )
    error_message = "limiter egress 0 must be DNS (kube-system, k8s-app=kube-dns, 53 UDP and TCP): ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress[0])}"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.limiter.spec[0].egress[1].ports : p.port] == ["4222"] &&
      length(kubernetes_network_policy_v1.limiter.spec[0].egress[1].to) == 1 &&
      kubernetes_network_policy_v1.limiter.spec[0].egress[1].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "nats", "quota.dev/region" = "eu" }) &&
      length(kubernetes_network_policy_v1.limiter.spec[0].egress[1].to[0].namespace_selector) == 0
    )
    error_message = "limiter egress 1 must be this region's NATS servers on 4222: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress[1])}"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.limiter.spec[0].egress[2].ports : p.port] == ["6379"] &&
      length(kubernetes_network_policy_v1.limiter.spec[0].egress[2].to) == 1 &&
      kubernetes_network_policy_v1.limiter.spec[0].egress[2].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "redis", "quota.dev/region" = "eu" })
    )
    error_message = "limiter egress 2 must be this region's in-cluster Redis on 6379: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress[2])}"
  }
  assert {
    condition = (
      toset([for p in kubernetes_network_policy_v1.limiter.spec[0].egress[3].ports : "${p.port}/${p.protocol}"]) == toset(["7946/TCP", "7946/UDP"]) &&
      kubernetes_network_policy_v1.limiter.spec[0].egress[3].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "regional-limiter", "quota.dev/region" = "eu" })
    )
    error_message = "limiter egress 3 must be the region's limiters' memberlist: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress[3])}"
  }
  assert {
    condition = (
      [for p in kubernetes_network_policy_v1.limiter.spec[0].egress[4].ports : p.port] == ["4318"] &&
      kubernetes_network_policy_v1.limiter.spec[0].egress[4].to[0].namespace_selector[0].match_expressions[0].values == toset(["observability"])
    )
    error_message = "limiter egress 4 must be the OTLP collector's namespace on the URL's port: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress[4])}"
  }

  # Control plane: DNS, NATS, Redis, the collector; no memberlist.
  assert {
    condition = (
      kubernetes_network_policy_v1.control_plane[0].spec[0].policy_types == tolist(["Ingress", "Egress"]) &&
      [for e in kubernetes_network_policy_v1.control_plane[0].spec[0].egress : join(",", sort([for p in e.ports : p.port]))] == ["53,53", "4222", "6379", "4318"] &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].egress[1].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "nats", "quota.dev/region" = "eu" }) &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].egress[2].to[0].pod_selector[0].match_labels == tomap({ "app.kubernetes.io/name" = "redis", "quota.dev/region" = "eu" })
    )
    error_message = "the control plane's egress must be DNS, NATS, Redis and the collector only: ${jsonencode(kubernetes_network_policy_v1.control_plane[0].spec[0].egress)}"
  }

  # Control-plane ingress: the labelled admin client pods of the admin namespaces, not the
  # namespaces whole (both selectors in one peer: AND).
  assert {
    condition = (
      length(kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].from) == 1 &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["ops"]) &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].from[0].pod_selector[0].match_labels == tomap({ "quota.dev/admin-client" = "true" })
    )
    error_message = "the control plane's :8080 must admit pods labelled quota.dev/admin-client=true in ops only: ${jsonencode(kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0])}"
  }
  assert {
    condition = alltrue([for i in kubernetes_network_policy_v1.control_plane[0].spec[0].ingress : alltrue([for f in i.from :
      length(f.pod_selector) == 1 || length(f.namespace_selector) == 0 || f.namespace_selector[0].match_labels != tomap({ "kubernetes.io/metadata.name" = "quota" })
    ])])
    error_message = "no ingress rule of the control plane may admit its whole namespace"
  }

  # The in-cluster Redis dials nobody.
  assert {
    condition     = kubernetes_network_policy_v1.redis[0].spec[0].policy_types == tolist(["Ingress", "Egress"]) && length(kubernetes_network_policy_v1.redis[0].spec[0].egress) == 0
    error_message = "the in-cluster Redis must have no egress"
  }
}

# Defaults: admin clients in the own namespace still need the label; a managed Redis is reached
# at its CIDRs on its port; a NodeLocal DNS address is added to the DNS rule.
run "region_own_namespace_admins_managed_redis" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                  = "eu"
      namespace             = "quota"
      images                = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights               = { eu = 1 }
      gateway_url           = "nats://gw.eu.example.com:7222"
      peers                 = {}
      gateway_source_ranges = ["198.51.100.0/24"]
      nats_tls_secret       = "nats-tls"
      redis                 = { endpoint = "a.cache.example.com:6380,b.cache.example.com:6380", cluster = true, cidrs = ["10.20.0.0/16", "10.21.0.0/16"] }
      network               = { dns = { cidrs = ["169.254.20.10/32"] } }
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg=", "VEVTVC1NRU1CRVJLRVlVUw=="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  assert {
    condition = (
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].from[0].namespace_selector[0].match_expressions[0].values == toset(["quota"]) &&
      kubernetes_network_policy_v1.control_plane[0].spec[0].ingress[0].from[0].pod_selector[0].match_labels == tomap({ "quota.dev/admin-client" = "true" })
    )
    error_message = "with no admin namespaces, only labelled pods of the own namespace reach the control plane"
  }
  assert {
    condition = (
      length(kubernetes_network_policy_v1.limiter.spec[0].egress) == 4 &&
      [for p in kubernetes_network_policy_v1.limiter.spec[0].egress[2].ports : p.port] == ["6380"] &&
      [for t in kubernetes_network_policy_v1.limiter.spec[0].egress[2].to : t.ip_block[0].cidr] == ["10.20.0.0/16", "10.21.0.0/16"] &&
      [for t in kubernetes_network_policy_v1.control_plane[0].spec[0].egress[2].to : t.ip_block[0].cidr] == ["10.20.0.0/16", "10.21.0.0/16"] &&
      [for t in kubernetes_network_policy_v1.limiter.spec[0].egress[0].to : t.ip_block[0].cidr if length(t.ip_block) > 0] == ["169.254.20.10/32"]
    )
    error_message = "a managed Redis is reached at redis.cidrs on its port (no OTLP rule without otlp_endpoint), DNS also at dns.cidrs: ${jsonencode(kubernetes_network_policy_v1.limiter.spec[0].egress)}"
  }
}

run "region_exposed_gateway_needs_tls" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                  = "eu"
      images                = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights               = { eu = 1 }
      gateway_url           = "nats://gw.eu.example.com:7222"
      peers                 = {}
      gateway_source_ranges = ["198.51.100.0/24"]
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg=", "VEVTVC1NRU1CRVJLRVlVUw=="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  expect_failures = [var.spec]
}

run "region_exposed_gateway_plaintext_opt_in" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                       = "eu"
      images                     = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights                    = { eu = 1 }
      gateway_url                = "nats://gw.eu.example.com:7222"
      peers                      = {}
      gateway_source_ranges      = ["198.51.100.0/24"]
      gateway_insecure_plaintext = true
    }
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    memberlist_keys = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg=", "VEVTVC1NRU1CRVJLRVlVUw=="]
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  assert {
    condition     = kubernetes_service_v1.nats_gateway.spec[0].type == "LoadBalancer" && !strcontains(kubernetes_config_map_v1.nats.data["nats.conf"], "tls {")
    error_message = "gateway_insecure_plaintext = true must allow a plain LoadBalancer gateway"
  }
}

run "region_bad_memberlist_key" {
  command = plan

  module {
    source = "./modules/region"
  }

  variables {
    spec = {
      name                  = "eu"
      namespace             = "quota"
      images                = { quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", nats = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" }
      weights               = { eu = 0.6, us = 0.4 }
      gateway_url           = "nats://gw.eu.example.com:7222"
      peers                 = { us = "nats://gw.us.example.com:7222" }
      gateway_source_ranges = ["198.51.100.0/24"]
      nats_tls_secret       = "nats-tls"
      otlp_endpoint         = "http://otel-collector.observability:4318"
      network = {
        admin_client_namespaces = ["ops"]
        otlp_namespaces         = ["observability"]
      }
    }
    # base64 of 20 bytes: not an AES key size.
    memberlist_keys = ["VEVTVC1LRVktT0YtVFdFTlRZLUI="]
    admin_token     = "TEST-ADMIN-TOKEN-0123456789"
    redis_password  = "TEST-REDIS-EU"
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    check_tokens = ["TEST-CHECK-TOKEN-0001"]
    read_tokens  = ["TEST-READ-TOKEN-00001"]
  }

  expect_failures = [var.memberlist_keys]
}
