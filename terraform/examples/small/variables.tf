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

variable "cronfleet_package" {
  type        = string
  description = "What pip installs on every machine (a version on your index, or a wheel URL)."
  default     = "cronfleet==0.1.0"

  validation {
    condition     = length(var.cronfleet_package) > 0 && !can(regex("['\"\\s]", var.cronfleet_package))
    error_message = "cronfleet_package: a pip requirement or URL without quotes or spaces."
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
  description = "Networks allowed to call the API."
  default     = ["10.0.0.0/8"]

  validation {
    condition     = alltrue([for c in var.api_ingress_cidrs : can(cidrhost(c, 0))])
    error_message = "api_ingress_cidrs: CIDR blocks."
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
