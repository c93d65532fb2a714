variable "name" {
  type        = string
  description = "Name prefix of every resource of this fleet (e.g. cronfleet-prod)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 characters, lower-case letters, digits and dashes, starting with a letter (AWS caps load balancer names at 32)."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC the fleet runs in."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id: expected a VPC id like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets of the fleet's machines, one per availability zone used."

  validation {
    condition     = length(var.subnet_ids) >= 1 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids: at least one subnet id like subnet-0123abcd."
  }
}

variable "api_subnet_ids" {
  type        = list(string)
  description = "Subnets of the API's load balancer (at least two zones, as AWS requires for an ALB)."

  validation {
    condition     = length(var.api_subnet_ids) >= 2 && alltrue([for s in var.api_subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "api_subnet_ids: at least two subnet ids (an ALB spans two zones)."
  }
}

variable "api_internal" {
  type        = bool
  description = "Whether the API's load balancer is internal (reachable from the VPC and its peers only)."
  default     = true
}

variable "api_certificate_arn" {
  type        = string
  description = "ACM certificate of the API's HTTPS listener."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:", var.api_certificate_arn))
    error_message = "api_certificate_arn: expected an ACM certificate ARN."
  }
}

variable "api_ingress_cidrs" {
  type        = list(string)
  description = "Networks allowed to call the API (HTTPS on the load balancer)."

  validation {
    condition     = length(var.api_ingress_cidrs) >= 1 && alltrue([for c in var.api_ingress_cidrs : can(cidrhost(c, 0))])
    error_message = "api_ingress_cidrs: at least one CIDR block like 10.0.0.0/8."
  }
}

variable "api_access_logs_bucket" {
  type        = string
  description = "S3 bucket for the API load balancer's access logs; empty: none."
  default     = ""

  validation {
    condition     = var.api_access_logs_bucket == "" || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.api_access_logs_bucket))
    error_message = "api_access_logs_bucket: an S3 bucket name, or empty."
  }
}

variable "release_bucket" {
  type        = string
  description = "S3 bucket holding the release's wheel (the release module's bucket); every machine may read the one object."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.release_bucket))
    error_message = "release_bucket: an S3 bucket name."
  }
}

variable "release_key" {
  type        = string
  description = "Key of the wheel in release_bucket; its last part is the wheel's file name (cronfleet-X-py3-none-any.whl), as pip requires."

  validation {
    condition     = can(regex("^[A-Za-z0-9._/-]*cronfleet-[A-Za-z0-9._+]+-py3-none-any\\.whl$", var.release_key))
    error_message = "release_key: an S3 key ending in the wheel's file name, cronfleet-<version>-py3-none-any.whl."
  }
}

variable "release_sha256" {
  type        = string
  description = "SHA-256 of the wheel (scripts/release.sh writes it beside the wheel); a machine installs the wheel only if it matches."

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.release_sha256))
    error_message = "release_sha256: 64 lower-case hex digits."
  }
}

variable "release_kms_key_arn" {
  type        = string
  description = "KMS key encrypting release_bucket (the machines need kms:Decrypt on it to read the wheel)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:", var.release_kms_key_arn))
    error_message = "release_kms_key_arn: expected a KMS key ARN."
  }
}

variable "pip_index_url" {
  type        = string
  description = "Package index pip installs the wheel's dependencies from (a private mirror); empty: pip's default."
  default     = ""

  validation {
    condition     = var.pip_index_url == "" || can(regex("^https://[^'\"\\s]+$", var.pip_index_url))
    error_message = "pip_index_url: an https URL, or empty."
  }
}

variable "scheduler_nodes" {
  type        = number
  description = "Scheduler nodes (they share the trigger partitions through leases)."

  validation {
    condition     = var.scheduler_nodes >= 1 && var.scheduler_nodes <= 64 && floor(var.scheduler_nodes) == var.scheduler_nodes
    error_message = "scheduler_nodes: a whole number from 1 to 64."
  }
}

variable "scheduler_instance_type" {
  type        = string
  description = "EC2 instance type of the scheduler nodes."
  default     = "c7i.large"

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.scheduler_instance_type))
    error_message = "scheduler_instance_type: an EC2 instance type like c7i.large."
  }
}

variable "workers" {
  type        = number
  description = "Workers kept running at all times (size them for the peak: scaling on lag is for sustained overload, a top-of-hour peak is over before new machines boot)."

  validation {
    condition     = var.workers >= 1 && var.workers <= 2000 && floor(var.workers) == var.workers
    error_message = "workers: a whole number from 1 to 2000."
  }
}

