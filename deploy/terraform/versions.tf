terraform {
  # 1.9: validation rules may refer to other variables (redis_passwords vs regions).
  required_version = ">= 1.9"

  required_providers {
    # 3.2: policy/v1 PodDisruptionBudgets (kubernetes_pod_disruption_budget_v1), startup probes,
    # topology spread constraints, StatefulSet PVC retention, all through the *_v1 resources
    # (which 2.x has too). validate.sh builds 3.2.1 from source and validates against it.
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 3.2.1"
    }
  }
}
