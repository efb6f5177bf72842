# Bad input is refused at plan time with a message naming the variable.

mock_provider "kubernetes" {
  alias = "slot0"
}
mock_provider "kubernetes" {
  alias = "slot1"
}
mock_provider "kubernetes" {
  alias = "slot2"
}
mock_provider "kubernetes" {
  alias = "slot3"
}
mock_provider "kubernetes" {
  alias = "slot4"
}

variables {
  images = {
    quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    nats  = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  }
  admin_token = "TEST-ADMIN-TOKEN-0123456789"
  # One key per region (base64 of 32, 16 and 24 bytes: every accepted length).
  memberlist_keys = {
    eu = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="]
    us = ["VEVTVC1NRU1CRVJLRVlVUw=="]
    ap = ["VEVTVC1NRU1CRVJMSVNULUtFWS1BUC0w"]
  }
  nats_tls_secret   = "nats-tls"
  postgres_password = "TEST-PG-PASSWORD"
  redis_passwords   = { eu = "a", us = "b" }
  nats_passwords = {
    "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
    "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
    "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
    "reconciler"    = "TEST-NATS-RECONCILER-0001"
    "gateway"       = "TEST-NATS-GATEWAY-000001"
  }
  gateway_source_ranges = ["198.51.100.0/24", "203.0.113.7/32"]
  check_tokens          = { eu = ["TEST-CHECK-TOKEN-EU-01"], us = ["TEST-CHECK-TOKEN-US-01"] }
  ledger_region         = "eu"
  ledger                = { postgres = { host = "ledger.example.internal", cidrs = ["10.30.0.0/16"] } }
  regions = {
    eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
    us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
  }
}

run "two_regions_ok" {
  command = plan

  assert {
    condition     = output.regions["eu"].nats_gateways == tolist(["us"]) && output.regions["us"].nats_gateways == tolist(["eu"])
    error_message = "two regions must gateway to each other"
  }
}

run "duplicate_slot" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 0, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "slot_out_of_range" {
  command = plan
  variables {
    regions = {
      eu = { slot = 5, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 1, gateway_url = "nats://gw.eu.example.com:7222" }
    }
    redis_passwords = { eu = "a" }
  }
  expect_failures = [var.regions]
}

run "zero_weight" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0, gateway_url = "nats://gw.eu.example.com:7222" }
    }
    redis_passwords = { eu = "a" }
  }
  expect_failures = [var.regions]
}

run "missing_redis_password" {
  command = plan
  variables {
    redis_passwords = { eu = "a" }
  }
  expect_failures = [var.redis_passwords]
}

run "unknown_ledger_region" {
  command = plan
  variables {
    ledger_region = "mars"
  }
  expect_failures = [var.ledger_region]
}

run "short_admin_token" {
  command = plan
  variables {
    admin_token = "short"
  }
  expect_failures = [var.admin_token]
}

# Check tokens are on by default: no tokens needs the explicit opt-out.
run "check_tokens_required" {
  command = plan
  variables {
    check_tokens = {}
  }
  expect_failures = [var.check_tokens]
}

# Every region its own check tokens: a region without any is refused ...
run "check_tokens_required_per_region" {
  command = plan
  variables {
    check_tokens = { eu = ["TEST-CHECK-TOKEN-EU-01"], us = [] }
  }
  expect_failures = [var.check_tokens]
}

# ... and so is a token shared by two regions (one region's token would work in the other), for
# check and read tokens alike.
run "check_token_shared_by_regions" {
  command = plan
  variables {
    check_tokens = { eu = ["TEST-CHECK-TOKEN-SHARED"], us = ["TEST-CHECK-TOKEN-SHARED"] }
  }
  expect_failures = [var.check_tokens]
}

run "read_token_shared_by_regions" {
  command = plan
  variables {
    read_tokens = { eu = ["TEST-READ-TOKEN-SHARED"], us = ["TEST-READ-TOKEN-SHARED"] }
  }
  expect_failures = [var.read_tokens]
}

