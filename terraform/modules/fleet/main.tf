# The kit's services as five separately sized Auto Scaling groups: scheduler nodes, workers,
# reapers, maintenance and the API (behind an HTTPS load balancer): every service
# `cronfleet run-all` runs (tests/deploy checks the list). Every machine runs the same
# bootstrap (templates/bootstrap.sh.tftpl) with its role; the tests execute that very
# template. The machines install the release's wheel from S3, checked against its SHA-256.

data "aws_region" "current" {}
data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

# Amazon Linux 2023, kept current by AWS; a new image id rolls the groups (instance refresh).
data "aws_ssm_parameter" "al2023" {
  name = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

locals {
  workers_max = var.workers_max == 0 ? 2 * var.workers : max(var.workers_max, var.workers)

  roles = {
    scheduler = { min = var.scheduler_nodes, max = var.scheduler_nodes, instance_type = var.scheduler_instance_type }
    worker    = { min = var.workers, max = local.workers_max, instance_type = var.worker_instance_type }
    reaper    = { min = var.reapers, max = var.reapers, instance_type = var.reaper_instance_type }
    api       = { min = var.api_nodes, max = var.api_nodes, instance_type = var.api_instance_type }
    # one is enough (its deletes skip rows another holds); a replacement takes over at boot
    maintenance = { min = 1, max = 1, instance_type = var.maintenance_instance_type }
  }

  # What every service reads (kit/settings.py): these land in user data, so never secrets.
  kit_settings = merge(
    {
      CRONFLEET_KAFKA_BOOTSTRAP         = var.kafka_bootstrap_brokers
      CRONFLEET_KAFKA_SECURITY_PROTOCOL = var.kafka_security_protocol
      CRONFLEET_PARTITIONS              = tostring(var.partitions)
      CRONFLEET_RUN_TOPIC_PARTITIONS    = tostring(var.kafka_partitions_per_tier)
      CRONFLEET_RUN_TOPIC_REPLICATION   = tostring(var.kafka_replication_factor)
      CRONFLEET_RUN_TOPIC_MIN_INSYNC    = tostring(var.kafka_min_insync_replicas)
      CRONFLEET_WORKER_CONCURRENCY      = tostring(var.worker_concurrency)
      CRONFLEET_API_PORT                = tostring(var.api_port)
    },
    length(var.http_allow_hosts) == 0 ? {} : { CRONFLEET_HTTP_ALLOW_HOSTS = join(",", var.http_allow_hosts) },
    var.settings,
  )
  settings_env = join("\n", [for k in sort(keys(local.kit_settings)) : "${k}='${local.kit_settings[k]}'"])

  # Every variable of templates/bootstrap.sh.tftpl but `role` (tests/deploy checks the set).
  bootstrap_vars = {
    prefix              = "/opt/cronfleet"
    config_dir          = "/etc/cronfleet"
    state_dir           = "/var/lib/cronfleet"
    unit_dir            = "/etc/systemd/system"
    python              = "python3.11"
    wheel_url           = "s3://${var.release_bucket}/${var.release_key}"
    wheel_sha256        = var.release_sha256
    pip_index_url       = var.pip_index_url
    aws_region          = data.aws_region.current.name
    db_admin_secret_arn = var.db_secret_arn
    db_app_secret_arn   = var.db_app_secret_arn
    db_app_user         = var.db_app_user
    db_host             = var.db_host
    db_port             = var.db_port
    db_name             = var.db_name
    db_sslmode          = var.db_sslmode
    run_topic_prefix    = var.run_topic_prefix
    metrics_port        = var.metrics_port
    api_port            = var.api_port
    drain_s             = var.drain_s
    migrate_wait_s      = 900
    settings_env        = local.settings_env
    task_policy_b64     = var.task_policy == "" ? "" : base64encode(var.task_policy)
    tenant_policy_b64   = var.tenant_policy == "" ? "" : base64encode(var.tenant_policy)
    run_as_users        = join(" ", var.task_run_as_users)
  }

  # Database connections the fleet may open at once: each process's pool plus its overflow
  # (kit/store/db.py engine_for: scheduler 4, worker min(concurrency + 2, 20), reaper 2,
  # api 10, maintenance 1; overflow equal to the pool).
  db_connections_max = (
    var.scheduler_nodes * 8
    + local.workers_max * 2 * min(var.worker_concurrency + 2, 20)
    + var.reapers * 4
    + var.api_nodes * 20
    + 2
  )

  # What each role's machines may read: the release's wheel, the secret of the role it
  # connects as (the app role; maintenance: the owner, for its partition DDL), and the api
  # the owner's too (it migrates) and the right to set the app role's generated password.
  reads_admin_secret = toset(["api", "maintenance"])

  common_tags = merge(var.tags, { "cronfleet:fleet" = var.name })
}

# -- identity, one per role: read the release and the database secrets, report own health, --
# -- be reachable by Session Manager (operators, and the way in to an internal API: README) --

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "role" {
  for_each           = local.roles
  name_prefix        = "${var.name}-${each.key}-"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.common_tags
}

data "aws_iam_policy_document" "role" {
  for_each = local.roles

  statement {
    sid       = "ReadTheRelease"
    actions   = ["s3:GetObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.release_bucket}/${var.release_key}"]
  }
  statement {
    sid       = "ReadDatabaseSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = contains(local.reads_admin_secret, each.key) ? [var.db_secret_arn, var.db_app_secret_arn] : [var.db_app_secret_arn]
  }
  dynamic "statement" {
    for_each = each.key == "api" ? [1] : []
    content {
      sid       = "SetTheAppRolePassword"
      actions   = ["secretsmanager:PutSecretValue"]
      resources = [var.db_app_secret_arn]
    }
  }
  statement {
    sid       = "DecryptDatabaseSecrets"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.db_secret_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${data.aws_region.current.name}.amazonaws.com"]
    }
  }
  statement {
    sid       = "DecryptTheRelease"
    actions   = ["kms:Decrypt"]
    resources = [var.release_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.name}.amazonaws.com"]
    }
  }
  statement {
    sid     = "ReportOwnHealth"
    actions = ["autoscaling:SetInstanceHealth"]
    resources = [
      "arn:${data.aws_partition.current.partition}:autoscaling:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${var.name}-${each.key}"
    ]
  }
}