variable "workers_max" {
  type        = number
  description = "Most workers the consumer-lag scaling may add up to; 0 means twice `workers`."
  default     = 0

  validation {
    condition     = var.workers_max >= 0 && var.workers_max <= 4000 && floor(var.workers_max) == var.workers_max
    error_message = "workers_max: a whole number from 0 to 4000."
  }
}

variable "worker_instance_type" {
  type        = string
  description = "EC2 instance type of the workers."
  default     = "c7i.large"

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.worker_instance_type))
    error_message = "worker_instance_type: an EC2 instance type like c7i.large."
  }
}

variable "worker_concurrency" {
  type        = number
  description = "Runs one worker executes at once (CRONFLEET_WORKER_CONCURRENCY)."

  validation {
    condition     = var.worker_concurrency >= 1 && var.worker_concurrency <= 1024 && floor(var.worker_concurrency) == var.worker_concurrency
    error_message = "worker_concurrency: a whole number from 1 to 1024 (the worker's own limit)."
  }
}

variable "worker_lag_target" {
  type        = number
  description = "Run messages waiting per worker that the lag scaling aims for."
  default     = 1000

  validation {
    condition     = var.worker_lag_target > 0
    error_message = "worker_lag_target: must be positive."
  }
}

variable "reapers" {
  type        = number
  description = "Reapers (several may run: they lock rows with SKIP LOCKED)."
  default     = 2

  validation {
    condition     = var.reapers >= 1 && var.reapers <= 16 && floor(var.reapers) == var.reapers
    error_message = "reapers: a whole number from 1 to 16."
  }
}

variable "reaper_instance_type" {
  type        = string
  description = "EC2 instance type of the reapers."
  default     = "t3.medium"

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.reaper_instance_type))
    error_message = "reaper_instance_type: an EC2 instance type like t3.medium."
  }
}

variable "maintenance_instance_type" {
  type        = string
  description = "EC2 instance type of the one maintenance machine (day partitions of the run history, expiry of old rows)."
  default     = "t3.small"

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.maintenance_instance_type))
    error_message = "maintenance_instance_type: an EC2 instance type like t3.small."
  }
}

variable "task_policy" {
  type        = string
  description = "The operator's task policy, the TOML text of CRONFLEET_TASK_POLICY_FILE (docs/security.md: commands and run_as user per tenant); written to every machine, checked by the kit at boot. Empty: no command tasks."
  default     = ""

  validation {
    condition     = var.task_policy == "" || can(regex("\\[tenants\\.", var.task_policy))
    error_message = "task_policy: TOML with [tenants.<name>] tables (the kit checks the rest at boot), or empty."
  }
}

variable "tenant_policy" {
  type        = string
  description = "The operator's tenant policy, the TOML text of CRONFLEET_TENANT_POLICY_FILE (docs/tenants.md: weights, paid or free, priority tiers, limits per tenant); written to every machine, checked by the kit at boot. Empty: every tenant gets the defaults (all tiers but critical, no limit)."
  default     = ""

  validation {
    condition     = var.tenant_policy == "" || can(regex("\\[(defaults|tenants\\.)", var.tenant_policy))
    error_message = "tenant_policy: TOML with [defaults] or [tenants.<name>] tables (the kit checks the rest at boot), or empty."
  }
}

variable "task_run_as_users" {
  type        = list(string)
  description = "System users the task policy's run_as names: created on every machine; when any is set the workers run as root to switch to them (docs/security.md)."
  default     = []

  validation {
    condition     = alltrue([for u in var.task_run_as_users : can(regex("^[a-z_][a-z0-9_.-]{0,31}$", u)) && u != "root"])
    error_message = "task_run_as_users: user names (never root)."
  }
}

variable "http_allow_hosts" {
  type        = list(string)
  description = "Hosts and CIDRs every tenant's http tasks may reach although private (CRONFLEET_HTTP_ALLOW_HOSTS); empty: public addresses only."
  default     = []

  validation {
    condition     = alltrue([for h in var.http_allow_hosts : can(regex("^[A-Za-z0-9.:/*-]+$", h))])
    error_message = "http_allow_hosts: host names, addresses or CIDRs, without commas or spaces."
  }
}

variable "api_nodes" {
  type        = number
  description = "API machines behind the load balancer."
  default     = 2

  validation {
    condition     = var.api_nodes >= 1 && var.api_nodes <= 64 && floor(var.api_nodes) == var.api_nodes
    error_message = "api_nodes: a whole number from 1 to 64."
  }
}