run "unauthenticated_checks_opt_out" {
  command = plan
  variables {
    check_tokens                 = {}
    allow_unauthenticated_checks = true
  }

  assert {
    condition     = contains(module.region_0[0].limiter_env_names, "QUOTA_CHECK_TOKEN")
    error_message = "QUOTA_CHECK_TOKEN stays wired (to an empty Secret value, i.e. unset)"
  }
}

run "opt_out_contradicts_tokens" {
  command = plan
  variables {
    allow_unauthenticated_checks = true
  }
  expect_failures = [var.check_tokens]
}

run "short_check_token" {
  command = plan
  variables {
    check_tokens = { eu = ["TEST-CHECK-TOKEN-EU-01", "short"], us = ["TEST-CHECK-TOKEN-US-01"] }
  }
  expect_failures = [var.check_tokens]
}

run "comma_in_read_token" {
  command = plan
  variables {
    read_tokens = { eu = ["TEST-READ-TOKEN-0001,TEST-READ-TOKEN-0002"] }
  }
  expect_failures = [var.read_tokens]
}

run "duplicate_check_token" {
  command = plan
  variables {
    check_tokens = { eu = ["TEST-CHECK-TOKEN-EU-01", "TEST-CHECK-TOKEN-EU-01"], us = ["TEST-CHECK-TOKEN-US-01"] }
  }
  expect_failures = [var.check_tokens]
}

run "scoped_billing_tokens_ok" {
  command = plan
  variables {
    billing_tokens = ["TEST-BILLING-TOKEN-001", "prefix:acct_=TEST-BILLING-TOKEN-002"]
  }
}

run "bad_billing_token" {
  command = plan
  variables {
    billing_tokens = ["prefix:acct_TEST-BILLING-TOKEN-002"]
  }
  expect_failures = [var.billing_tokens]
}

run "bad_namespace_name" {
  command = plan
  variables {
    api_client_namespaces = ["Checkout_Svc"]
  }
  expect_failures = [var.api_client_namespaces]
}

run "drain_too_short" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", limiter = { drain_seconds = 2 } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "grpc_port_on_the_http_port" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", limiter = { grpc_port = 8080 } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "hotkey_metrics_too_many" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", limiter = { hotkey_metrics = 101 } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "otlp_endpoint_not_a_url" {
  command = plan
  variables {
    otlp_endpoint = "otel-collector:4318"
    otlp_egress   = { namespaces = ["observability"] }
  }
  expect_failures = [var.otlp_endpoint]
}

# NATS passwords: one per user, every user, nothing else, long enough, distinct, quotable.

run "missing_nats_password" {
  command = plan
  variables {
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }
  expect_failures = [var.nats_passwords]
}

run "unknown_nats_user" {
  command = plan
  variables {
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "limiter_ap"    = "TEST-NATS-LIMITER-AP-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }
  expect_failures = [var.nats_passwords]
}

run "short_nats_password" {
  command = plan
  variables {
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "short"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }
  expect_failures = [var.nats_passwords]
}

run "quote_in_nats_password" {
  command = plan
  variables {
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-\"US\"-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }
  expect_failures = [var.nats_passwords]
}

run "shared_nats_password" {
  command = plan
  variables {
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-EU-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }
  expect_failures = [var.nats_passwords]
}

# Characters nats-server would misread in an unquoted value (';', '#', a leading 9e1...) are
# fine: the NATS Secret stores every password double-quoted.
run "nats_password_special_characters_ok" {
  command = plan
  variables {
    nats_passwords = {
      "limiter-eu"    = "9e10;a#b{c}[d]$e'f<g>&h"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
  }
}

# The gateway load balancer: no open default.

run "loadbalancer_gateway_needs_source_ranges" {
  command = plan
  variables {
    gateway_source_ranges = []
  }
  expect_failures = [var.gateway_source_ranges]
}

run "nodeport_gateway_needs_source_ranges" {
  command = plan
  variables {
    gateway_source_ranges = []
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", gateway_service_type = "NodePort" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222", gateway_service_type = "ClusterIP" }
    }
  }
  expect_failures = [var.gateway_source_ranges]
}

run "in_cluster_gateways_need_no_source_ranges" {
  command = plan
  variables {
    gateway_source_ranges = []
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, namespace = "quota-eu", gateway_url = "nats://nats-eu-gateway.quota-eu.svc.cluster.local:7222", gateway_service_type = "ClusterIP" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, namespace = "quota-us", gateway_url = "nats://nats-us-gateway.quota-us.svc.cluster.local:7222", gateway_service_type = "ClusterIP" }
    }
  }
}

