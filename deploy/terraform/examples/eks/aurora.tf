# Aurora PostgreSQL for the billing ledger, in the ledger region's AWS region. This example puts
# it in the eu provider: change the provider (and subnets) if var.ledger_region is not "eu".

resource "aws_db_subnet_group" "ledger" {
  provider   = aws.eu
  name       = "quota-ledger"
  subnet_ids = var.regions[var.ledger_region].subnet_ids
}

resource "aws_rds_cluster" "ledger" {
  provider                  = aws.eu
  cluster_identifier        = "quota-ledger"
  engine                    = "aurora-postgresql"
  engine_version            = "16.4"
  database_name             = "quota"
  master_username           = "quota"
  master_password           = var.postgres_password
  db_subnet_group_name      = aws_db_subnet_group.ledger.name
  vpc_security_group_ids    = var.regions[var.ledger_region].security_group_ids
  storage_encrypted         = true
  backup_retention_period   = 14
  deletion_protection       = true
  final_snapshot_identifier = "quota-ledger-final"
}

resource "aws_rds_cluster_instance" "ledger" {
  provider           = aws.eu
  count              = 2
  identifier         = "quota-ledger-${count.index}"
  cluster_identifier = aws_rds_cluster.ledger.id
  instance_class     = "db.r7g.large"
  engine             = aws_rds_cluster.ledger.engine
  engine_version     = aws_rds_cluster.ledger.engine_version
}
