# The ledger (reconciler, and in development an in-cluster Postgres) runs in the ledger region,
# through that region's slot provider: one module block per slot, of which only the ledger
# region's has an instance. Moving var.ledger_region therefore plans the old instance's
# destruction through the OLD region's provider and the new one's creation through the new
# region's (deploy/RUNBOOK.md "Moving the ledger region"; tests/ledger_move.tftest.hcl).
locals {
  ledger_slot = tostring(var.regions[var.ledger_region].slot)

  ledger_spec = {
    region           = var.ledger_region
    namespace        = local.region_out[var.ledger_region].namespace
    images           = { quota = var.images.quota, postgres = var.images.postgres }
    allow_image_tags = var.allow_image_tags
    nats_url         = local.region_out[var.ledger_region].nats_client_url
    labels           = var.labels
    reconciler       = var.ledger.reconciler
    postgres         = var.ledger.postgres
    usage_stream = {
      cluster   = local.jetstream.cluster
      replicas  = local.jetstream.replicas
      max_bytes = var.ledger.usage_stream_max_bytes
    }
    nats_tls_secret = var.nats_tls_secret
    otlp_endpoint   = var.otlp_endpoint
    network = {
      billing_client_namespaces = var.billing_client_namespaces
      prometheus_namespace      = var.prometheus_namespace
      dns                       = var.cluster_dns
      otlp_namespaces           = var.otlp_egress.namespaces
      otlp_cidrs                = var.otlp_egress.cidrs
    }
  }

  ledger_out = one(concat(module.ledger_0, module.ledger_1, module.ledger_2, module.ledger_3, module.ledger_4))
}

module "ledger_0" {
  source    = "./modules/ledger"
  count     = local.ledger_slot == "0" ? 1 : 0
  providers = { kubernetes = kubernetes.slot0 }

  spec              = local.ledger_spec
  postgres_password = var.postgres_password
  nats_password     = var.nats_passwords["reconciler"]
  billing_tokens    = var.billing_tokens
}

module "ledger_1" {
  source    = "./modules/ledger"
  count     = local.ledger_slot == "1" ? 1 : 0
  providers = { kubernetes = kubernetes.slot1 }

  spec              = local.ledger_spec
  postgres_password = var.postgres_password
  nats_password     = var.nats_passwords["reconciler"]
  billing_tokens    = var.billing_tokens
}

module "ledger_2" {
  source    = "./modules/ledger"
  count     = local.ledger_slot == "2" ? 1 : 0
  providers = { kubernetes = kubernetes.slot2 }

  spec              = local.ledger_spec
  postgres_password = var.postgres_password
  nats_password     = var.nats_passwords["reconciler"]
  billing_tokens    = var.billing_tokens
}

module "ledger_3" {
  source    = "./modules/ledger"
  count     = local.ledger_slot == "3" ? 1 : 0
  providers = { kubernetes = kubernetes.slot3 }

  spec              = local.ledger_spec
  postgres_password = var.postgres_password
  nats_password     = var.nats_passwords["reconciler"]
  billing_tokens    = var.billing_tokens
}

module "ledger_4" {
  source    = "./modules/ledger"
  count     = local.ledger_slot == "4" ? 1 : 0
  providers = { kubernetes = kubernetes.slot4 }

  spec              = local.ledger_spec
  postgres_password = var.postgres_password
  nats_password     = var.nats_passwords["reconciler"]
  billing_tokens    = var.billing_tokens
}
