# Plans a 3-region deploy against mocked kubernetes providers (no cluster needed) and checks the
# properties the deploy must have: per-region Redis and memberlist, NATS gateways to every other
# region, weights in the limiter flags, tokens only in the environment, graceful-stop budgets,
# and no secret in any output. modules.tftest.hcl checks the Secrets and NetworkPolicies inside.

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
    quota    = "registry.example.com/quota@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    nats     = "nats@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    redis    = "redis@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    postgres = "postgres@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
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
  redis_passwords = {
    eu = "TEST-REDIS-EU"
    us = "TEST-REDIS-US"
    ap = "TEST-REDIS-AP"
  }
  nats_passwords = {
    "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
    "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
    "limiter-ap"    = "TEST-NATS-LIMITER-AP-0001"
    "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
    "reconciler"    = "TEST-NATS-RECONCILER-0001"
    "gateway"       = "TEST-NATS-GATEWAY-000001"
  }
  gateway_source_ranges = ["198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24"]
  # Every region its own tokens (two check tokens in eu: a rotation).
  check_tokens = {
    eu = ["TEST-CHECK-TOKEN-EU-01", "TEST-CHECK-TOKEN-EU-02"]
    us = ["TEST-CHECK-TOKEN-US-01"]
    ap = ["TEST-CHECK-TOKEN-AP-01"]
  }
  read_tokens               = { eu = ["TEST-READ-TOKEN-EU-01"], us = ["TEST-READ-TOKEN-US-01"] }
  billing_tokens            = ["TEST-BILLING-TOKEN-001", "prefix:acct_=TEST-BILLING-TOKEN-002"]
  api_client_namespaces     = ["checkout", "search"]
  prometheus_namespace      = "monitoring"
  billing_client_namespaces = ["billing"]
  ledger_region             = "eu"
  ledger                    = { postgres = { development_in_cluster = true } }
  regions = {
    eu = {
      slot        = 0
      weight      = 0.5
      gateway_url = "nats://gw.eu.example.com:7222"
      kube        = { config_path = "~/.kube/config", context = "eu-cluster" }
      redis       = { endpoint = "eu-redis.cache.example.com:6379", cidrs = ["10.20.0.0/16"], tls = true }
      limiter     = { replicas = 6, shutdown_delay_seconds = 10 }
    }
    us = {
      slot        = 1
      weight      = 0.3
      gateway_url = "nats://gw.us.example.com:7222"
      kube        = { config_path = "~/.kube/config", context = "us-cluster" }
    }
    ap = {
      slot        = 2
      weight      = 0.2
      gateway_url = "nats://gw.ap.example.com:7222"
      kube        = { config_path = "~/.kube/config", context = "ap-cluster" }
    }
  }
}