run "open_gateway_needs_opt_in" {
  command = plan
  variables {
    gateway_source_ranges = ["198.51.100.0/24", "0.0.0.0/0"]
  }
  expect_failures = [var.gateway_source_ranges]
}

run "open_gateway_opt_in" {
  command = plan
  variables {
    gateway_source_ranges       = ["0.0.0.0/0"]
    allow_gateway_from_anywhere = true
  }
}

run "bad_gateway_source_range" {
  command = plan
  variables {
    gateway_source_ranges = ["198.51.100.0"]
  }
  expect_failures = [var.gateway_source_ranges]
}

run "bad_gateway_service_type" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", gateway_service_type = "ExternalName" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "unknown_control_region" {
  command = plan
  variables {
    control_region = "mars"
  }
  expect_failures = [var.control_region]
}

run "small_usage_stream" {
  command = plan
  variables {
    ledger = { usage_stream_max_bytes = 1000 }
  }
  expect_failures = [var.ledger]
}

# Each region's cluster is named explicitly: a kubeconfig file AND context, or host + CA + exec.

run "kube_without_context" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "kube_empty" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = {}, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "kube_two_ways_at_once" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu", host = "https://eu.example.com" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "kube_host_and_exec_ok" {
  command = plan
  variables {
    regions = {
      eu = {
        slot = 0, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222"
        kube = {
          host                   = "https://eu.k8s.example.com"
          cluster_ca_certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
          exec                   = { api_version = "client.authentication.k8s.io/v1beta1", command = "aws", args = ["eks", "get-token", "--cluster-name", "eu"] }
        }
      }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  assert {
    condition     = output.kube_targets["0"].target == "https://eu.k8s.example.com"
    error_message = "host-based kube must reach its host"
  }
}

run "duplicate_namespace" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, namespace = "quota", gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, namespace = "quota", gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

# Regions being decommissioned: never the ledger or control region, never all of them.

run "decommission_ledger_region" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", decommission = true }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
    control_region = "us"
  }
  expect_failures = [var.ledger_region]
}

run "decommission_control_region" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222", decommission = true }
    }
    control_region = "us"
  }
  expect_failures = [var.control_region]
}

run "decommission_everything" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", decommission = true }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222", decommission = true }
    }
  }
  expect_failures = [var.regions]
}

# Images by digest.

run "image_by_tag_refused" {
  command = plan
  variables {
    images = {
      quota = "registry.example.com/quota:v1.2.3"
      nats  = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
      redis = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    }
  }
  expect_failures = [var.images]
}

run "image_by_tag_opt_in" {
  command = plan
  variables {
    allow_image_tags = true
    images           = { quota = "quota:dev", nats = "nats:2.10-alpine", redis = "redis:7.2-alpine" }
  }
}

run "redis_image_needed_for_in_cluster_redis" {
  command = plan
  variables {
    images = {
      quota = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
      nats  = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    }
  }
  expect_failures = [var.images]
}

# Postgres: external (production), or in-cluster only when asked for as development.

run "postgres_in_cluster_needs_development_flag" {
  command = plan
  variables {
    ledger = { postgres = {} }
  }
  expect_failures = [var.ledger]
}

