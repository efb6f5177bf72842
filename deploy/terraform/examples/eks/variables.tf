variable "images" {
  description = "Images by digest (name@sha256:...): quota (the repo's Dockerfile, pushed to ECR) and nats (nats-server >= 2.10). Redis is ElastiCache and Postgres Aurora here."
  type = object({
    quota = string
    nats  = string
  })
}

variable "postgres_ca_secret" {
  description = "Secret in the ledger region's namespace whose key ca.crt holds the RDS CA bundle (https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem): the reconciler verifies Aurora with sslmode verify-full against it."
  type        = string
}

variable "regions" {
  description = <<-EOT
    The three AWS regions of this example, by quota region name. Each names an existing EKS
    cluster, the subnets and security group for its ElastiCache, and the DNS name that will
    point at its NATS gateway load balancer. This example has exactly three AWS provider slots
    (eu, us, ap); see README.md to add one.
  EOT
  type = map(object({
    slot               = number
    weight             = number
    aws_region         = string
    eks_cluster_name   = string
    subnet_ids         = list(string)
    subnet_cidrs       = list(string) # of subnet_ids: egress of the limiters (and reconciler) to ElastiCache (and Aurora)
    security_group_ids = list(string)
    gateway_dns_name   = string
    cache_node_type    = optional(string, "cache.r7g.large")
    limiter_replicas   = optional(number, 6)
  }))
}

variable "ledger_region" {
  description = "Quota region (key of var.regions) that hosts Aurora and the reconciler."
  type        = string
  default     = "eu"
}

variable "admin_token" {
  type      = string
  sensitive = true
}

variable "redis_passwords" {
  description = "ElastiCache AUTH token per quota region (16..128 characters)."
  type        = map(string)
  sensitive   = true
}

variable "postgres_password" {
  type      = string
  sensitive = true
}

variable "nats_passwords" {
  description = "NATS password per user: limiter-<region> for each region, control-plane, reconciler, gateway."
  type        = map(string)
  sensitive   = true
}

variable "gateway_source_ranges" {
  description = "Egress CIDRs of the three clusters (their NAT gateways' Elastic IPs, /32 each): the only sources the NATS gateway NLBs accept."
  type        = list(string)
}

variable "nats_tls_secret" {
  description = "kubernetes.io/tls Secret in each region's namespace for NATS client and gateway TLS (e.g. from cert-manager). Required: the gateways are internet-facing NLBs."
  type        = string
}

variable "memberlist_keys" {
  description = "Memberlist encryption keys per quota region (openssl rand -base64 32 each; the first encrypts)."
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

variable "api_client_namespaces" {
  description = "Namespaces of the services that call the limiters (NetworkPolicy)."
  type        = list(string)
  default     = []
}

variable "billing_client_namespaces" {
  description = "Namespaces that may call the reconciler's billing API (NetworkPolicy)."
  type        = list(string)
  default     = []
}

variable "prometheus_namespace" {
  type    = string
  default = null
}
