# A VPC for the examples: private subnets for the fleet, database and brokers, public ones
# for the NAT gateways (and an internet-facing API load balancer, if chosen). Load balancers
# need two zones, so even a single-zone install gets two public and two private subnets;
# `zones` says where the machines, the database and the brokers live.

# The zones are named, not "whatever the region lists": a zone AWS adds later never moves
# a subnet.
data "aws_availability_zones" "available" {
  state = "available"

  filter {
    name   = "zone-name"
    values = [for letter in var.zone_letters : "${data.aws_region.current.name}${letter}"]
  }

  lifecycle {
    postcondition {
      condition     = length(self.names) >= max(var.zones, 2)
      error_message = "zone_letters: fewer available zones than max(zones, 2) in this region."
    }
  }
}

data "aws_region" "current" {}

locals {
  subnet_zones = max(var.zones, 2)
  azs          = slice(data.aws_availability_zones.available.names, 0, local.subnet_zones)
  nat_count    = var.nat_per_zone ? local.subnet_zones : 1
  tags         = merge(var.tags, { "cronfleet:network" = var.name })
}

resource "aws_vpc" "this" {
  cidr_block           = var.cidr_block
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(local.tags, { Name = var.name })
}

# No rule: nothing may use the default security group.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = "${var.name}-default-unused" })
}

resource "aws_subnet" "private" {
  count             = local.subnet_zones
  vpc_id            = aws_vpc.this.id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.cidr_block, 4, count.index)
  tags              = merge(local.tags, { Name = "${var.name}-private-${local.azs[count.index]}", "cronfleet:tier" = "private" })
}

resource "aws_subnet" "public" {
  count             = local.subnet_zones
  vpc_id            = aws_vpc.this.id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.cidr_block, 8, 200 + count.index)
  tags              = merge(local.tags, { Name = "${var.name}-public-${local.azs[count.index]}", "cronfleet:tier" = "public" })
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = var.name })
}

resource "aws_eip" "nat" {
  count  = local.nat_count
  domain = "vpc"
  tags   = merge(local.tags, { Name = "${var.name}-nat-${count.index}" })
}

resource "aws_nat_gateway" "this" {
  count         = local.nat_count
  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id
  tags          = merge(local.tags, { Name = "${var.name}-${count.index}" })
  depends_on    = [aws_internet_gateway.this]
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = "${var.name}-public" })

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this.id
  }
}

resource "aws_route_table_association" "public" {
  count          = local.subnet_zones
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public.id
}

resource "aws_route_table" "private" {
  count  = local.subnet_zones
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = "${var.name}-private-${count.index}" })

  route {
    cidr_block     = "0.0.0.0/0"
    nat_gateway_id = aws_nat_gateway.this[var.nat_per_zone ? count.index : 0].id
  }
}

resource "aws_route_table_association" "private" {
  count          = local.subnet_zones
  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

# -- flow logs, encrypted ----------------------------------------------------------------------

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

data "aws_iam_policy_document" "logs_key" {
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

resource "aws_kms_key" "logs" {
  description         = "${var.name}: VPC flow logs"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.logs_key.json
  tags                = local.tags
}

resource "aws_cloudwatch_log_group" "flow" {
  name              = "/cronfleet/${var.name}/vpc-flow"
  retention_in_days = var.flow_log_retention_days
  kms_key_id        = aws_kms_key.logs.arn
  tags              = local.tags
}

data "aws_iam_policy_document" "flow_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "flow" {
  name_prefix        = "${var.name}-flow-"
  assume_role_policy = data.aws_iam_policy_document.flow_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "flow" {
  statement {
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${aws_cloudwatch_log_group.flow.arn}:*"]
  }
}

resource "aws_iam_role_policy" "flow" {
  name   = "flow-logs"
  role   = aws_iam_role.flow.id
  policy = data.aws_iam_policy_document.flow.json
}

resource "aws_flow_log" "this" {
  vpc_id          = aws_vpc.this.id
  traffic_type    = "ALL"
  log_destination = aws_cloudwatch_log_group.flow.arn
  iam_role_arn    = aws_iam_role.flow.arn
  tags            = local.tags
}
