# PodDisruptionBudgets (policy/v1): how many pods of a set a voluntary disruption (node drain,
# cluster upgrade, autoscaler scale-down) may take at once. Involuntary ones (a node dies) are
# what the replicas and the zone spread are for.
#
#   limiter-<r>  one limiter at a time, over all of the region's processes (their StatefulSets
#                share the selected labels): the region keeps replicas - 1 (the sizing's 1.5x
#                covers it). Written as min_available, not max_unavailable 1: with one
#                StatefulSet per process, the disruption controller counts the expected pods
#                from the StatefulSets of the pods that exist, so between an evicted pod's
#                deletion and its replacement's creation that process counts for nothing and
#                max_unavailable 1 would grant a second eviction (make tf-apply-test did)
#   nats-<r>     one NATS server at a time: JetStream R3 keeps its quorum (2 of 3)
#   redis-<r>    in-cluster Redis, one pod: spec.redis.allow_eviction = false (default) makes a
#                drain wait until an operator deletes the pod at a moment of their choosing
#                (the region then decides in degraded mode until Redis is back); true lets a
#                drain evict it
#
# The control plane (one pod, surge rollouts) and the reconciler have none: a drain restarts
# them elsewhere; neither is on the decision path.
resource "kubernetes_pod_disruption_budget_v1" "limiter" {
  metadata {
    name      = local.limiter_name
    namespace = local.ns
    labels    = local.limiter_labels
  }

  spec {
    min_available = tostring(max(var.spec.limiter.replicas - 1, 0))
    selector {
      match_labels = local.limiter_selector
    }
  }
}

resource "kubernetes_pod_disruption_budget_v1" "nats" {
  metadata {
    name      = local.nats_name
    namespace = local.ns
    labels    = local.nats_labels
  }

  spec {
    max_unavailable = "1"
    selector {
      match_labels = local.nats_selector
    }
  }
}

resource "kubernetes_pod_disruption_budget_v1" "redis" {
  count = local.redis_in_cluster ? 1 : 0

  metadata {
    name      = local.redis_name
    namespace = local.ns
    labels    = local.redis_labels
  }

  spec {
    max_unavailable = var.spec.redis.allow_eviction ? "1" : "0"
    selector {
      match_labels = local.redis_selector
    }
  }
}
