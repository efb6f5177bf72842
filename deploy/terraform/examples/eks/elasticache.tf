# One Redis per region: a primary and a replica with automatic failover, TLS and AUTH. At 1M
# decisions/s platform-wide leasing needs ~50k store ops/s in the busiest region: one shard.

resource "aws_elasticache_subnet_group" "eu" {
  provider   = aws.eu
  name       = "quota-eu"
  subnet_ids = var.regions["eu"].subnet_ids
}

resource "aws_elasticache_subnet_group" "us" {
  provider   = aws.us
  name       = "quota-us"
  subnet_ids = var.regions["us"].subnet_ids
}

resource "aws_elasticache_subnet_group" "ap" {
  provider   = aws.ap
  name       = "quota-ap"
  subnet_ids = var.regions["ap"].subnet_ids
}

resource "aws_elasticache_replication_group" "eu" {
  provider                   = aws.eu
  replication_group_id       = "quota-eu"
  description                = "quota limiter store (eu)"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.regions["eu"].cache_node_type
  num_cache_clusters         = 2
  automatic_failover_enabled = true
  multi_az_enabled           = true
  transit_encryption_enabled = true
  at_rest_encryption_enabled = true
  auth_token                 = var.redis_passwords["eu"]
  subnet_group_name          = aws_elasticache_subnet_group.eu.name
  security_group_ids         = var.regions["eu"].security_group_ids
}

resource "aws_elasticache_replication_group" "us" {
  provider                   = aws.us
  replication_group_id       = "quota-us"
  description                = "quota limiter store (us)"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.regions["us"].cache_node_type
  num_cache_clusters         = 2
  automatic_failover_enabled = true
  multi_az_enabled           = true
  transit_encryption_enabled = true
  at_rest_encryption_enabled = true
  auth_token                 = var.redis_passwords["us"]
  subnet_group_name          = aws_elasticache_subnet_group.us.name
  security_group_ids         = var.regions["us"].security_group_ids
}

resource "aws_elasticache_replication_group" "ap" {
  provider                   = aws.ap
  replication_group_id       = "quota-ap"
  description                = "quota limiter store (ap)"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.regions["ap"].cache_node_type
  num_cache_clusters         = 2
  automatic_failover_enabled = true
  multi_az_enabled           = true
  transit_encryption_enabled = true
  at_rest_encryption_enabled = true
  auth_token                 = var.redis_passwords["ap"]
  subnet_group_name          = aws_elasticache_subnet_group.ap.name
  security_group_ids         = var.regions["ap"].security_group_ids
}
