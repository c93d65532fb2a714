variable "name" {
  type        = string
  description = "Name prefix of the cluster's resources (and the MSK cluster name)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 characters, lower-case letters, digits and dashes, starting with a letter."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the brokers."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id: expected a VPC id like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets of the brokers, one per zone (MSK spreads brokers evenly over them)."

  validation {
    condition     = length(var.subnet_ids) >= 2 && length(var.subnet_ids) <= 3
    error_message = "subnet_ids: two or three subnets in different zones (MSK's rule)."
  }
}

variable "client_security_group_ids" {
  type        = list(string)
  description = "Security groups allowed to reach the brokers (the fleet's)."

  validation {
    condition     = length(var.client_security_group_ids) >= 1
    error_message = "client_security_group_ids: at least one security group (the fleet's)."
  }
}

variable "kafka_version" {
  type        = string
  description = "Apache Kafka version of the MSK cluster."
  default     = "3.6.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+(\\.x)?$", var.kafka_version))
    error_message = "kafka_version: an MSK version like 3.6.0."
  }
}

variable "broker_count" {
  type        = number
  description = "Brokers: a multiple of the number of subnets, and at least the replication factor."
  default     = 3

  validation {
    condition     = var.broker_count >= 2 && floor(var.broker_count) == var.broker_count
    error_message = "broker_count: a whole number, at least 2."
  }
}

variable "broker_instance_type" {
  type        = string
  description = "MSK broker instance type."
  default     = "kafka.m7g.large"

  validation {
    condition     = can(regex("^kafka\\.[a-z0-9]+\\.[a-z0-9]+$", var.broker_instance_type))
    error_message = "broker_instance_type: an MSK type like kafka.m7g.large."
  }
}

variable "broker_volume_gb" {
  type        = number
  description = "EBS storage per broker (GiB)."
  default     = 200

  validation {
    condition     = var.broker_volume_gb >= 1 && var.broker_volume_gb <= 16384
    error_message = "broker_volume_gb: from 1 to 16384."
  }
}

variable "replication_factor" {
  type        = number
  description = "Replication factor of the run topics (and the cluster's default)."
  default     = 3

  validation {
    condition     = var.replication_factor >= 2 && floor(var.replication_factor) == var.replication_factor
    error_message = "replication_factor: a whole number, at least 2 (one broker's loss must lose no run message)."
  }
}

variable "min_insync_replicas" {
  type        = number
  description = "min.insync.replicas: with acks=all (the kit's producer) a publish is confirmed on this many brokers; below the replication factor, so one broker may be down."
  default     = 2

  validation {
    condition     = var.min_insync_replicas >= 1 && floor(var.min_insync_replicas) == var.min_insync_replicas
    error_message = "min_insync_replicas: a whole number, at least 1."
  }
}

variable "tiers" {
  type        = list(string)
  description = "The kit's priority tiers, one run topic each (<topic_prefix>.<tier>)."
  default     = ["critical", "high", "normal", "low"]

  validation {
    condition     = length(var.tiers) >= 1 && alltrue([for t in var.tiers : contains(["critical", "high", "normal", "low"], t)])
    error_message = "tiers: a subset of the kit's tiers critical, high, normal, low."
  }
}

variable "partitions_per_tier" {
  type        = number
  description = "Partitions of each run topic; the workers of one tier can be at most this many consumers."

  validation {
    condition     = var.partitions_per_tier >= 1 && var.partitions_per_tier <= 4096 && floor(var.partitions_per_tier) == var.partitions_per_tier
    error_message = "partitions_per_tier: a whole number from 1 to 4096."
  }
}

variable "topic_prefix" {
  type        = string
  description = "Prefix of the run topics (the kit's default is cronfleet.runs)."
  default     = "cronfleet.runs"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,200}$", var.topic_prefix))
    error_message = "topic_prefix: letters, digits, dots, dashes and underscores."
  }
}

variable "client_broker_encryption" {
  type        = string
  description = "Encryption between clients and brokers: TLS (TLS only, port 9094) or TLS_PLAINTEXT (TLS on 9094 and plaintext on 9092). The kit's clients have no TLS setting yet, so the default keeps plaintext inside the VPC, limited to the fleet's security group; brokers always talk TLS among themselves."
  default     = "TLS_PLAINTEXT"

  validation {
    condition     = contains(["TLS", "TLS_PLAINTEXT"], var.client_broker_encryption)
    error_message = "client_broker_encryption: TLS or TLS_PLAINTEXT."
  }
}

variable "log_retention_hours" {
  type        = number
  description = "How long run messages are kept on the brokers (the database is the source of truth; this covers a long consumer outage)."
  default     = 72

  validation {
    condition     = var.log_retention_hours >= 1 && var.log_retention_hours <= 8760
    error_message = "log_retention_hours: from 1 to 8760."
  }
}

variable "broker_log_retention_days" {
  type        = number
  description = "Days the brokers' own logs are kept in CloudWatch Logs."
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.broker_log_retention_days)
    error_message = "broker_log_retention_days: one of CloudWatch Logs' retention periods (e.g. 30, 90, 365)."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}

  validation {
    condition     = alltrue([for k, v in var.tags : length(k) <= 128 && length(v) <= 256])
    error_message = "tags: keys up to 128 and values up to 256 characters (AWS limits)."
  }
}
