# What only the deploying team knows.

variable "region" {
  type        = string
  description = "AWS region to deploy in."
  default     = "eu-west-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region: an AWS region like eu-west-1."
  }
}

variable "cronfleet_wheel" {
  type        = string
  description = "The wheel `bash scripts/release.sh` built (dist/cronfleet-<version>-py3-none-any.whl, its .sha256 beside it): uploaded to the release bucket and installed on every machine by its SHA-256."

  validation {
    condition     = can(regex("cronfleet-[A-Za-z0-9._+]+-py3-none-any\\.whl$", var.cronfleet_wheel))
    error_message = "cronfleet_wheel: the path of a cronfleet-<version>-py3-none-any.whl (bash scripts/release.sh)."
  }
}

variable "pip_index_url" {
  type        = string
  description = "Package index the machines install the wheel's dependencies from (a private mirror); empty: PyPI."
  default     = ""

  validation {
    condition     = var.pip_index_url == "" || can(regex("^https://[^'\"\\s]+$", var.pip_index_url))
    error_message = "pip_index_url: an https URL, or empty."
  }
}

variable "task_policy" {
  type        = string
  description = "Your task policy's TOML (docs/security.md: the commands each tenant may run, as which user); empty: no command tasks. Load a file of it with file()."
  default     = ""

  validation {
    condition     = var.task_policy == "" || can(regex("\\[tenants\\.", var.task_policy))
    error_message = "task_policy: TOML with [tenants.<name>] tables, or empty."
  }
}

variable "tenant_policy" {
  type        = string
  description = "Your tenant policy's TOML (docs/tenants.md: weights, paid or free, tiers and limits per tenant); empty: every tenant gets the defaults. Load a file of it with file()."
  default     = ""

  validation {
    condition     = var.tenant_policy == "" || can(regex("\\[(defaults|tenants\\.)", var.tenant_policy))
    error_message = "tenant_policy: TOML with [defaults] or [tenants.<name>] tables, or empty."
  }
}

variable "task_run_as_users" {
  type        = list(string)
  description = "The run_as users your task policy names (created on the machines)."
  default     = []

  validation {
    condition     = alltrue([for u in var.task_run_as_users : can(regex("^[a-z_][a-z0-9_.-]{0,31}$", u)) && u != "root"])
    error_message = "task_run_as_users: user names (never root)."
  }
}

variable "http_allow_hosts" {
  type        = list(string)
  description = "Private hosts and CIDRs every tenant's http tasks may reach (CRONFLEET_HTTP_ALLOW_HOSTS); empty: public addresses only."
  default     = []

  validation {
    condition     = alltrue([for h in var.http_allow_hosts : can(regex("^[A-Za-z0-9.:/*-]+$", h))])
    error_message = "http_allow_hosts: host names, addresses or CIDRs."
  }
}

variable "api_certificate_arn" {
  type        = string
  description = "ACM certificate for the API's HTTPS listener (its DNS name is yours to point at the api_endpoint output)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:", var.api_certificate_arn))
    error_message = "api_certificate_arn: expected an ACM certificate ARN."
  }
}

variable "api_ingress_cidrs" {
  type        = list(string)
  description = "Networks besides this VPC allowed to call the API's internal load balancer (a peered VPC, a VPN's range); empty: the VPC only, reached through a Session Manager tunnel (README)."
  default     = []

  validation {
    condition     = alltrue([for c in var.api_ingress_cidrs : can(cidrhost(c, 0)) && !contains(["0.0.0.0/0", "::/0"], c)])
    error_message = "api_ingress_cidrs: CIDR blocks, never the whole internet (the load balancer is internal)."
  }
}

variable "alarm_emails" {
  type        = list(string)
  description = "Who receives the alarms."
  default     = []

  validation {
    condition     = alltrue([for e in var.alarm_emails : can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", e))])
    error_message = "alarm_emails: e-mail addresses."
  }
}

variable "prometheus_sha256" {
  type        = string
  description = "SHA-256 of the Prometheus release the collector installs (observability module's prometheus_url)."

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.prometheus_sha256))
    error_message = "prometheus_sha256: 64 hex digits."
  }
}