variable "api_instance_type" {
  type        = string
  description = "EC2 instance type of the API machines."
  default     = "c7i.large"

  validation {
    condition     = can(regex("^[a-z0-9-]+\\.[a-z0-9]+$", var.api_instance_type))
    error_message = "api_instance_type: an EC2 instance type like c7i.large."
  }
}

variable "partitions" {
  type        = number
  description = "Logical partitions of the trigger index (CRONFLEET_PARTITIONS); fixed for the life of the database."

  validation {
    condition     = var.partitions >= 1 && var.partitions <= 32768 && floor(var.partitions) == var.partitions
    error_message = "partitions: a whole number from 1 to 32768 (the kit's limit)."
  }
}

variable "kafka_bootstrap_brokers" {
  type        = string
  description = "Kafka bootstrap servers, comma separated (the kafka module's bootstrap_brokers)."

  validation {
    condition     = can(regex("^[A-Za-z0-9.-]+:[0-9]+(,[A-Za-z0-9.-]+:[0-9]+)*$", var.kafka_bootstrap_brokers))
    error_message = "kafka_bootstrap_brokers: host:port[,host:port...]."
  }
}

variable "kafka_cluster_name" {
  type        = string
  description = "MSK cluster name: the dimension of the consumer-lag metrics the workers scale on."

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9-]{0,63}$", var.kafka_cluster_name))
    error_message = "kafka_cluster_name: an MSK cluster name (letters, digits, dashes)."
  }
}

variable "kafka_partitions_per_tier" {
  type        = number
  description = "Partitions of each run topic (CRONFLEET_RUN_TOPIC_PARTITIONS); caps the workers one tier can feed."

  validation {
    condition     = var.kafka_partitions_per_tier >= 1 && var.kafka_partitions_per_tier <= 4096 && floor(var.kafka_partitions_per_tier) == var.kafka_partitions_per_tier
    error_message = "kafka_partitions_per_tier: a whole number from 1 to 4096."
  }
}

variable "kafka_security_protocol" {
  type        = string
  description = "How the kit's clients reach the brokers (CRONFLEET_KAFKA_SECURITY_PROTOCOL): SSL (TLS, brokers verified against the system trust store, as MSK's certificates are) or PLAINTEXT. The kafka module's client_security_protocol."
  default     = "SSL"

  validation {
    condition     = contains(["SSL", "PLAINTEXT"], var.kafka_security_protocol)
    error_message = "kafka_security_protocol: SSL or PLAINTEXT."
  }
}

variable "kafka_replication_factor" {
  type        = number
  description = "Replication factor the kit gives the run topics it creates (CRONFLEET_RUN_TOPIC_REPLICATION)."
  default     = 3

  validation {
    condition     = var.kafka_replication_factor >= 1 && floor(var.kafka_replication_factor) == var.kafka_replication_factor
    error_message = "kafka_replication_factor: a whole number, at least 1."
  }
}

variable "kafka_min_insync_replicas" {
  type        = number
  description = "min.insync.replicas of the run topics (CRONFLEET_RUN_TOPIC_MIN_INSYNC)."
  default     = 2

  validation {
    condition     = var.kafka_min_insync_replicas >= 1 && floor(var.kafka_min_insync_replicas) == var.kafka_min_insync_replicas
    error_message = "kafka_min_insync_replicas: a whole number, at least 1."
  }
}

variable "run_topic_prefix" {
  type        = string
  description = "Prefix of the run topics: <prefix>.<tier> (the kit's default is cronfleet.runs)."
  default     = "cronfleet.runs"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,200}$", var.run_topic_prefix))
    error_message = "run_topic_prefix: letters, digits, dots, dashes and underscores."
  }
}

variable "tiers" {
  type        = list(string)
  description = "The kit's priority tiers, one run topic each (the workers' lag is summed over them)."
  default     = ["critical", "high", "normal", "low"]

  validation {
    condition     = length(var.tiers) >= 1 && alltrue([for t in var.tiers : contains(["critical", "high", "normal", "low"], t)])
    error_message = "tiers: a subset of the kit's tiers critical, high, normal, low."
  }
}

variable "db_host" {
  type        = string
  description = "Database endpoint host (the database module's address)."

  validation {
    condition     = can(regex("^[A-Za-z0-9.-]+$", var.db_host))
    error_message = "db_host: a host name or address."
  }
}

