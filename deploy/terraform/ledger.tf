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
    network = {
      billing_client_namespaces = var.billing_client_namespaces
      prometheus_namespace      = var.prometheus_namespace
    }
  }
  postgres_password = var.postgres_password
  billing_tokens    = var.billing_tokens
}