run "postgres_host_and_development_flag" {
  command = plan
  variables {
    ledger = { postgres = { host = "db.example.com", cidrs = ["10.30.0.0/16"], development_in_cluster = true } }
  }
  # (var.images' check, which reads var.ledger, is not evaluated once var.ledger is invalid.)
  expect_failures = [var.ledger]
}

run "postgres_development_needs_image" {
  command = plan
  variables {
    ledger = { postgres = { development_in_cluster = true } }
  }
  expect_failures = [var.images]
}

run "postgres_bad_sslmode" {
  command = plan
  variables {
    ledger = { postgres = { host = "db.example.com", cidrs = ["10.30.0.0/16"], sslmode = "verify_full" } }
  }
  expect_failures = [var.ledger]
}

# Zones, QoS, GOMEMLIMIT's input, lame duck.

run "fewer_zones_than_nats_servers" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", zones = ["eu-west-1a", "eu-west-1b"] }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "guaranteed_needs_whole_cpus" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", limiter = { cpu_limit = "1500m" } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "burstable_takes_fractional_cpus" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", limiter = { qos = "Burstable", cpu_limit = "1500m" } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
}

run "fractional_memory_limit" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", limiter = { memory_limit = "1.5Gi" } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "lame_duck_too_short" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", nats = { lame_duck_seconds = 1 } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "redis_password_with_newline" {
  command = plan
  variables {
    redis_passwords = { eu = "a\nappendonly no", us = "b" }
  }
  expect_failures = [var.redis_passwords]
}

# A stolen credential (issue 28): gateways crossing networks need TLS unless opted out, every
# region needs its own memberlist key, egress needs the addresses of what is outside the cluster.

run "exposed_gateway_needs_tls" {
  command = plan
  variables {
    nats_tls_secret = null
  }
  expect_failures = [var.nats_tls_secret]
}

run "exposed_gateway_plaintext_opt_in" {
  command = plan
  variables {
    nats_tls_secret                 = null
    nats_gateway_insecure_plaintext = true
  }
}

run "in_cluster_gateways_need_no_tls" {
  command = plan
  variables {
    nats_tls_secret = null
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, namespace = "quota-eu", gateway_url = "nats://nats-eu-gateway.quota-eu.svc.cluster.local:7222", gateway_service_type = "ClusterIP" }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, namespace = "quota-us", gateway_url = "nats://nats-us-gateway.quota-us.svc.cluster.local:7222", gateway_service_type = "ClusterIP" }
    }
  }
}

run "memberlist_key_missing_for_a_region" {
  command = plan
  variables {
    memberlist_keys = { eu = ["VEVTVC1NRU1CRVJMSVNULUtFWS1FVS0wMTIzNDU2Nzg="] }
  }
  expect_failures = [var.memberlist_keys]
}

run "memberlist_key_shared_by_regions" {
  command = plan
  variables {
    memberlist_keys = { eu = ["VEVTVC1NRU1CRVJLRVlVUw=="], us = ["VEVTVC1NRU1CRVJLRVlVUw=="] }
  }
  expect_failures = [var.memberlist_keys]
}

run "memberlist_key_wrong_size" {
  command = plan
  variables {
    # base64 of 20 bytes.
    memberlist_keys = { eu = ["VEVTVC1LRVktT0YtVFdFTlRZLUI="], us = ["VEVTVC1NRU1CRVJLRVlVUw=="] }
  }
  expect_failures = [var.memberlist_keys]
}

run "managed_redis_needs_cidrs" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, kube = { config_path = "/etc/kube/config", context = "eu" }, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", redis = { endpoint = "eu.cache.example.com:6379" } }
      us = { slot = 1, kube = { config_path = "/etc/kube/config", context = "us" }, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "external_postgres_needs_cidrs" {
  command = plan
  variables {
    ledger = { postgres = { host = "ledger.example.internal" } }
  }
  expect_failures = [var.ledger]
}

run "otlp_needs_egress" {
  command = plan
  variables {
    otlp_endpoint = "http://otel-collector.observability:4318"
  }
  expect_failures = [var.otlp_egress]
}
