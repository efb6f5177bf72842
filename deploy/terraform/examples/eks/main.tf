# EKS wrapper: existing EKS clusters, one ElastiCache (Redis, TLS + AUTH) per region, Aurora
# PostgreSQL for the ledger, and the platform from ../.. on top.
#
# NOT validated here: the AWS provider cannot be installed offline, so this directory is checked
# only by `terraform fmt` and by deploy/terraform/hclcheck_test.go (every var./local./module./
# resource reference resolves, module arguments match the root module's variables). It has never
# been planned or applied. Treat it as a starting point.
#
# The AWS provider aliases are static, like the kubernetes slots of the root module: eu, us, ap.

provider "aws" {
  alias  = "eu"
  region = var.regions["eu"].aws_region
}

provider "aws" {
  alias  = "us"
  region = var.regions["us"].aws_region
}

provider "aws" {
  alias  = "ap"
  region = var.regions["ap"].aws_region
}

data "aws_eks_cluster" "eu" {
  provider = aws.eu
  name     = var.regions["eu"].eks_cluster_name
}

data "aws_eks_cluster" "us" {
  provider = aws.us
  name     = var.regions["us"].eks_cluster_name
}

data "aws_eks_cluster" "ap" {
  provider = aws.ap
  name     = var.regions["ap"].eks_cluster_name
}

locals {
  clusters = {
    eu = data.aws_eks_cluster.eu
    us = data.aws_eks_cluster.us
    ap = data.aws_eks_cluster.ap
  }
  redis = {
    eu = aws_elasticache_replication_group.eu
    us = aws_elasticache_replication_group.us
    ap = aws_elasticache_replication_group.ap
  }
}

module "quota" {
  source = "../.."

  images        = { quota = var.images.quota, nats = var.images.nats }
  ledger_region = var.ledger_region
  regions = {
    for name, r in var.regions : name => {
      slot        = r.slot
      weight      = r.weight
      gateway_url = "nats://${r.gateway_dns_name}:7222"
      gateway_service_annotations = {
        "service.beta.kubernetes.io/aws-load-balancer-type"   = "nlb"
        "service.beta.kubernetes.io/aws-load-balancer-scheme" = "internet-facing"
      }
      kube = {
        host                   = local.clusters[name].endpoint
        cluster_ca_certificate = base64decode(local.clusters[name].certificate_authority[0].data)
        exec = {
          api_version = "client.authentication.k8s.io/v1beta1"
          command     = "aws"
          args        = ["eks", "get-token", "--cluster-name", r.eks_cluster_name, "--region", r.aws_region]
        }
      }
      redis = {
        endpoint = "${local.redis[name].primary_endpoint_address}:6379"
        cidrs    = r.subnet_cidrs
        tls      = true
      }
      limiter = { replicas = r.limiter_replicas }
    }
  }
  ledger = {
    postgres = {
      host      = aws_rds_cluster.ledger.endpoint
      cidrs     = var.regions[var.ledger_region].subnet_cidrs
      user      = aws_rds_cluster.ledger.master_username
      ca_secret = var.postgres_ca_secret # sslmode verify-full (the default)
    }
  }

  admin_token       = var.admin_token
  memberlist_keys   = var.memberlist_keys
  redis_passwords   = var.redis_passwords
  postgres_password = var.postgres_password
  nats_passwords    = var.nats_passwords
  check_tokens      = var.check_tokens
  read_tokens       = var.read_tokens
  billing_tokens    = var.billing_tokens

  gateway_source_ranges = var.gateway_source_ranges
  nats_tls_secret       = var.nats_tls_secret

  api_client_namespaces     = var.api_client_namespaces
  billing_client_namespaces = var.billing_client_namespaces
  prometheus_namespace      = var.prometheus_namespace
}
