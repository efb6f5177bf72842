module "ledger" {
  source    = "./modules/ledger"
  providers = { kubernetes = kubernetes.ledger }

  spec = {
    region     = var.ledger_region
    namespace  = local.region_out[var.ledger_region].namespace
    image      = var.image
    nats_url   = local.region_out[var.ledger_region].nats_client_url
    labels     = var.labels
    reconciler = var.ledger.reconciler
    postgres   = var.ledger.postgres
    usage_stream = {
      # R3 where the ledger region's NATS cluster has three servers or more (as the limiters do).
      replicas  = var.regions[var.ledger_region].nats.replicas >= 3 ? 3 : 1
      max_bytes = var.ledger.usage_stream_max_bytes
    }
    nats_tls_secret = var.nats_tls_secret
    network = {
      billing_client_namespaces = var.billing_client_namespaces
      prometheus_namespace      = var.prometheus_namespace
    }
  }
  postgres_password = var.postgres_password
  nats_password     = var.nats_passwords["reconciler"]
  billing_tokens    = var.billing_tokens
}
