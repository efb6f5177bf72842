locals {
  name = var.spec.name
  ns   = var.spec.create_namespace ? kubernetes_namespace.this[0].metadata[0].name : var.spec.namespace
  # DNS suffix of services in this region's namespace.
  svc = "${var.spec.namespace}.svc.cluster.local"

  labels = merge(var.spec.labels, {
    "app.kubernetes.io/part-of"    = "quota"
    "app.kubernetes.io/managed-by" = "terraform"
    "quota.dev/region"             = local.name
  })

  # --region-weights: every region, sorted by name, e.g. ap=0.2,eu=0.5,us=0.3.
  region_weights = join(",", [for r in sort(keys(var.spec.weights)) : "${r}=${var.spec.weights[r]}"])
}

resource "kubernetes_namespace" "this" {
  count = var.spec.create_namespace ? 1 : 0

  metadata {
    name   = var.spec.namespace
    labels = local.labels
  }
}