variable "db_port" {
  type        = number
  description = "Database port."
  default     = 5432

  validation {
    condition     = var.db_port >= 1 && var.db_port <= 65535
    error_message = "db_port: between 1 and 65535."
  }
}

variable "db_name" {
  type        = string
  description = "Database name."
  default     = "cronfleet"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_]{0,62}$", var.db_name))
    error_message = "db_name: lower-case letters, digits and underscores, at most 63."
  }
}

variable "db_sslmode" {
  type        = string
  description = "libpq sslmode of the fleet's database connections."
  default     = "require"

  validation {
    condition     = contains(["require", "verify-ca", "verify-full"], var.db_sslmode)
    error_message = "db_sslmode: require, verify-ca or verify-full (never without TLS)."
  }
}

variable "db_secret_arn" {
  type        = string
  description = "Secrets Manager secret of the database's owner (the database module's master_user_secret_arn, rotated by RDS): read by the api machines to migrate and by maintenance, never written to user data."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:", var.db_secret_arn))
    error_message = "db_secret_arn: expected a Secrets Manager secret ARN."
  }
}

variable "db_app_secret_arn" {
  type        = string
  description = "Secrets Manager secret of the services' role (the database module's app_user_secret_arn); the first api machine sets its password."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:", var.db_app_secret_arn))
    error_message = "db_app_secret_arn: expected a Secrets Manager secret ARN."
  }
}

variable "db_app_user" {
  type        = string
  description = "The role the scheduler, worker, reaper and api services connect as: table rights only, no DDL (the database module's app_username)."
  default     = "cronfleet_app"

  validation {
    condition     = can(regex("^[a-z_][a-z0-9_]{0,62}$", var.db_app_user))
    error_message = "db_app_user: lower-case letters, digits and underscores, at most 63."
  }
}

variable "db_secret_kms_key_arn" {
  type        = string
  description = "KMS key that encrypts the database secret (the machines need kms:Decrypt on it)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:", var.db_secret_kms_key_arn))
    error_message = "db_secret_kms_key_arn: expected a KMS key ARN."
  }
}

variable "settings" {
  type        = map(string)
  description = "More CRONFLEET_* settings for every service (kit/settings.py), e.g. CRONFLEET_SCAN_AHEAD_MS. Never secrets: these land in user data."
  default     = {}

  validation {
    condition = alltrue([
      for k, v in var.settings : (can(regex("^CRONFLEET_[A-Z0-9_]+$", k)) && !contains(["CRONFLEET_DATABASE_URL", "CRONFLEET_HOME", "CRONFLEET_TASK_POLICY_FILE", "CRONFLEET_TENANT_POLICY_FILE"], k) && !can(regex("['\\n]", v)))
    ])
    error_message = "settings: keys CRONFLEET_* (not DATABASE_URL, HOME, TASK_POLICY_FILE or TENANT_POLICY_FILE, which the bootstrap writes), values without quotes or newlines."
  }
}

variable "metrics_port" {
  type        = number
  description = "Prometheus port of the scheduler, worker and reaper services (the API serves /metrics on its own port)."
  default     = 9100

  validation {
    condition     = var.metrics_port >= 1024 && var.metrics_port <= 65535
    error_message = "metrics_port: between 1024 and 65535."
  }
}

variable "api_port" {
  type        = number
  description = "Port the API listens on behind the load balancer."
  default     = 8080

  validation {
    condition     = var.api_port >= 1024 && var.api_port <= 65535
    error_message = "api_port: between 1024 and 65535."
  }
}

variable "metrics_source_security_group_ids" {
  type        = list(string)
  description = "Security groups allowed to scrape the metrics ports (the observability module's collector)."
  default     = []

  validation {
    condition     = alltrue([for g in var.metrics_source_security_group_ids : can(regex("^sg-[0-9a-f]+$", g))])
    error_message = "metrics_source_security_group_ids: security group ids like sg-0123abcd."
  }
}

variable "drain_s" {
  type        = number
  description = "How long a stopping worker lets its runs finish before releasing them to the reaper."
  default     = 30

  validation {
    condition     = var.drain_s >= 0 && var.drain_s <= 3600
    error_message = "drain_s: from 0 to 3600 seconds."
  }
}

variable "root_volume_gb" {
  type        = number
  description = "Root volume size of every machine (GiB, encrypted gp3)."
  default     = 20

  validation {
    condition     = var.root_volume_gb >= 8 && var.root_volume_gb <= 1000
    error_message = "root_volume_gb: from 8 to 1000."
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