resource "aws_iam_role_policy" "role" {
  for_each = local.roles
  name     = "cronfleet-${each.key}"
  role     = aws_iam_role.role[each.key].id
  policy   = data.aws_iam_policy_document.role[each.key].json
}

resource "aws_iam_role_policy_attachment" "ssm" {
  for_each   = local.roles
  role       = aws_iam_role.role[each.key].name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "role" {
  for_each    = local.roles
  name_prefix = "${var.name}-${each.key}-"
  role        = aws_iam_role.role[each.key].name
  tags        = local.common_tags
}

# -- network ---------------------------------------------------------------------------------

resource "aws_security_group" "fleet" {
  # checkov:skip=CKV_AWS_382:machines install from a package index and call AWS APIs (Secrets Manager, Auto Scaling) through the NAT; restrict with VPC endpoints and a mirror where you have them
  name_prefix = "${var.name}-fleet-"
  description = "cronfleet services: scheduler nodes, workers, reapers, maintenance, api"
  vpc_id      = var.vpc_id
  tags        = merge(local.common_tags, { Name = "${var.name}-fleet" })

  egress {
    description = "package index, AWS APIs, database, Kafka, HTTP tasks"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = ["0.0.0.0/0"]
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "api_lb" {
  name_prefix = "${var.name}-api-lb-"
  description = "HTTPS to the cronfleet API load balancer"
  vpc_id      = var.vpc_id
  tags        = merge(local.common_tags, { Name = "${var.name}-api-lb" })

  ingress {
    description = "HTTPS from the API's callers"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = var.api_ingress_cidrs
  }

  egress {
    description     = "to the API machines"
    from_port       = var.api_port
    to_port         = var.api_port
    protocol        = "tcp"
    security_groups = [aws_security_group.fleet.id]
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "api_from_lb" {
  security_group_id            = aws_security_group.fleet.id
  description                  = "API port from its load balancer"
  referenced_security_group_id = aws_security_group.api_lb.id
  ip_protocol                  = "tcp"
  from_port                    = var.api_port
  to_port                      = var.api_port
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each                     = toset(var.metrics_source_security_group_ids)
  security_group_id            = aws_security_group.fleet.id
  description                  = "Prometheus scrapes of the metrics ports"
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = min(var.metrics_port, var.api_port)
  to_port                      = max(var.metrics_port, var.api_port)
}

# -- the API's load balancer ------------------------------------------------------------------

resource "aws_lb" "api" {
  # checkov:skip=CKV_AWS_91:access logs go to var.api_access_logs_bucket when it is set (an organisation's log bucket, not created here)
  # checkov:skip=CKV2_AWS_28:WAF is the operator's choice for an internet-facing API (api_internal = false); the default is internal
  name                       = "${var.name}-api"
  internal                   = var.api_internal
  load_balancer_type         = "application"
  security_groups            = [aws_security_group.api_lb.id]
  subnets                    = var.api_subnet_ids
  drop_invalid_header_fields = true
  enable_deletion_protection = true
  tags                       = local.common_tags

  dynamic "access_logs" {
    for_each = var.api_access_logs_bucket == "" ? [] : [var.api_access_logs_bucket]
    content {
      bucket  = access_logs.value
      prefix  = var.name
      enabled = true
    }
  }
}

resource "aws_lb_target_group" "api" {
  name_prefix          = "cfapi-"
  port                 = var.api_port
  protocol             = "HTTP"
  vpc_id               = var.vpc_id
  deregistration_delay = 30
  tags                 = local.common_tags

  health_check {
    path                = "/healthz"
    matcher             = "200"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "api_https" {
  load_balancer_arn = aws_lb.api.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.api_certificate_arn
  tags              = local.common_tags

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.api.arn
  }
}

# -- the machines -----------------------------------------------------------------------------

resource "aws_launch_template" "role" {
  for_each = local.roles

  name_prefix            = "${var.name}-${each.key}-"
  image_id               = data.aws_ssm_parameter.al2023.insecure_value
  instance_type          = each.value.instance_type
  vpc_security_group_ids = [aws_security_group.fleet.id]
  update_default_version = true
  # gzipped: cloud-init unpacks it; EC2 takes 16 KB of user data
  user_data = base64gzip(templatefile("${path.module}/templates/bootstrap.sh.tftpl",
  merge(local.bootstrap_vars, { role = each.key })))

  iam_instance_profile {
    arn = aws_iam_instance_profile.role[each.key].arn
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
      volume_size           = var.root_volume_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.common_tags, { Name = "${var.name}-${each.key}", "cronfleet:role" = each.key })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(local.common_tags, { Name = "${var.name}-${each.key}" })
  }

  tags = local.common_tags
}

resource "aws_autoscaling_group" "role" {
  for_each = local.roles

  name                      = "${var.name}-${each.key}"
  min_size                  = each.value.min
  max_size                  = each.value.max
  vpc_zone_identifier       = var.subnet_ids
  health_check_type         = each.key == "api" ? "ELB" : "EC2"
  health_check_grace_period = 300
  target_group_arns         = each.key == "api" ? [aws_lb_target_group.api.arn] : []
  termination_policies      = ["OldestLaunchTemplate", "OldestInstance"]
  enabled_metrics           = ["GroupInServiceInstances", "GroupDesiredCapacity", "GroupPendingInstances"]

  launch_template {
    id      = aws_launch_template.role[each.key].id
    version = aws_launch_template.role[each.key].latest_version
  }

  # Rolling replacement: a new launch template version (image, settings, package) replaces
  # the machines a few at a time; scheduler nodes hand their partitions over by lease.
  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 90
      instance_warmup        = 120
    }
  }

  dynamic "tag" {
    for_each = merge(local.common_tags, { Name = "${var.name}-${each.key}", "cronfleet:role" = each.key })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }
}

# Workers scale on consumer lag (MSK's SumOffsetLag of the kit's consumer groups, one per
# tier: <group>.<tier>) per in-service worker. A top-of-hour peak lasts seconds, less than a
# boot: `workers` must carry the peak; this policy answers sustained overload.
resource "aws_autoscaling_policy" "worker_lag" {
  name                   = "${var.name}-worker-lag"
  autoscaling_group_name = aws_autoscaling_group.role["worker"].name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    target_value = var.worker_lag_target

    customized_metric_specification {
      dynamic "metrics" {
        for_each = var.tiers
        content {
          id          = "lag_${metrics.value}"
          return_data = false
          metric_stat {
            stat = "Sum"
            metric {
              namespace   = "AWS/Kafka"
              metric_name = "SumOffsetLag"
              dimensions {
                name  = "Cluster Name"
                value = var.kafka_cluster_name
              }
              dimensions {
                name  = "Consumer Group"
                value = "cronfleet-workers.${metrics.value}"
              }
              dimensions {
                name  = "Topic"
                value = "${var.run_topic_prefix}.${metrics.value}"
              }
            }
          }
        }
      }

      metrics {
        id          = "workers"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "AWS/AutoScaling"
            metric_name = "GroupInServiceInstances"
            dimensions {
              name  = "AutoScalingGroupName"
              value = aws_autoscaling_group.role["worker"].name
            }
          }
        }
      }

      metrics {
        id          = "lag_per_worker"
        label       = "run messages waiting per worker"
        expression  = "(${join(" + ", [for t in var.tiers : "FILL(lag_${t}, 0)"])}) / workers"
        return_data = true
      }
    }
  }
}
