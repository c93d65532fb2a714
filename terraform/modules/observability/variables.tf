variable "name" {
  type        = string
  description = "Name prefix of the observability resources."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 characters, lower-case letters, digits and dashes, starting with a letter."
  }
}

variable "fleet_name" {
  type        = string
  description = "The fleet module's name: its machines carry the tag cronfleet:fleet = fleet_name, which the collector looks for."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.fleet_name))
    error_message = "fleet_name: the fleet module's name."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the collector."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id: expected a VPC id like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets the collector may run in."

  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "subnet_ids: at least one subnet."
  }
}

variable "metrics_port" {
  type        = number
  description = "Metrics port of the scheduler, worker and reaper services (the fleet's metrics_port)."
  default     = 9100

  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65535
    error_message = "metrics_port: between 1024 and 65535."
  }
}

variable "api_port" {
  type        = number
  description = "Port of the API, which serves /metrics itself (the fleet's api_port)."
  default     = 8080

  validation {
    condition     = var.api_port >= 1024 && var.api_port <= 65535
    error_message = "api_port: between 1024 and 65535."
  }
}

variable "partitions" {
  type        = number
  description = "Trigger partitions of the fleet: fewer owned than this alarms."

  validation {
    condition     = var.partitions >= 1 && var.partitions <= 32768 && floor(var.partitions) == var.partitions
    error_message = "partitions: a whole number from 1 to 32768."
  }
}

variable "start_lag_p99_target_s" {
  type        = number
  description = "p99 start lag (scheduled time to start, seconds) above which the fleet alarms (the requirement: 2)."
  default     = 2

  validation {
    condition     = var.start_lag_p99_target_s > 0 && var.start_lag_p99_target_s <= 300
    error_message = "start_lag_p99_target_s: above 0, at most 300 (the start-lag histogram's last bucket)."
  }
}

variable "consumer_lag_max" {
  type        = number
  description = "Run messages waiting in one tier, for 5 minutes, above which the fleet alarms."
  default     = 50000

  validation {
    condition     = var.consumer_lag_max > 0
    error_message = "consumer_lag_max: must be positive."
  }
}

variable "dead_letters_max" {
  type        = number
  description = "Dead letters waiting for a replay above which a ticket is raised."
  default     = 100

  validation {
    condition     = var.dead_letters_max >= 0
    error_message = "dead_letters_max: must not be negative."
  }
}

variable "alarm_emails" {
  type        = list(string)
  description = "Addresses subscribed to the alarm topic (each confirms by mail)."
  default     = []

  validation {
    condition     = alltrue([for e in var.alarm_emails : can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", e))])
    error_message = "alarm_emails: e-mail addresses."
  }
}

variable "prometheus_url" {
  type        = string
  description = "Prometheus release tarball the collector installs (linux-amd64)."
  default     = "https://github.com/prometheus/prometheus/releases/download/v2.53.1/prometheus-2.53.1.linux-amd64.tar.gz"

  validation {
    condition     = can(regex("^https://[^'\"\\s]+\\.tar\\.gz$", var.prometheus_url))
    error_message = "prometheus_url: an https URL of a .tar.gz."
  }
}

variable "prometheus_sha256" {
  type        = string
  description = "SHA-256 of that tarball (from the release's sha256sums.txt); the collector refuses anything else."

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.prometheus_sha256))
    error_message = "prometheus_sha256: 64 hex digits."
  }
}

variable "collector_instance_type" {
  type        = string
  description = "EC2 instance type of the collector."
  default     = "t3.small"

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.collector_instance_type))
    error_message = "collector_instance_type: an EC2 instance type like t3.small."
  }
}

variable "db_instance_identifier" {
  type        = string
  description = "RDS instance of the kit (the database module's instance_identifier), for its CloudWatch alarms."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,62}$", var.db_instance_identifier))
    error_message = "db_instance_identifier: an RDS instance identifier."
  }
}

variable "kafka_cluster_name" {
  type        = string
  description = "MSK cluster of the kit (the kafka module's cluster_name), for its CloudWatch alarms."

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9-]{0,63}$", var.kafka_cluster_name))
    error_message = "kafka_cluster_name: an MSK cluster name (letters, digits, dashes)."
  }
}

variable "log_retention_days" {
  type        = number
  description = "Days the workspace's own logs are kept."
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days: one of CloudWatch Logs' retention periods (e.g. 30, 90, 365)."
  }
}

variable "runbooks_url" {
  type        = string
  description = "Where on-call reads docs/runbooks.md: each alert links to its section (<url>#<alert name, lower-case>). Point it at the file on your Git host."
  default     = "docs/runbooks.md"

  validation {
    condition     = can(regex("^[^\\s\"#]+$", var.runbooks_url))
    error_message = "runbooks_url: a URL or path without spaces, quotes or a fragment."
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
