# Removing a region: the two steps of deploy/RUNBOOK.md "Removing a region", planned and applied
# against mocked providers. Three regions are applied; step 1 (regions.ap.decommission = true)
# must plan the destruction of ap's objects only, through ap's own slot (kubernetes.slot2, still
# pointed at ap's cluster), while every other object keeps its id (an object that would be
# replaced has no id yet in a plan, and the comparison fails); step 2 (ap's entry and passwords
# deleted) must then change nothing, and leave slot 2 pointing at no cluster.

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
  redis_passwords   = { eu = "TEST-REDIS-EU", us = "TEST-REDIS-US", ap = "TEST-REDIS-AP" }
  nats_passwords = {
    "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
    "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
    "limiter-ap"    = "TEST-NATS-LIMITER-AP-0001"
    "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
    "reconciler"    = "TEST-NATS-RECONCILER-0001"
    "gateway"       = "TEST-NATS-GATEWAY-000001"
  }
  gateway_source_ranges = ["198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24"]
  check_tokens          = { eu = ["TEST-CHECK-TOKEN-EU-01"], us = ["TEST-CHECK-TOKEN-US-01"], ap = ["TEST-CHECK-TOKEN-AP-01"] }
  ledger_region         = "eu"
  ledger                = { postgres = { host = "ledger.example.internal", cidrs = ["10.30.0.0/16"] } }
  regions = {
    eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" } }
    us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" } }
    ap = { slot = 2, weight = 0.2, gateway_url = "nats://gw.ap.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-ap" } }
  }
}

run "three_regions" {
  command = apply

  assert {
    condition     = toset(keys(output.objects.regions)) == toset(["eu", "us", "ap"]) && length(output.objects.regions["ap"]) > 10
    error_message = "setup: three regions with their objects"
  }
}

# Skipping step 1 (deleting ap's entry straight away) leaves ap's objects in the state with slot 2
# pointing at an unresolvable host: their destruction fails to reach any cluster, instead of
# running in whatever cluster the current kube context names.
run "skipping_step1_reaches_no_cluster" {
  command = plan

  variables {
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    regions = {
      eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" } }
      us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" } }
    }
  }

  assert {
    condition     = length(module.region_2) == 0 && output.kube_targets["2"] == { region = null, target = "https://unused-slot-2.quota.invalid" }
    error_message = "ap's orphaned objects must be planned through a slot that reaches no cluster: ${jsonencode(output.kube_targets)}"
  }
}

run "step1_decommission_plan" {
  command = plan

  variables {
    regions = {
      eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" } }
      us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" } }
      ap = { slot = 2, weight = 0.2, gateway_url = "nats://gw.ap.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-ap" }, decommission = true }
    }
  }

  # ap's module instance, i.e. every object of ap, is destroyed ...
  assert {
    condition     = length(module.region_2) == 0 && length(module.region_0) == 1 && length(module.region_1) == 1 && toset(keys(output.objects.regions)) == toset(["eu", "us"])
    error_message = "step 1 must remove ap's objects and keep eu's and us's"
  }
  # ... through ap's own provider (module.region_2 is bound to kubernetes.slot2, hclcheck_test.go),
  # which still reaches ap's cluster ...
  assert {
    condition     = output.kube_targets["2"] == { region = "ap", target = "kubeconfig /etc/kube/config context prod-ap" }
    error_message = "during step 1, slot 2 must still point at ap's cluster: ${jsonencode(output.kube_targets)}"
  }
  # ... and nothing else is replaced (updated in place at most: same ids).
  assert {
    condition = (
      output.objects.regions["eu"] == run.three_regions.objects.regions["eu"] &&
      output.objects.regions["us"] == run.three_regions.objects.regions["us"] &&
      output.objects.ledger == run.three_regions.objects.ledger
    )
    error_message = "step 1 must not replace any object of eu, us or the ledger"
  }
  # The other regions forget ap: gateways, weights, its NATS user.
  assert {
    condition = (
      output.regions["eu"].nats_gateways == tolist(["us"]) && output.regions["us"].nats_gateways == tolist(["eu"]) &&
      alltrue([for n, args in output.limiter_args : contains(args, "--region-weights=eu=0.5,us=0.3")]) &&
      !strcontains(module.region_0[0].nats_config, "limiter-ap") && !strcontains(module.region_1[0].nats_config, "gw.ap.example.com")
    )
    error_message = "after step 1 no region may refer to ap: ${jsonencode(output.regions)} ${jsonencode(output.limiter_args)}"
  }
}

run "step1_decommission" {
  command = apply

  variables {
    regions = {
      eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" } }
      us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" } }
      ap = { slot = 2, weight = 0.2, gateway_url = "nats://gw.ap.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-ap" }, decommission = true }
    }
  }

  assert {
    condition     = output.objects.regions["eu"] == run.three_regions.objects.regions["eu"] && output.objects.regions["us"] == run.three_regions.objects.regions["us"]
    error_message = "step 1 applied: eu and us keep every object"
  }
}

run "step2_delete_entry_plan" {
  command = plan

  variables {
    redis_passwords = { eu = "TEST-REDIS-EU", us = "TEST-REDIS-US" }
    nats_passwords = {
      "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
      "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
      "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
      "reconciler"    = "TEST-NATS-RECONCILER-0001"
      "gateway"       = "TEST-NATS-GATEWAY-000001"
    }
    regions = {
      eu = { slot = 0, weight = 0.5, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" } }
      us = { slot = 1, weight = 0.3, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" } }
    }
  }

  # Nothing changes: same objects, same arguments, same NATS configuration (no roll).
  assert {
    condition = (
      output.objects == run.step1_decommission.objects &&
      output.regions == run.step1_decommission.regions &&
      output.limiter_args == run.step1_decommission.limiter_args &&
      output.control_plane == run.step1_decommission.control_plane &&
      output.ledger == run.step1_decommission.ledger
    )
    error_message = "step 2 (deleting the decommissioned entry) must change nothing"
  }
  # Slot 2 is free again: it reaches no cluster.
  assert {
    condition     = output.kube_targets["2"] == { region = null, target = "https://unused-slot-2.quota.invalid" }
    error_message = "a freed slot must point at no cluster: ${jsonencode(output.kube_targets)}"
  }
}