run "three_regions" {
  command = plan

  assert {
    condition     = length(output.regions) == 3 && length(module.region_0) == 1 && length(module.region_1) == 1 && length(module.region_2) == 1 && length(module.region_3) == 0 && length(module.region_4) == 0
    error_message = "three regions must use slots 0..2 and leave slots 3 and 4 empty"
  }

  # Each region gets its own Redis endpoint: eu its managed one, us and ap their own StatefulSet.
  assert {
    condition     = length(distinct([for r in values(output.regions) : r.redis_endpoint])) == 3
    error_message = "every region must have its own Redis endpoint: ${jsonencode({ for n, r in output.regions : n => r.redis_endpoint })}"
  }
  assert {
    condition     = output.regions["eu"].redis_endpoint == "eu-redis.cache.example.com:6379" && !output.regions["eu"].redis_in_cluster
    error_message = "eu must use its managed Redis endpoint and no StatefulSet"
  }
  assert {
    condition = alltrue([
      for n in ["us", "ap"] :
      output.regions[n].redis_in_cluster && output.regions[n].redis_endpoint == "redis-${n}.quota-${n}.svc.cluster.local:6379"
    ])
    error_message = "us and ap must each run their own Redis StatefulSet"
  }
  assert {
    condition     = alltrue([for n, args in output.limiter_args : !anytrue([for a in args : startswith(a, "--redis=")])])
    error_message = "the Redis URL carries a password: it must come from QUOTA_REDIS (Secret), not from args"
  }
  assert {
    condition     = alltrue([for m in concat(module.region_0, module.region_1, module.region_2) : contains(m.limiter_env_names, "QUOTA_REDIS")])
    error_message = "limiters must get QUOTA_REDIS from the environment"
  }
  # A stolen limiter credential: every region's memberlist is encrypted with its own key (from
  # the environment), and no limiter holds the admin token (the control plane alone does).
  assert {
    condition = alltrue([for m in concat(module.region_0, module.region_1, module.region_2) :
      contains(m.limiter_env_names, "QUOTA_MEMBERLIST_KEY") && !contains(m.limiter_env_names, "QUOTA_ADMIN_TOKEN")
    ])
    error_message = "every region's limiters need QUOTA_MEMBERLIST_KEY and must not get QUOTA_ADMIN_TOKEN: ${jsonencode({ for m in concat(module.region_0, module.region_1, module.region_2) : m.name => m.limiter_env_names })}"
  }
  assert {
    condition = alltrue([for n, args in output.limiter_args : !anytrue([for a in args :
      startswith(a, "--memberlist-key") || strcontains(a, "VEVTVC1NRU1CRVJ")
    ])])
    error_message = "the memberlist key must come from the environment, not from args"
  }

  # Check and read tokens reach every region through the environment (Secret), never as args.
  assert {
    condition     = alltrue([for m in concat(module.region_0, module.region_1, module.region_2) : contains(m.limiter_env_names, "QUOTA_CHECK_TOKEN") && contains(m.limiter_env_names, "QUOTA_READ_TOKEN")])
    error_message = "limiters must get QUOTA_CHECK_TOKEN and QUOTA_READ_TOKEN from the environment"
  }
  assert {
    condition = alltrue([for n, args in output.limiter_args : !anytrue([for a in args :
      startswith(a, "--check-token") || startswith(a, "--read-token") || startswith(a, "--admin-token") || strcontains(a, "TEST-")
    ])])
    error_message = "a token is in the limiter arguments: ${jsonencode(output.limiter_args)}"
  }
  assert {
    condition     = !anytrue([for a in module.ledger_0[0].reconciler_args : startswith(a, "--billing-token") || strcontains(a, "TEST-")])
    error_message = "a token is in the reconciler arguments"
  }

  # Graceful stop: --shutdown-delay is explicit, and the grace period covers delay + drain.
  assert {
    condition     = contains(output.limiter_args["eu"], "--shutdown-delay=10s") && contains(output.limiter_args["us"], "--shutdown-delay=5s")
    error_message = "--shutdown-delay must follow limiter.shutdown_delay_seconds (default 5): ${jsonencode(output.limiter_args)}"
  }
  assert {
    condition = alltrue([for m in concat(module.region_0, module.region_1, module.region_2) :
      m.limiter_termination_grace_seconds > var.regions[m.name].limiter.shutdown_delay_seconds + var.regions[m.name].limiter.drain_seconds
    ])
    error_message = "terminationGracePeriodSeconds must exceed shutdown delay + drain"
  }
  assert {
    condition     = contains(module.ledger_0[0].reconciler_args, "--shutdown-delay=5s") && module.ledger_0[0].reconciler_termination_grace_seconds > 5 + 30
    error_message = "the reconciler needs --shutdown-delay and a grace period above delay + drain"
  }

  # Each region gets its own memberlist headless service, and its limiters join that one.
  assert {
    condition     = length(distinct([for r in values(output.regions) : r.memberlist_service])) == 3
    error_message = "every region must have its own memberlist service"
  }
  assert {
    condition = alltrue([
      for n, r in output.regions :
      contains(output.limiter_args[n], "--memberlist-join=${r.memberlist_service}.quota-${n}.svc.cluster.local:7946")
    ])
    error_message = "each region's limiters must join their own region's memberlist service"
  }

  # The NATS gateway list of each region names every other region, and only those.
  assert {
    condition = alltrue([
      for n, r in output.regions :
      r.nats_gateways == sort([for o in keys(var.regions) : o if o != n])
    ])
    error_message = "gateways: ${jsonencode({ for n, r in output.regions : n => r.nats_gateways })}"
  }
  assert {
    condition = alltrue([
      for m in concat(module.region_0, module.region_1, module.region_2) : alltrue([
        for o in keys(var.regions) : (
          o == m.name
          ? !strcontains(m.nats_config, "{ name: \"${o}\"")
          : strcontains(m.nats_config, "{ name: \"${o}\", urls: [\"nats://gw.${o}.example.com:7222\"] }")
        )
      ])
    ])
    error_message = "nats.conf must list a gateway for every other region with its URL, and none for itself"
  }
  assert {
    condition = alltrue([
      for m in concat(module.region_0, module.region_1, module.region_2) :
      strcontains(m.nats_config, "gateway {\n  name: \"${m.name}\"") && strcontains(m.nats_config, "cluster {\n  name: \"${m.name}\"") && strcontains(m.nats_config, "jetstream {")
    ])
    error_message = "nats.conf must name cluster and gateway after the region and enable JetStream"
  }

  # Weights reach the limiter flags, identical in every region.
  assert {
    condition     = alltrue([for n, args in output.limiter_args : contains(args, "--region-weights=ap=0.2,eu=0.5,us=0.3")])
    error_message = "--region-weights missing or wrong: ${jsonencode(output.limiter_args)}"
  }
  assert {
    condition     = alltrue([for n, args in output.limiter_args : contains(args, "--region=${n}")])
    error_message = "each limiter must get its own --region"
  }
  assert {
    condition     = contains(output.limiter_args["eu"], "--processes=6") && contains(output.limiter_args["us"], "--processes=3")
    error_message = "--processes must follow the replica count"
  }

  # NATS roles: each region's limiters as limiter-<region>, the control plane in the ledger
  # region (control_region unset), the reconciler as reconciler. The usage stream and the
  # catalogue bucket: R3, placed in the ledger region's NATS cluster, whoever creates them.
  assert {
    condition = alltrue([for n, args in output.limiter_args :
      contains(args, "--nats-user=limiter-${n}.limiter-${n}-0") && contains(args, "--usage-stream-replicas=3") && contains(args, "--usage-stream-cluster=eu") &&
      contains(args, "--catalog-replicas=3") && contains(args, "--catalog-cluster=eu") && !contains(args, "--control-plane")
    ])
    error_message = "every region's first limiter process needs --nats-user=limiter-<region>.limiter-<region>-0, --usage-stream-replicas=3, --usage-stream-cluster=eu, --catalog-replicas=3 and --catalog-cluster=eu (the ledger region): ${jsonencode(output.limiter_args)}"
  }
  assert {
    condition     = alltrue([for m in concat(module.region_0, module.region_1, module.region_2) : contains(m.limiter_env_names, "QUOTA_NATS_PASSWORD")])
    error_message = "limiters must get QUOTA_NATS_PASSWORD from the environment"
  }
  assert {
    condition = alltrue([for m in concat(module.region_0, module.region_1, module.region_2) :
      toset(m.nats_env_names) == toset(concat(
        ["POD_NAME", "QUOTA_NATS_PASSWORD_CONTROL_PLANE", "QUOTA_NATS_PASSWORD_RECONCILER", "QUOTA_NATS_PASSWORD_GATEWAY"],
        [for r in ["ap", "eu", "us"] : "QUOTA_NATS_PASSWORD_LIMITER_${upper(r)}" if r != m.name],
        [for p in m.limiter_processes : "QUOTA_NATS_PASSWORD_LIMITER_${upper(m.name)}_${upper(replace(p, "-", "_"))}"],
      ))
    ])
    error_message = "every region's NATS pods need every password variable the template references: one per own limiter process, one per other region: ${jsonencode({ for m in concat(module.region_0, module.region_1, module.region_2) : m.name => m.nats_env_names })}"
  }
  # Scaling is limiter.replicas: one process (StatefulSet, NATS user) each.
  assert {
    condition     = output.regions.eu.limiter_processes == [for i in range(6) : "limiter-eu-${i}"] && output.regions.us.limiter_processes == ["limiter-us-0", "limiter-us-1", "limiter-us-2"]
    error_message = "limiter.replicas processes per region, limiter-<region>-<i>: ${jsonencode({ for n, r in output.regions : n => r.limiter_processes })}"
  }
  assert {
    condition = (
      output.control_plane.region == "eu" &&
      output.control_plane.service == "control-plane-eu.quota-eu.svc.cluster.local:8080" &&
      contains(output.control_plane.args, "--control-plane") && contains(output.control_plane.args, "--nats-user=control-plane") &&
      contains(output.control_plane.args, "--catalog-replicas=3") && contains(output.control_plane.args, "--catalog-cluster=eu") &&
      contains(output.control_plane.args, "--usage-stream-replicas=3") && contains(output.control_plane.args, "--usage-stream-cluster=eu") &&
      module.region_1[0].control_plane_service == null && module.region_2[0].control_plane_service == null
    )
    error_message = "one control plane, in the ledger region: ${jsonencode(output.control_plane)}"
  }
  assert {
    condition = (
      contains(module.ledger_0[0].reconciler_args, "--nats-user=reconciler") && contains(module.ledger_0[0].reconciler_args, "--stream-replicas=3") &&
      contains(module.ledger_0[0].reconciler_args, "--stream-cluster=eu") &&
      contains(module.ledger_0[0].reconciler_args, "--stream-max-bytes=1073741824") && contains(module.ledger_0[0].reconciler_env_names, "QUOTA_NATS_PASSWORD")
    )
    error_message = "the reconciler connects as NATS user reconciler (password from the environment) with R3 stream flags, placed in eu"
  }

  # Secrets never reach an output.
  assert {
    condition     = !issensitive(output.regions) && !issensitive(output.limiter_args) && !issensitive(output.ledger) && !issensitive(output.control_plane)
    error_message = "an output carries a sensitive value"
  }
  assert {
    condition = alltrue([
      for s in ["TEST-ADMIN-TOKEN", "TEST-PG-PASSWORD", "TEST-REDIS-", "TEST-CHECK-TOKEN", "TEST-READ-TOKEN", "TEST-BILLING-TOKEN", "TEST-NATS-", "VEVTVC1NRU1CRVJ"] :
      !strcontains(jsonencode([output.regions, output.limiter_args, output.ledger, output.control_plane]), s)
    ])
    error_message = "an output contains a secret value"
  }

  # The ledger sits in its region, next to that region's NATS.
  assert {
    condition     = output.ledger.region == "eu" && output.ledger.postgres_in_cluster && output.ledger.postgres_target == "postgres-eu.quota-eu.svc.cluster.local:5432/quota"
    error_message = "ledger: ${jsonencode(output.ledger)}"
  }
  assert {
    condition     = contains(module.ledger_0[0].reconciler_args, "--nats=nats://nats-eu.quota-eu.svc.cluster.local:4222")
    error_message = "the reconciler must use the ledger region's NATS"
  }
}

