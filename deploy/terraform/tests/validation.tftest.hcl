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
mock_provider "kubernetes" {
  alias = "ledger"
}

variables {
  image             = "registry.example.com/quota:test"
  admin_token       = "TEST-ADMIN-TOKEN-0123456789"
  postgres_password = "TEST-PG-PASSWORD"
  redis_passwords   = { eu = "a", us = "b" }
  ledger_region     = "eu"
  regions = {
    eu = { slot = 0, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
    us = { slot = 1, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
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
      eu = { slot = 0, weight = 0.6, gateway_url = "nats://gw.eu.example.com:7222" }
      us = { slot = 0, weight = 0.4, gateway_url = "nats://gw.us.example.com:7222" }
    }
  }
  expect_failures = [var.regions]
}

run "slot_out_of_range" {
  command = plan
  variables {
    regions = {
      eu = { slot = 5, weight = 1, gateway_url = "nats://gw.eu.example.com:7222" }
    }
    redis_passwords = { eu = "a" }
  }
  expect_failures = [var.regions]
}

run "zero_weight" {
  command = plan
  variables {
    regions = {
      eu = { slot = 0, weight = 0, gateway_url = "nats://gw.eu.example.com:7222" }
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
