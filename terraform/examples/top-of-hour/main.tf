# The requirements' fleet: 10 million schedules, 2,000 runs/s on average and 50,000 runs/s
# at the top of the hour, p99 start lag within 2 s, surviving the loss of any one node or
# zone. Three zones; Multi-AZ PostgreSQL; three MSK brokers (RF 3, min.insync 2).

locals {
  name = "cronfleet-toh"
}

module "network" {
  source = "../../modules/network"

  name         = local.name
  zones        = 3
  nat_per_zone = true
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
  instance_class            = "db.r7g.4xlarge"
  multi_az                  = true
  allocated_storage_gb      = 2000
  max_allocated_storage_gb  = 8000
  # What the fleet's pools can open at worst, capped: see the README ("Connections").
  max_connections = min(5000, max(var.db_max_connections, module.fleet.db_connections_max + 50))
}

module "kafka" {
  source = "../../modules/kafka"

  name                      = local.name
  vpc_id                    = module.network.vpc_id
  subnet_ids                = module.network.service_subnet_ids
  client_security_group_ids = [module.fleet.security_group_id]
  # The model's kafka_partitions_per_tier (1024) makes 4 x 1024 x 3 = 12,288 partition
  # replicas: MSK allows 4,000 per kafka.m7g.4xlarge broker, so six of them.
  broker_count         = 6
  broker_instance_type = "kafka.m7g.4xlarge"
  replication_factor   = 3
  min_insync_replicas  = 2
  partitions_per_tier  = var.kafka_partitions_per_tier
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

  scheduler_nodes         = var.scheduler_nodes + var.scheduler_nodes_headroom
  scheduler_instance_type = "c7i.xlarge"
  workers                 = var.workers + var.workers_headroom
  worker_instance_type    = "c7i.large"
  worker_concurrency      = var.worker_concurrency
  reapers                 = 2
  api_nodes               = 3
  partitions              = var.partitions

  kafka_bootstrap_brokers   = module.kafka.bootstrap_brokers
  kafka_security_protocol   = module.kafka.client_security_protocol
  kafka_cluster_name        = module.kafka.cluster_name
  kafka_partitions_per_tier = var.kafka_partitions_per_tier
  kafka_replication_factor  = module.kafka.replication_factor
  kafka_min_insync_replicas = module.kafka.min_insync_replicas

  db_host               = module.database.address
  db_port               = module.database.port
  db_name               = module.database.db_name
  db_secret_arn         = module.database.master_user_secret_arn
  db_app_secret_arn     = module.database.app_user_secret_arn
  db_app_user           = module.database.app_username
  db_secret_kms_key_arn = module.database.kms_key_arn
  db_sslmode            = "require"

  metrics_source_security_group_ids = [module.observability.collector_security_group_id]
}

module "observability" {
  source = "../../modules/observability"

  name                   = local.name
  fleet_name             = local.name
  vpc_id                 = module.network.vpc_id
  subnet_ids             = module.network.service_subnet_ids
  partitions             = var.partitions
  start_lag_p99_target_s = 2
  alarm_emails           = var.alarm_emails
  prometheus_sha256      = var.prometheus_sha256
  db_instance_identifier = module.database.instance_identifier
  kafka_cluster_name     = module.kafka.cluster_name
}
