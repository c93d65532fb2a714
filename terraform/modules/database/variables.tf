variable "name" {
  type        = string
  description = "Name prefix of the database's resources."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 characters, lower-case letters, digits and dashes, starting with a letter."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the database."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id: expected a VPC id like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets of the database subnet group (AWS requires two zones or more)."

  validation {
    condition     = length(var.subnet_ids) >= 2 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids: at least two subnet ids in different zones."
  }
}

variable "client_security_group_ids" {
  type        = list(string)
  description = "Security groups allowed to connect (the fleet's)."

  validation {
    condition     = length(var.client_security_group_ids) >= 1
    error_message = "client_security_group_ids: at least one security group (the fleet's)."
  }
}

variable "engine_version" {
  type        = string
  description = "PostgreSQL major version (the kit is tested on 15; 15 and 16 work)."
  default     = "16"

  validation {
    condition     = contains(["15", "16"], var.engine_version)
    error_message = "engine_version: 15 or 16."
  }
}

variable "instance_class" {
  type        = string
  description = "RDS instance class."
  default     = "db.r7g.xlarge"

  validation {
    condition     = can(regex("^db\\.[a-z0-9]+\\.[a-z0-9]+$", var.instance_class))
    error_message = "instance_class: an RDS class like db.r7g.xlarge."
  }
}

variable "multi_az" {
  type        = bool
  description = "A synchronous standby in another zone, promoted on failure (the fleet that survives a zone's loss needs it)."
  default     = true
}

variable "allocated_storage_gb" {
  type        = number
  description = "Initial storage (GiB, gp3). 30 days of run history at 170 M runs a day is the sizing input (the model's report gives bytes per run)."
  default     = 500

  validation {
    condition     = var.allocated_storage_gb >= 20 && var.allocated_storage_gb <= 65536
    error_message = "allocated_storage_gb: from 20 to 65536."
  }
}

variable "max_allocated_storage_gb" {
  type        = number
  description = "Storage autoscaling ceiling (GiB); must be at least allocated_storage_gb."
  default     = 4000

  validation {
    condition     = var.max_allocated_storage_gb >= 20 && var.max_allocated_storage_gb <= 65536
    error_message = "max_allocated_storage_gb: from 20 to 65536."
  }
}

variable "max_connections" {
  type        = number
  description = "PostgreSQL max_connections: above the fleet's db_connections_max output (every pool full)."

  validation {
    condition     = var.max_connections >= 20 && var.max_connections <= 10000 && floor(var.max_connections) == var.max_connections
    error_message = "max_connections: a whole number from 20 to 10000."
  }
}

variable "shared_buffers_percent" {
  type        = number
  description = "shared_buffers as a percentage of the instance's memory (the trigger index and its hot runs should fit)."
  default     = 25

  validation {
    condition     = var.shared_buffers_percent >= 10 && var.shared_buffers_percent <= 40
    error_message = "shared_buffers_percent: from 10 to 40."
  }
}

variable "backup_retention_days" {
  type        = number
  description = "Days of automated backups (point-in-time recovery window)."
  default     = 14

  validation {
    condition     = var.backup_retention_days >= 1 && var.backup_retention_days <= 35
    error_message = "backup_retention_days: from 1 to 35 (0 would turn backups off)."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Refuse to delete the database (turn off deliberately before a destroy)."
  default     = true
}

variable "app_username" {
  type        = string
  description = "The role the cronfleet services connect as (table rights only; the owner, RDS's master user, migrates and runs maintenance)."
  default     = "cronfleet_app"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_]{0,62}$", var.app_username)) && var.app_username != "cronfleet"
    error_message = "app_username: lower-case letters, digits and underscores, at most 63, not the owner's name cronfleet."
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
