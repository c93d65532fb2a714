variable "name" {
  type        = string
  description = "Name prefix of the release bucket and its key (e.g. cronfleet-prod)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 characters, lower-case letters, digits and dashes, starting with a letter."
  }
}

variable "wheel_path" {
  type        = string
  description = "The wheel scripts/release.sh built (dist/cronfleet-X-py3-none-any.whl); its .sha256 beside it, when there, must match."

  validation {
    condition     = can(regex("cronfleet-[A-Za-z0-9._+]+-py3-none-any\\.whl$", var.wheel_path)) && fileexists(var.wheel_path)
    error_message = "wheel_path: an existing file named cronfleet-<version>-py3-none-any.whl (bash scripts/release.sh builds it)."
  }
}

variable "keep_old_releases_days" {
  type        = number
  description = "Days a replaced object version is kept (a rollback within them re-uses it)."
  default     = 90

  validation {
    condition     = var.keep_old_releases_days >= 1 && floor(var.keep_old_releases_days) == var.keep_old_releases_days
    error_message = "keep_old_releases_days: a whole number, at least 1."
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
