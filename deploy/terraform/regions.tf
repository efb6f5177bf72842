locals {
  # Regions being decommissioned (step 1 of "Removing a region", deploy/RUNBOOK.md) keep their slot
  # and provider, but get no module instance: their objects are destroyed through their own
  # slot, and no other region refers to them any more.
  active         = { for name, r in var.regions : name => r if !r.decommission }
  weights        = { for name, r in local.active : name => r.weight }
  namespaces     = { for name, r in var.regions : name => coalesce(r.namespace, "quota-${name}") }
  control_region = coalesce(var.control_region, var.ledger_region)

  # The usage stream and the catalogue bucket live in the ledger region's NATS cluster
  # (JetStream placement), R3 when that cluster has three servers or more. Every process that
  # may create one of them is given the same placement.
  jetstream = {
    cluster  = var.ledger_region
    replicas = var.regions[var.ledger_region].nats.replicas >= 3 ? 3 : 1
  }

  # The input of modules/region for each region: everything but the secrets.
  region_specs = {
    for name, r in local.active : name => {
      name                        = name
      namespace                   = local.namespaces[name]
      create_namespace            = r.create_namespace
      zones                       = r.zones
      images                      = { quota = var.images.quota, nats = var.images.nats, redis = var.images.redis }
      allow_image_tags            = var.allow_image_tags
      weights                     = local.weights
      gateway_url                 = r.gateway_url
      peers                       = { for other, o in local.active : other => o.gateway_url if other != name }
      gateway_service_type        = r.gateway_service_type
      gateway_service_annotations = r.gateway_service_annotations
      gateway_source_ranges       = var.gateway_source_ranges
      allow_gateway_from_anywhere = var.allow_gateway_from_anywhere
      labels                      = var.labels
      limiter                     = r.limiter
      redis                       = r.redis
      nats                        = r.nats
      nats_tls_secret             = var.nats_tls_secret
      gateway_insecure_plaintext  = var.nats_gateway_insecure_plaintext
      usage_stream_max_bytes      = var.ledger.usage_stream_max_bytes
      jetstream                   = local.jetstream
      control_region              = local.control_region
      # The reconciler runs in the ledger region's namespace and connects to that region's NATS.
      reconciler_namespace = name == var.ledger_region ? local.namespaces[name] : null
      network = {
        api_client_namespaces       = var.api_client_namespaces
        api_client_namespace_labels = var.api_client_namespace_labels
        prometheus_namespace        = var.prometheus_namespace
        admin_client_namespaces     = var.admin_client_namespaces
        nats_monitor_namespaces     = var.nats_monitor_namespaces
        # Where the other regions' NATS pods run, for in-cluster gateways (one cluster).
        peer_namespaces         = distinct([for other, o in local.active : local.namespaces[other] if other != name])
        admin_client_pod_labels = var.admin_client_pod_labels
        dns                     = var.cluster_dns
        otlp_namespaces         = var.otlp_egress.namespaces
        otlp_cidrs              = var.otlp_egress.cidrs
      }
      allow_unauthenticated_checks = var.allow_unauthenticated_checks
      otlp_endpoint                = var.otlp_endpoint
    }
  }

  # slot number => region name, for the slots of active regions.
  slot_region = { for name, r in local.active : tostring(r.slot) => name }

  # Region module outputs by region name, whatever the slot.
  region_out = merge(
    { for m in module.region_0 : m.name => m },
    { for m in module.region_1 : m.name => m },
    { for m in module.region_2 : m.name => m },
    { for m in module.region_3 : m.name => m },
    { for m in module.region_4 : m.name => m },
  )
}

module "region_0" {
  source    = "./modules/region"
  count     = contains(keys(local.slot_region), "0") ? 1 : 0
  providers = { kubernetes = kubernetes.slot0 }

  spec            = local.region_specs[local.slot_region["0"]]
  admin_token     = var.admin_token
  memberlist_keys = var.memberlist_keys[local.slot_region["0"]]
  redis_password  = var.redis_passwords[local.slot_region["0"]]
  nats_passwords  = var.nats_passwords
  check_tokens    = lookup(var.check_tokens, local.slot_region["0"], [])
  read_tokens     = lookup(var.read_tokens, local.slot_region["0"], [])
}

module "region_1" {
  source    = "./modules/region"
  count     = contains(keys(local.slot_region), "1") ? 1 : 0
  providers = { kubernetes = kubernetes.slot1 }

  spec            = local.region_specs[local.slot_region["1"]]
  admin_token     = var.admin_token
  memberlist_keys = var.memberlist_keys[local.slot_region["1"]]
  redis_password  = var.redis_passwords[local.slot_region["1"]]
  nats_passwords  = var.nats_passwords
  check_tokens    = lookup(var.check_tokens, local.slot_region["1"], [])
  read_tokens     = lookup(var.read_tokens, local.slot_region["1"], [])
}

module "region_2" {
  source    = "./modules/region"
  count     = contains(keys(local.slot_region), "2") ? 1 : 0
  providers = { kubernetes = kubernetes.slot2 }

  spec            = local.region_specs[local.slot_region["2"]]
  admin_token     = var.admin_token
  memberlist_keys = var.memberlist_keys[local.slot_region["2"]]
  redis_password  = var.redis_passwords[local.slot_region["2"]]
  nats_passwords  = var.nats_passwords
  check_tokens    = lookup(var.check_tokens, local.slot_region["2"], [])
  read_tokens     = lookup(var.read_tokens, local.slot_region["2"], [])
}

module "region_3" {
  source    = "./modules/region"
  count     = contains(keys(local.slot_region), "3") ? 1 : 0
  providers = { kubernetes = kubernetes.slot3 }

  spec            = local.region_specs[local.slot_region["3"]]
  admin_token     = var.admin_token
  memberlist_keys = var.memberlist_keys[local.slot_region["3"]]
  redis_password  = var.redis_passwords[local.slot_region["3"]]
  nats_passwords  = var.nats_passwords
  check_tokens    = lookup(var.check_tokens, local.slot_region["3"], [])
  read_tokens     = lookup(var.read_tokens, local.slot_region["3"], [])
}

module "region_4" {
  source    = "./modules/region"
  count     = contains(keys(local.slot_region), "4") ? 1 : 0
  providers = { kubernetes = kubernetes.slot4 }

  spec            = local.region_specs[local.slot_region["4"]]
  admin_token     = var.admin_token
  memberlist_keys = var.memberlist_keys[local.slot_region["4"]]
  redis_password  = var.redis_passwords[local.slot_region["4"]]
  nats_passwords  = var.nats_passwords
  check_tokens    = lookup(var.check_tokens, local.slot_region["4"], [])
  read_tokens     = lookup(var.read_tokens, local.slot_region["4"], [])
}
