# Amazon MSK for the kit's run queue: replication factor 3 and min.insync.replicas 2 by
# default (the kit publishes with acks=all and an idempotent producer), TLS between brokers
# and, where the clients support it, to the clients; encrypted at rest with its own key.
#
# The run topics (<topic_prefix>.<tier>) are created by the kit itself on first start
# (kit/transport/topics.py ensure_topics) with the partition count, replication factor and
# min.insync.replicas passed to the fleet as CRONFLEET_RUN_TOPIC_PARTITIONS,
# CRONFLEET_RUN_TOPIC_REPLICATION and CRONFLEET_RUN_TOPIC_MIN_INSYNC; the cluster's
# defaults below are the same numbers, and automatic topic creation is off, so a topic can
# only be made deliberately.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  tags = merge(var.tags, { "cronfleet:kafka" = var.name })
  topics = {
    for tier in var.tiers : "${var.topic_prefix}.${tier}" => {
      tier                = tier
      partitions          = var.partitions_per_tier
      replication_factor  = var.replication_factor
      min_insync_replicas = var.min_insync_replicas
    }
  }
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
  statement {
    sid       = "CloudWatchLogsUse"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${data.aws_region.current.name}.amazonaws.com"]
    }
  }
}

resource "aws_kms_key" "kafka" {
  description         = "${var.name}: MSK storage and broker logs"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.key.json
  tags                = local.tags
}

resource "aws_security_group" "kafka" {
  name_prefix = "${var.name}-kafka-"
  description = "Kafka brokers of cronfleet: the fleet only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-kafka" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each                     = toset(var.client_security_group_ids)
  security_group_id            = aws_security_group.kafka.id
  description                  = "Kafka (9092 plaintext, 9094 TLS) from the cronfleet fleet"
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = 9092
  to_port                      = 9094
}

resource "aws_msk_configuration" "this" {
  name           = "${var.name}-cronfleet"
  kafka_versions = [var.kafka_version]
  description    = "cronfleet: replicated run topics, no automatic topic creation"

  server_properties = <<-PROPERTIES
    auto.create.topics.enable=false
    default.replication.factor=${var.replication_factor}
    min.insync.replicas=${var.min_insync_replicas}
    num.partitions=${var.partitions_per_tier}
    unclean.leader.election.enable=false
    log.retention.hours=${var.log_retention_hours}
  PROPERTIES
}

resource "aws_cloudwatch_log_group" "brokers" {
  name              = "/cronfleet/${var.name}/msk"
  retention_in_days = var.broker_log_retention_days
  kms_key_id        = aws_kms_key.kafka.arn
  tags              = local.tags
}

resource "aws_msk_cluster" "this" {
  # checkov:skip=CKV_AWS_81:client TLS is var.client_broker_encryption; its default TLS_PLAINTEXT keeps plaintext for the kit's clients inside the VPC until the kit has a Kafka TLS setting (brokers talk TLS among themselves; 9094 serves TLS)
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = var.broker_count
  enhanced_monitoring    = "PER_TOPIC_PER_PARTITION"
  tags                   = local.tags

  broker_node_group_info {
    instance_type   = var.broker_instance_type
    client_subnets  = var.subnet_ids
    security_groups = [aws_security_group.kafka.id]

    storage_info {
      ebs_storage_info {
        volume_size = var.broker_volume_gb
      }
    }

    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.this.arn
    revision = aws_msk_configuration.this.latest_revision
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = aws_kms_key.kafka.arn
    encryption_in_transit {
      client_broker = var.client_broker_encryption
      in_cluster    = true
    }
  }

  open_monitoring {
    prometheus {
      jmx_exporter {
        enabled_in_broker = true
      }
      node_exporter {
        enabled_in_broker = true
      }
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.brokers.name
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.min_insync_replicas < var.replication_factor
      error_message = "min_insync_replicas must be below replication_factor, or one broker down stops every publish."
    }
    precondition {
      condition     = var.broker_count >= var.replication_factor && var.broker_count % length(var.subnet_ids) == 0
      error_message = "broker_count must be at least replication_factor and a multiple of the number of subnets."
    }
  }
}
