# The kit's metrics in Amazon Managed Service for Prometheus, alarms on them routed to SNS,
# and a collector (Prometheus in agent mode, an Auto Scaling group of one) that finds the
# fleet's machines by tag. CloudWatch alarms cover what AWS measures: the database and the
# brokers.

data "aws_region" "current" {}
data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

data "aws_ssm_parameter" "al2023" {
  name = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

locals {
  tags = merge(var.tags, { "cronfleet:observability" = var.name })

  alert_rules = templatefile("${path.module}/templates/alerts.yml.tftpl", {
    fleet            = var.fleet_name
    partitions       = var.partitions
    start_lag_p99_s  = var.start_lag_p99_target_s
    consumer_lag_max = var.consumer_lag_max
    dead_letters_max = var.dead_letters_max
    runbooks         = var.runbooks_url
  })

  prometheus_config = templatefile("${path.module}/templates/prometheus.yml.tftpl", {
    fleet            = var.fleet_name
    region           = data.aws_region.current.name
    metrics_port     = var.metrics_port
    api_port         = var.api_port
    remote_write_url = "${aws_prometheus_workspace.this.prometheus_endpoint}api/v1/remote_write"
  })
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
    sid       = "ServicesUse"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey*", "kms:Encrypt*", "kms:ReEncrypt*", "kms:Describe*"]
    resources = ["*"]
    principals {
      type = "Service"
      identifiers = [
        "aps.amazonaws.com",
        "cloudwatch.amazonaws.com",
        "logs.${data.aws_region.current.name}.amazonaws.com",
      ]
    }
  }
}

resource "aws_kms_key" "this" {
  description         = "${var.name}: metrics workspace, alarm topic, logs"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.key.json
  tags                = local.tags
}

resource "aws_cloudwatch_log_group" "workspace" {
  name              = "/cronfleet/${var.name}/prometheus"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.this.arn
  tags              = local.tags
}

resource "aws_prometheus_workspace" "this" {
  alias       = var.name
  kms_key_arn = aws_kms_key.this.arn
  tags        = local.tags

  logging_configuration {
    log_group_arn = "${aws_cloudwatch_log_group.workspace.arn}:*"
  }
}

resource "aws_prometheus_rule_group_namespace" "alerts" {
  name         = "cronfleet"
  workspace_id = aws_prometheus_workspace.this.id
  data         = local.alert_rules
}

# -- where alarms go ----------------------------------------------------------------------------

resource "aws_sns_topic" "alarms" {
  name              = "${var.name}-alarms"
  kms_master_key_id = aws_kms_key.this.id
  tags              = local.tags
}