run "control_region_elsewhere" {
  command = plan

  variables {
    control_region = "ap"
    regions = {
      eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "~/.kube/config", context = "eu" } }
      us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "~/.kube/config", context = "us" } }
      ap = { slot = 2, weight = 0.2, gateway_url = "nats://gw.ap.example.com:7222", kube = { config_path = "~/.kube/config", context = "ap" }, nats = { replicas = 1 } }
    }
  }

  # The control plane runs in ap, but the catalogue bucket it creates is placed in the ledger
  # region's cluster (eu, three servers: R3), as is the usage stream of every region, ap's too.
  assert {
    condition = (
      output.control_plane.region == "ap" && output.control_plane.service == "control-plane-ap.quota-ap.svc.cluster.local:8080" &&
      contains(output.control_plane.args, "--region=ap") && contains(output.control_plane.args, "--catalog-replicas=3") &&
      contains(output.control_plane.args, "--catalog-cluster=eu") &&
      module.region_0[0].control_plane_service == null
    )
    error_message = "control_region = ap puts the control plane in ap, its bucket R3 in eu: ${jsonencode(output.control_plane)}"
  }
  assert {
    condition     = alltrue([for n, args in output.limiter_args : contains(args, "--usage-stream-replicas=3") && contains(args, "--usage-stream-cluster=eu")])
    error_message = "usage stream placement follows the ledger region, not the limiter's own: ${jsonencode(output.limiter_args)}"
  }
}

