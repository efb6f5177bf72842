# Three regions in ONE cluster, each in its own namespace: a staging or kind/minikube setup that
# exercises the real topology (per-region Redis, NATS super-cluster over in-cluster gateways,
# memberlist per region, ledger with in-cluster Postgres) without three clusters.
#
#   terraform init && terraform apply -var kube_context=kind-quota -var allow_image_tags=true \
#     -var 'images={quota="quota:dev",nats="nats:2.10-alpine",redis="redis:7-alpine",postgres="postgres:16-alpine"}' \
#     -var admin_token=... -var 'redis_passwords={eu="...",us="...",ap="..."}' -var postgres_password=... \
#     -var 'check_tokens={eu=["..."],us=["..."],ap=["..."]}' \
#     -var "memberlist_keys={eu=[\"$(openssl rand -base64 32)\"],us=[\"$(openssl rand -base64 32)\"],ap=[\"$(openssl rand -base64 32)\"]}" \
#     -var 'nats_passwords={"limiter-eu"="...","limiter-us"="...","limiter-ap"="...","control-plane"="...","reconciler"="...","gateway"="..."}'
#
# NetworkPolicies: each region's limiters take HTTP from their own namespace only (api_client_namespaces
# unset); NATS takes clients from its region's limiters (and the control plane and reconciler in
# eu), gateways from the other regions' NATS pods (ClusterIP gateways: no source ranges, and no
# TLS required, as the gateways do not leave the cluster). The control plane takes admin calls
# from pods labelled quota.dev/admin-client=true in quota-eu only; every pod's egress is limited
# to DNS (kube-dns pods in kube-system) and the peers it needs.
# kind's default CNI does not enforce NetworkPolicy, a Calico/Cilium cluster does.
#
# Validated here: terraform validate (with the source-built kubernetes provider, validate.sh).
# Not validated here: an apply against a real cluster.

terraform {
  required_version = ">= 1.9"

  required_providers {
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 3.2.1"
    }
  }
}

variable "kube_config_path" {
  description = "kubeconfig file of the cluster."
  type        = string
  default     = "~/.kube/config"
}

variable "kube_context" {
  description = "kubeconfig context of the cluster (e.g. kind-quota). Required: no region falls back to the current context."
  type        = string
}

variable "images" {
  description = "Images: quota (the repo's Dockerfile, loaded into the cluster), nats, redis, postgres; by digest unless allow_image_tags."
  type = object({
    quota    = string
    nats     = string
    redis    = string
    postgres = string
  })
}

variable "allow_image_tags" {
  description = "Accept images by tag (kind with locally built images)."
  type        = bool
  default     = false
}

variable "admin_token" {
  type      = string
  sensitive = true
}

variable "redis_passwords" {
  type      = map(string)
  sensitive = true
}

variable "postgres_password" {
  type      = string
  sensitive = true
}

variable "nats_passwords" {
  description = "NATS password per user: limiter-eu, limiter-us, limiter-ap, control-plane, reconciler, gateway (16+ characters each, all different)."
  type        = map(string)
  sensitive   = true
}

variable "memberlist_keys" {
  description = "Memberlist encryption keys per region (eu, us, ap): openssl rand -base64 32 each, all different."
  type        = map(list(string))
  sensitive   = true
}

variable "check_tokens" {
  description = "Bearer tokens of /v1/allow per region (region => at least one token of 16+ characters; no token in two regions)."
  type        = map(list(string))
  sensitive   = true
}

variable "read_tokens" {
  description = "Read tokens per region (region => tokens; no token in two regions)."
  type        = map(list(string))
  default     = {}
  sensitive   = true
}

variable "billing_tokens" {
  type      = list(string)
  default   = []
  sensitive = true
}

locals {
  small = {
    replicas       = 2
    qos            = "Burstable" # Guaranteed would reserve whole CPUs per pod
    cpu_request    = "100m"
    memory_request = "64Mi"
  }
  regions = {
    eu = { slot = 0, weight = 0.5 }
    us = { slot = 1, weight = 0.3 }
    ap = { slot = 2, weight = 0.2 }
  }
}

module "quota" {
  source = "../.."

  images           = var.images
  allow_image_tags = var.allow_image_tags
  ledger_region    = "eu"
  regions = {
    for name, r in local.regions : name => {
      slot                 = r.slot
      weight               = r.weight
      kube                 = { config_path = var.kube_config_path, context = var.kube_context }
      namespace            = "quota-${name}"
      gateway_url          = "nats://nats-${name}-gateway.quota-${name}.svc.cluster.local:7222"
      gateway_service_type = "ClusterIP"
      limiter              = local.small
      nats                 = { replicas = 1, storage_size = "1Gi" }
      redis                = { storage_size = "1Gi" }
    }
  }
  ledger = {
    postgres = { development_in_cluster = true, storage_size = "1Gi" }
  }

  admin_token       = var.admin_token
  memberlist_keys   = var.memberlist_keys
  redis_passwords   = var.redis_passwords
  postgres_password = var.postgres_password
  nats_passwords    = var.nats_passwords
  check_tokens      = var.check_tokens
  read_tokens       = var.read_tokens
  billing_tokens    = var.billing_tokens
}

output "regions" {
  value = module.quota.regions
}

output "ledger" {
  value = module.quota.ledger
}
