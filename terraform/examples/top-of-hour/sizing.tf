# The fleet the capacity model recommends: exactly the variables that
#   cronfleet sim size --target-p99-start 2s top-of-hour --emit-tfvars sizing.auto.tfvars
# writes (sim/tfvars.py; tests/deploy checks names and types). Terraform reads
# sizing.auto.tfvars by itself. The model's report for these numbers is in model/.

variable "scheduler_nodes" {
  type        = number
  description = "Scheduler nodes the model needs at the peak."

  validation {
    condition     = var.scheduler_nodes >= 1 && floor(var.scheduler_nodes) == var.scheduler_nodes
    error_message = "scheduler_nodes: a whole number, at least 1."
  }
}

variable "scheduler_nodes_headroom" {
  type        = number
  description = "Extra scheduler nodes so that losing one still meets the target."

  validation {
    condition     = var.scheduler_nodes_headroom >= 0 && floor(var.scheduler_nodes_headroom) == var.scheduler_nodes_headroom
    error_message = "scheduler_nodes_headroom: a whole number, at least 0."
  }
}

variable "workers" {
  type        = number
  description = "Workers the model needs at the peak."

  validation {
    condition     = var.workers >= 1 && floor(var.workers) == var.workers
    error_message = "workers: a whole number, at least 1."
  }
}

variable "workers_headroom" {
  type        = number
  description = "Extra workers so that losing some still meets the target."

  validation {
    condition     = var.workers_headroom >= 0 && floor(var.workers_headroom) == var.workers_headroom
    error_message = "workers_headroom: a whole number, at least 0."
  }
}

variable "worker_concurrency" {
  type        = number
  description = "Runs one worker executes at once, as modelled."

  validation {
    condition     = var.worker_concurrency >= 1 && var.worker_concurrency <= 1024
    error_message = "worker_concurrency: from 1 to 1024."
  }
}

variable "partitions" {
  type        = number
  description = "Trigger partitions, as modelled (fixed for the life of the database)."

  validation {
    condition     = var.partitions >= 1 && var.partitions <= 32768 && floor(var.partitions) == var.partitions
    error_message = "partitions: a whole number from 1 to 32768."
  }
}

variable "db_max_connections" {
  type        = number
  description = "Database connections the model keeps busy at once; the database allows the larger of this and what the fleet's pools can open."

  validation {
    condition     = var.db_max_connections >= 1
    error_message = "db_max_connections: at least 1."
  }
}

variable "kafka_partitions_per_tier" {
  type        = number
  description = "Partitions of each run topic, as modelled."

  validation {
    condition     = var.kafka_partitions_per_tier >= 1 && var.kafka_partitions_per_tier <= 4096
    error_message = "kafka_partitions_per_tier: from 1 to 4096."
  }
}
