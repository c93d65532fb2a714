# PostgreSQL on RDS for the kit: private, encrypted with its own key, TLS forced, backups,
# Multi-AZ by default. The master password is generated and kept by RDS in Secrets Manager
# (manage_master_user_password): it never enters Terraform's state, outputs or user data.
# The schema is migrated at deploy by the fleet's api machines (`cronfleet db upgrade` in
# their bootstrap); the other roles wait for it.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  tags = merge(var.tags, { "cronfleet:database" = var.name })
}

data "aws_iam_policy_document" "key" {
  # checkov:skip=CKV_AWS_109:a key policy's resource is the key itself ("*" means this key)
  # checkov:skip=CKV_AWS_111:a key policy's resource is the key itself ("*" means this key)
  # checkov:skip=CKV_AWS_356:a key policy's resource is the key itself ("*" means this key)
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "db" {
  description         = "${var.name}: database storage, snapshots, Performance Insights and its secret"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.key.json
  tags                = local.tags
}

resource "aws_db_subnet_group" "this" {
  name_prefix = "${var.name}-"
  subnet_ids  = var.subnet_ids
  tags        = local.tags
}

resource "aws_security_group" "db" {
  name_prefix = "${var.name}-db-"
  description = "PostgreSQL of cronfleet: the fleet only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-db" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each                     = toset(var.client_security_group_ids)
  security_group_id            = aws_security_group.db.id
  description                  = "PostgreSQL from the cronfleet fleet"
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

# What the kit needs of PostgreSQL: connections for every pool, a quarter of memory in
# buffers, TLS only, and autovacuum that keeps up with the trigger index (every fire is a
# new row version; migration 0004 adds per-table thresholds on `triggers`).
resource "aws_db_parameter_group" "this" {
  name_prefix = "${var.name}-pg${var.engine_version}-"
  family      = "postgres${var.engine_version}"
  description = "cronfleet: connections, buffers, TLS, autovacuum"
  tags        = local.tags

  parameter {
    name         = "max_connections"
    value        = tostring(var.max_connections)
    apply_method = "pending-reboot"
  }
  parameter {
    name         = "shared_buffers"
    value        = "{DBInstanceClassMemory*${var.shared_buffers_percent}/819200}"
    apply_method = "pending-reboot"
  }
  parameter {
    name  = "rds.force_ssl"
    value = "1"
  }
  parameter {
    name         = "autovacuum_max_workers"
    value        = "6"
    apply_method = "pending-reboot"
  }
  parameter {
    name  = "autovacuum_naptime"
    value = "10"
  }
  parameter {
    name  = "autovacuum_vacuum_cost_limit"
    value = "2000"
  }
  parameter {
    name  = "autovacuum_vacuum_scale_factor"
    value = "0.05"
  }
  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }
  parameter {
    name  = "log_lock_waits"
    value = "1"
  }

  lifecycle {
    create_before_destroy = true
  }
}

data "aws_iam_policy_document" "monitoring_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["monitoring.rds.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "monitoring" {
  name_prefix        = "${var.name}-rds-mon-"
  assume_role_policy = data.aws_iam_policy_document.monitoring_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy_attachment" "monitoring" {
  role       = aws_iam_role.monitoring.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}

resource "aws_db_instance" "this" {
  # checkov:skip=CKV2_AWS_30:statement logging at 50,000 runs/s would cost more than the work; slow statements (>1 s) and lock waits are logged instead
  identifier_prefix = "${var.name}-"
  engine            = "postgres"
  engine_version    = var.engine_version
  instance_class    = var.instance_class
  db_name           = "cronfleet"
  username          = "cronfleet"

  manage_master_user_password   = true
  master_user_secret_kms_key_id = aws_kms_key.db.key_id

  multi_az               = var.multi_az
  db_subnet_group_name   = aws_db_subnet_group.this.name
  vpc_security_group_ids = [aws_security_group.db.id]
  publicly_accessible    = false
  parameter_group_name   = aws_db_parameter_group.this.name
  ca_cert_identifier     = "rds-ca-rsa2048-g1"

  storage_type          = "gp3"
  allocated_storage     = var.allocated_storage_gb
  max_allocated_storage = max(var.max_allocated_storage_gb, var.allocated_storage_gb)
  storage_encrypted     = true
  kms_key_id            = aws_kms_key.db.arn

  backup_retention_period   = var.backup_retention_days
  backup_window             = "03:00-04:00"
  maintenance_window        = "sun:04:30-sun:05:30"
  copy_tags_to_snapshot     = true
  deletion_protection       = var.deletion_protection
  skip_final_snapshot       = false
  final_snapshot_identifier = "${var.name}-final"

  auto_minor_version_upgrade            = true
  iam_database_authentication_enabled   = true
  performance_insights_enabled          = true
  performance_insights_kms_key_id       = aws_kms_key.db.arn
  performance_insights_retention_period = 7
  monitoring_interval                   = 15
  monitoring_role_arn                   = aws_iam_role.monitoring.arn
  enabled_cloudwatch_logs_exports       = ["postgresql", "upgrade"]

  tags = local.tags
}

# The role the services connect as (table rights, no DDL: kit/store/migrate.py
# ensure_app_role). Its password is no Terraform value: the fleet's first api machine
# generates it, puts it here and sets it on the role; every machine reads it before each
# start of its service and every 5 minutes, so a new value is taken up by restarts alone.
resource "aws_secretsmanager_secret" "app" {
  # checkov:skip=CKV2_AWS_57:no rotation Lambda: the api machines set the role's password from this secret (docs/operate.md, "Rotating the database credentials")
  name_prefix             = "${var.name}-app-"
  description             = "${var.name}: the cronfleet services' database role (${var.app_username})"
  kms_key_id              = aws_kms_key.db.arn
  recovery_window_in_days = 7
  tags                    = local.tags
}

resource "aws_secretsmanager_secret_version" "app" {
  secret_id     = aws_secretsmanager_secret.app.id
  secret_string = jsonencode({ username = var.app_username, password = "" })

  lifecycle {
    ignore_changes = [secret_string, version_stages]
  }
}