# The ledger region with one NATS server: R1 there, for the stream and the bucket alike.
run "ledger_region_single_nats_server" {
  command = plan

  variables {
    ledger_region = "ap"
    regions = {
      eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "~/.kube/config", context = "eu" } }
      us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "~/.kube/config", context = "us" } }
      ap = { slot = 2, weight = 0.2, gateway_url = "nats://gw.ap.example.com:7222", kube = { config_path = "~/.kube/config", context = "ap" }, nats = { replicas = 1 } }
    }
  }

  assert {
    condition = (
      alltrue([for n, args in output.limiter_args : contains(args, "--usage-stream-replicas=1") && contains(args, "--usage-stream-cluster=ap")]) &&
      contains(output.control_plane.args, "--catalog-replicas=1") && contains(output.control_plane.args, "--catalog-cluster=ap") &&
      contains(module.ledger_2[0].reconciler_args, "--stream-replicas=1") && contains(module.ledger_2[0].reconciler_args, "--stream-cluster=ap") &&
      length(module.ledger_0) == 0
    )
    error_message = "ledger region ap (one NATS server): everything R1, placed in ap; the ledger runs through ap's slot"
  }
}

# Per-region namespaces, and which cluster each slot's provider reaches.
run "namespaces_and_provider_targets" {
  command = plan

  assert {
    condition     = { for n, r in output.regions : n => r.namespace } == { eu = "quota-eu", us = "quota-us", ap = "quota-ap" }
    error_message = "each region gets its own namespace, quota-<region> by default: ${jsonencode(output.regions)}"
  }
  assert {
    condition = (
      output.kube_targets["0"] == { region = "eu", target = "kubeconfig ~/.kube/config context eu-cluster" } &&
      output.kube_targets["1"] == { region = "us", target = "kubeconfig ~/.kube/config context us-cluster" } &&
      output.kube_targets["2"] == { region = "ap", target = "kubeconfig ~/.kube/config context ap-cluster" }
    )
    error_message = "each region's slot must reach its own kubeconfig context: ${jsonencode(output.kube_targets)}"
  }
  # An unused slot reaches no cluster: not the current context, not in-cluster config.
  assert {
    condition = alltrue([for s in ["3", "4"] :
      output.kube_targets[s].region == null && output.kube_targets[s].target == "https://unused-slot-${s}.quota.invalid"
    ])
    error_message = "unused slots must point at an unresolvable .invalid host: ${jsonencode(output.kube_targets)}"
  }
  assert {
    condition     = !issensitive(output.kube_targets) && !issensitive(output.objects)
    error_message = "kube_targets and objects must not be sensitive"
  }
}