data "aws_iam_policy_document" "alarms" {
  statement {
    sid       = "PrometheusAndCloudWatchPublish"
    actions   = ["sns:Publish", "sns:GetTopicAttributes"]
    resources = [aws_sns_topic.alarms.arn]
    principals {
      type        = "Service"
      identifiers = ["aps.amazonaws.com", "cloudwatch.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_sns_topic_policy" "alarms" {
  arn    = aws_sns_topic.alarms.arn
  policy = data.aws_iam_policy_document.alarms.json
}

resource "aws_sns_topic_subscription" "email" {
  for_each  = toset(var.alarm_emails)
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.value
}

resource "aws_prometheus_alert_manager_definition" "this" {
  workspace_id = aws_prometheus_workspace.this.id
  definition   = <<-DEFINITION
    alertmanager_config: |
      route:
        receiver: sns
        group_by: [alertname]
      receivers:
        - name: sns
          sns_configs:
            - topic_arn: ${aws_sns_topic.alarms.arn}
              sigv4:
                region: ${data.aws_region.current.name}
  DEFINITION
}

# -- the collector ------------------------------------------------------------------------------

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "collector" {
  name_prefix        = "${var.name}-collector-"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "collector" {
  # checkov:skip=CKV_AWS_356:ec2:DescribeInstances supports no resource-level permission; it is read-only (service discovery)
  statement {
    sid       = "DiscoverTheFleet"
    actions   = ["ec2:DescribeInstances", "ec2:DescribeAvailabilityZones"]
    resources = ["*"]
  }
  statement {
    sid       = "WriteMetrics"
    actions   = ["aps:RemoteWrite"]
    resources = [aws_prometheus_workspace.this.arn]
  }
}

resource "aws_iam_role_policy" "collector" {
  name   = "collector"
  role   = aws_iam_role.collector.id
  policy = data.aws_iam_policy_document.collector.json
}

resource "aws_iam_role_policy_attachment" "collector_ssm" {
  role       = aws_iam_role.collector.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "collector" {
  name_prefix = "${var.name}-collector-"
  role        = aws_iam_role.collector.name
  tags        = local.tags
}

resource "aws_security_group" "collector" {
  # checkov:skip=CKV_AWS_382:the collector reaches every fleet machine, the workspace endpoint and the release download; it has no ingress at all
  name_prefix = "${var.name}-collector-"
  description = "cronfleet metrics collector: outbound only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-collector" })

  egress {
    description = "scrapes, remote write, release download"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = ["0.0.0.0/0"]
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_launch_template" "collector" {
  name_prefix            = "${var.name}-collector-"
  image_id               = data.aws_ssm_parameter.al2023.insecure_value
  instance_type          = var.collector_instance_type
  vpc_security_group_ids = [aws_security_group.collector.id]
  update_default_version = true
  user_data = base64encode(templatefile("${path.module}/templates/collector.sh.tftpl", {
    prometheus_url    = var.prometheus_url
    prometheus_sha256 = var.prometheus_sha256
    prometheus_config = local.prometheus_config
  }))

  iam_instance_profile {
    arn = aws_iam_instance_profile.collector.arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = 20
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-collector" })
  }

  tags = local.tags
}

resource "aws_autoscaling_group" "collector" {
  name                = "${var.name}-collector"
  min_size            = 1
  max_size            = 1
  vpc_zone_identifier = var.subnet_ids

  launch_template {
    id      = aws_launch_template.collector.id
    version = aws_launch_template.collector.latest_version
  }

  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 0
    }
  }

  dynamic "tag" {
    for_each = merge(local.tags, { Name = "${var.name}-collector" })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
}

# -- what AWS measures itself ---------------------------------------------------------------------

resource "aws_cloudwatch_metric_alarm" "db_cpu" {
  alarm_name          = "${var.name}-db-cpu"
  alarm_description   = "The database's CPU above 80% for 10 minutes: scans and claims will slow down. Runbook: ${var.runbooks_url}#database-cpu-cloudwatch-name-db-cpu"
  namespace           = "AWS/RDS"
  metric_name         = "CPUUtilization"
  dimensions          = { DBInstanceIdentifier = var.db_instance_identifier }
  statistic           = "Average"
  period              = 60
  evaluation_periods  = 10
  threshold           = 80
  comparison_operator = "GreaterThanThreshold"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "db_storage" {
  alarm_name          = "${var.name}-db-free-storage"
  alarm_description   = "Less than 10 GiB free on the database (storage autoscaling may be at its ceiling). Runbook: ${var.runbooks_url}#database-free-storage-cloudwatch-name-db-free-storage"
  namespace           = "AWS/RDS"
  metric_name         = "FreeStorageSpace"
  dimensions          = { DBInstanceIdentifier = var.db_instance_identifier }
  statistic           = "Minimum"
  period              = 300
  evaluation_periods  = 2
  threshold           = 10 * 1024 * 1024 * 1024
  comparison_operator = "LessThanThreshold"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "kafka_disk" {
  alarm_name          = "${var.name}-kafka-disk"
  alarm_description   = "A broker's data disk above 80%: run messages may soon be refused. Runbook: ${var.runbooks_url}#kafka-disk-cloudwatch-name-kafka-disk"
  namespace           = "AWS/Kafka"
  metric_name         = "KafkaDataLogsDiskUsed"
  dimensions          = { "Cluster Name" = var.kafka_cluster_name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  threshold           = 80
  comparison_operator = "GreaterThanThreshold"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}
