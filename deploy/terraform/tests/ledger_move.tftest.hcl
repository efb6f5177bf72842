# Moving the ledger region (deploy/RUNBOOK.md "Moving the ledger region"), planned and applied
# against mocked providers: the ledger in eu is applied, then ledger_region = "us" must plan
# module.ledger_0 (bound to kubernetes.slot0, eu's cluster) destroyed and module.ledger_1
# (kubernetes.slot1, us's cluster) created, with the reconciler connecting to us's NATS as the
# only holder of the reconciler password there, no region object replaced, and no second
# reconciler left behind in eu against the same durable consumer.

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
  redis_passwords   = { eu = "TEST-REDIS-EU", us = "TEST-REDIS-US" }
  nats_passwords = {
    "limiter-eu"    = "TEST-NATS-LIMITER-EU-0001"
    "limiter-us"    = "TEST-NATS-LIMITER-US-0001"
    "control-plane" = "TEST-NATS-CONTROL-PLANE-01"
    "reconciler"    = "TEST-NATS-RECONCILER-0001"
    "gateway"       = "TEST-NATS-GATEWAY-000001"
  }
  gateway_source_ranges = ["198.51.100.0/24", "203.0.113.0/24"]
  check_tokens          = { eu = ["TEST-CHECK-TOKEN-EU-01"], us = ["TEST-CHECK-TOKEN-US-01"] }
  ledger_region         = "eu"
  # The control plane stays where it is (it follows the ledger region when unset).
  control_region = "eu"
  ledger = {
    postgres = { host = "ledger.abc.eu-west-1.rds.amazonaws.com", cidrs = ["10.30.0.0/16"], ca_secret = "rds-ca" }
  }
  regions = {
    eu = { slot = 0, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-eu" }, redis = { endpoint = "eu.cache.example.com:6379", cidrs = ["10.20.0.0/16"] } }
    us = { slot = 1, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222", kube = { config_path = "/etc/kube/config", context = "prod-us" }, redis = { endpoint = "us.cache.example.com:6379", cidrs = ["10.20.0.0/16"] } }
  }
}

run "ledger_in_eu" {
  command = apply

  assert {
    condition     = length(module.ledger_0) == 1 && length(module.ledger_1) == 0 && contains(output.ledger.reconciler_args, "--nats=nats://nats-eu.quota-eu.svc.cluster.local:4222")
    error_message = "setup: the ledger runs in eu through slot 0"
  }
}

run "move_to_us_plan" {
  command = plan

  variables {
    ledger_region = "us"
  }

  # The old ledger goes, through eu's slot; the new one comes, through us's.
  assert {
    condition     = length(module.ledger_0) == 0 && length(module.ledger_1) == 1 && output.ledger.slot == 1
    error_message = "moving the ledger must destroy module.ledger_0 (slot 0) and create module.ledger_1 (slot 1)"
  }
  assert {
    condition = (
      output.kube_targets["0"] == { region = "eu", target = "kubeconfig /etc/kube/config context prod-eu" } &&
      output.kube_targets["1"] == { region = "us", target = "kubeconfig /etc/kube/config context prod-us" }
    )
    error_message = "slot 0 must still reach eu (where the old reconciler is destroyed), slot 1 us"
  }
  # The new reconciler: us's namespace and NATS, the stream's placement there (for a stream
  # that does not exist yet; an existing one stays where it is until moved, see deploy/RUNBOOK.md).
  assert {
    condition = (
      contains(output.ledger.reconciler_args, "--nats=nats://nats-us.quota-us.svc.cluster.local:4222") &&
      contains(output.ledger.reconciler_args, "--stream-cluster=us") &&
      output.ledger.reconciler_service == "reconciler-us.quota-us.svc.cluster.local:8081" &&
      contains(keys(output.objects.ledger), "deployment/reconciler-us") && !contains(keys(output.objects.ledger), "deployment/reconciler-eu")
    )
    error_message = "the new reconciler runs in us: ${jsonencode(output.ledger)}"
  }
  # The reconciler's NATS user now logs in to us only: eu's servers no longer hold its password.
  assert {
    condition     = contains(module.region_1[0].nats_enabled_users, "reconciler") && !contains(module.region_0[0].nats_enabled_users, "reconciler")
    error_message = "the reconciler's NATS password must move from eu's servers to us's"
  }
  # No region object is replaced (NATS Secrets and the limiters' placement flags change in place).
  assert {
    condition     = output.objects.regions == run.ledger_in_eu.objects.regions
    error_message = "moving the ledger must not replace any region object"
  }
  assert {
    condition     = alltrue([for n, args in output.limiter_args : contains(args, "--usage-stream-cluster=us")])
    error_message = "new usage streams are placed in the new ledger region"
  }
}