run "managed_postgres_and_apply" {
  # apply against the mocks: the whole graph, including computed attributes, goes through.
  command = apply

  variables {
    ledger_region = "us"
    ledger = {
      postgres = { host = "ledger.abc.rds.example.com", cidrs = ["10.30.0.0/16"], user = "billing", database = "ledger" }
    }
  }

  assert {
    condition     = !output.ledger.postgres_in_cluster && output.ledger.postgres_target == "ledger.abc.rds.example.com:5432/ledger" && output.ledger.slot == 1
    error_message = "ledger: ${jsonencode(output.ledger)}"
  }
  # An external Postgres is verified: verify-full unless said otherwise.
  assert {
    condition     = output.ledger.postgres_sslmode == "verify-full"
    error_message = "an external Postgres defaults to sslmode verify-full: ${jsonencode(output.ledger)}"
  }
  assert {
    condition     = length(module.ledger_0) == 0 && length(module.ledger_1) == 1 && contains(output.ledger.reconciler_args, "--stream-cluster=us")
    error_message = "the ledger in us runs through us's slot (module.ledger_1), its stream placed in us"
  }
  assert {
    condition     = !strcontains(jsonencode(output.ledger), "TEST-PG-PASSWORD")
    error_message = "the ledger output contains the Postgres password"
  }
}
