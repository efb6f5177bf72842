locals {
  redis_in_cluster = var.spec.redis.endpoint == null
  redis_endpoint   = local.redis_in_cluster ? "redis-${local.name}.${local.svc}:6379" : var.spec.redis.endpoint
  redis_scheme     = var.spec.redis.tls ? "rediss" : "redis"
  # The --redis URL carries the password, so it lives only in the Secret. With redis.cluster the
  # endpoint is a comma-separated seed list and so is the URL.
  redis_url = join(",", [
    for hp in split(",", local.redis_endpoint) :
    "${local.redis_scheme}://:${urlencode(var.redis_password)}@${trimspace(hp)}${var.spec.redis.cluster ? "" : "/0"}"
  ])
}

resource "kubernetes_secret_v1" "limiter" {
  metadata {
    name      = "quota-limiter-${local.name}"
    namespace = local.ns
    labels    = local.labels
  }

  # Token lists are comma-joined, the daemon's --check-token/--read-token format. An empty value
  # (no read tokens; no check tokens with spec.allow_unauthenticated_checks) counts as unset.
  # No admin token: these limiters refuse catalogue writes whatever the token (not
  # --control-plane), so it would only let whoever reads this Secret, or takes over a limiter
  # pod, write the catalogue through the control plane. They read with the read tokens.
  data = {
    "redis-url"   = local.redis_url
    "check-token" = join(",", var.check_tokens)
    "read-token"  = join(",", var.read_tokens)
    # --memberlist-key: comma-joined, the first encrypts, all decrypt.
    "memberlist-key" = join(",", var.memberlist_keys)
  }
}

# Each limiter process's NATS password (user limiter-<region>.<process>, nats.tf), in a Secret
# only that process's pods read: a pod's credential publishes as that process alone.
resource "kubernetes_secret_v1" "limiter_nats" {
  for_each = toset(local.limiter_processes)

  metadata {
    name      = "quota-nats-${each.key}"
    namespace = local.ns
    labels    = merge(local.labels, { (local.process_label) = each.key })
  }

  data = {
    "nats-password" = local.nats_process_passwords[each.key]
  }
}

# The control-plane limiter's Secret (control region only): the limiter's tokens and Redis, the
# admin token (only here), and the control-plane NATS password instead of the limiters' one. No
# memberlist key: the control plane does not join the limiters' memberlist.
resource "kubernetes_secret_v1" "control_plane" {
  count = local.is_control_region ? 1 : 0

  metadata {
    name      = "quota-control-plane-${local.name}"
    namespace = local.ns
    labels    = local.labels
  }

  data = {
    "admin-token"   = var.admin_token
    "redis-url"     = local.redis_url
    "check-token"   = join(",", var.check_tokens)
    "read-token"    = join(",", var.read_tokens)
    "nats-password" = var.nats_passwords["control-plane"]
  }
}
