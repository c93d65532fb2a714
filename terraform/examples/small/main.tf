# A small install: machines and PostgreSQL in one zone (no standby), the smallest MSK
# cluster (two brokers: MSK needs two zones, RF 2, min.insync 1), one of each service but
# two workers. For a team's own jobs, a trial, or a staging copy; it does not survive the
# loss of a zone, and a lost broker stops publishing until it is back.

locals {
  name       = "cronfleet-small"
  partitions = 1024
}

module "network" {
  source = "../../modules/network"

  name         = local.name
  zones        = 1
  nat_per_zone = false
}

# The release the machines install: the wheel `bash scripts/release.sh` built, uploaded to a
# bucket of this install; the machines check its SHA-256 before installing it.
module "release" {
  source = "../../modules/release"

  name       = local.name
  wheel_path = var.cronfleet_wheel
}

module "database" {
  source = "../../modules/database"

  name                      = local.name
  vpc_id                    = module.network.vpc_id
  subnet_ids                = module.network.private_subnet_ids
  client_security_group_ids = [module.fleet.security_group_id]
  instance_class            = "db.t4g.medium"
  multi_az                  = false
  allocated_storage_gb      = 50
  max_allocated_storage_gb  = 500
  backup_retention_days     = 7
  max_connections           = module.fleet.db_connections_max + 50
}

module "kafka" {
  source = "../../modules/kafka"

  name                      = local.name
  vpc_id                    = module.network.vpc_id
  subnet_ids                = module.network.private_subnet_ids
  client_security_group_ids = [module.fleet.security_group_id]
  broker_count              = 2
  broker_instance_type      = "kafka.t3.small"
  broker_volume_gb          = 50
  replication_factor        = 2
  min_insync_replicas       = 1
  partitions_per_tier       = 6
}

module "fleet" {
  source = "../../modules/fleet"

  name           = local.name
  vpc_id         = module.network.vpc_id
  subnet_ids     = module.network.service_subnet_ids
  api_subnet_ids = module.network.private_subnet_ids
  # The way in (README, "Reaching the API"): an internal load balancer, reachable from
  # this VPC (a Session Manager tunnel through an api machine) and the networks you add
  # (peering, VPN, Direct Connect).
  api_internal      = true
  api_ingress_cidrs = concat([module.network.vpc_cidr_block], var.api_ingress_cidrs)

  api_certificate_arn = var.api_certificate_arn
  release_bucket      = module.release.bucket
  release_key         = module.release.key
  release_sha256      = module.release.sha256
  release_kms_key_arn = module.release.kms_key_arn
  pip_index_url       = var.pip_index_url

  task_policy       = var.task_policy
  tenant_policy     = var.tenant_policy
  task_run_as_users = var.task_run_as_users
  http_allow_hosts  = var.http_allow_hosts

  scheduler_nodes         = 1
  scheduler_instance_type = "t3.medium"
  workers                 = 2
  workers_max             = 4
  worker_instance_type    = "t3.medium"
  worker_concurrency      = 32
  reapers                 = 1
  reaper_instance_type    = "t3.small"
  api_nodes               = 1
  api_instance_type       = "t3.medium"
  partitions              = local.partitions

  kafka_bootstrap_brokers   = module.kafka.bootstrap_brokers
  kafka_security_protocol   = module.kafka.client_security_protocol
  kafka_cluster_name        = module.kafka.cluster_name
  kafka_partitions_per_tier = 6
  kafka_replication_factor  = module.kafka.replication_factor
  kafka_min_insync_replicas = module.kafka.min_insync_replicas

  db_host               = module.database.address
  db_port               = module.database.port
  db_name               = module.database.db_name
  db_secret_arn         = module.database.master_user_secret_arn
  db_app_secret_arn     = module.database.app_user_secret_arn
  db_app_user           = module.database.app_username
  db_secret_kms_key_arn = module.database.kms_key_arn

  metrics_source_security_group_ids = [module.observability.collector_security_group_id]
}

module "observability" {
  source = "../../modules/observability"

  name                   = local.name
  fleet_name             = local.name
  vpc_id                 = module.network.vpc_id
  subnet_ids             = module.network.service_subnet_ids
  partitions             = local.partitions
  alarm_emails           = var.alarm_emails
  prometheus_sha256      = var.prometheus_sha256
  db_instance_identifier = module.database.instance_identifier
  kafka_cluster_name     = module.kafka.cluster_name
}
