locals {
  name      = var.spec.name
  namespace = coalesce(var.spec.namespace, "quota-${var.spec.name}")
  ns        = var.spec.create_namespace ? kubernetes_namespace_v1.this[0].metadata[0].name : local.namespace
  # DNS suffix of services in this region's namespace.
  svc = "${local.namespace}.svc.cluster.local"

  labels = merge(var.spec.labels, {
    "app.kubernetes.io/part-of"    = "quota"
    "app.kubernetes.io/managed-by" = "terraform"
    "quota.dev/region"             = local.name
  })

  # --region-weights: every region, sorted by name, e.g. ap=0.2,eu=0.5,us=0.3.
  region_weights = join(",", [for r in sort(keys(var.spec.weights)) : "${r}=${var.spec.weights[r]}"])

  # Zones (spec.zones): [] = the cluster has none, pods are spread over nodes only.
  zoned    = length(var.spec.zones) > 0
  zone_key = "topology.kubernetes.io/zone"
  host_key = "kubernetes.io/hostname"

  # GOMEMLIMIT: 90 % of a container's memory limit, in bytes, so that the Go runtime collects
  # harder before the kernel's OOM killer would act. Quantities are validated whole numbers with
  # an optional binary or decimal suffix.
  mem_units         = { "" = 1, "k" = 1000, "M" = 1000000, "G" = 1000000000, "T" = 1000000000000, "Ki" = 1024, "Mi" = 1048576, "Gi" = 1073741824, "Ti" = 1099511627776 }
  limiter_mem_parts = regex("^([0-9]+)([A-Za-z]*)$", var.spec.limiter.memory_limit)
  limiter_gomemlimit = format("%d", floor(
    tonumber(local.limiter_mem_parts[0]) * local.mem_units[local.limiter_mem_parts[1]] * 0.9
  ))

  # Guaranteed QoS: requests = limits (whole CPUs: exclusive cores under the static CPU manager).
  limiter_resources = {
    limits = { cpu = var.spec.limiter.cpu_limit, memory = var.spec.limiter.memory_limit }
    requests = var.spec.limiter.qos == "Guaranteed" ? {
      cpu = var.spec.limiter.cpu_limit, memory = var.spec.limiter.memory_limit
      } : {
      cpu = var.spec.limiter.cpu_request, memory = var.spec.limiter.memory_request
    }
  }
}

resource "kubernetes_namespace_v1" "this" {
  count = var.spec.create_namespace ? 1 : 0

  metadata {
    name   = local.namespace
    labels = local.labels
  }
}
