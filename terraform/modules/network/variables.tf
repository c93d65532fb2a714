variable "name" {
  type        = string
  description = "Name prefix of the network's resources."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 characters, lower-case letters, digits and dashes, starting with a letter."
  }
}

variable "cidr_block" {
  type        = string
  description = "Address range of the VPC."
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.cidr_block, 0)) && tonumber(split("/", var.cidr_block)[1]) <= 20
    error_message = "cidr_block: an IPv4 CIDR block of /20 or larger."
  }
}

variable "zones" {
  type        = number
  description = "Availability zones used (1 for a single-zone install; 3 for the fleet that survives losing a zone)."
  default     = 3

  validation {
    condition     = var.zones >= 1 && var.zones <= 3 && floor(var.zones) == var.zones
    error_message = "zones: 1, 2 or 3."
  }
}

variable "zone_letters" {
  type        = list(string)
  description = "Zones to use, by the letter after the region's name (eu-west-1a: a), in order."
  default     = ["a", "b", "c"]

  validation {
    condition     = length(var.zone_letters) >= 2 && alltrue([for l in var.zone_letters : can(regex("^[a-z]$", l))])
    error_message = "zone_letters: at least two single letters (a load balancer needs two zones)."
  }
}

variable "nat_per_zone" {
  type        = bool
  description = "One NAT gateway per zone (survives a zone's loss) rather than one for all."
  default     = true
}

variable "flow_log_retention_days" {
  type        = number
  description = "Days the VPC flow logs are kept."
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.flow_log_retention_days)
    error_message = "flow_log_retention_days: one of CloudWatch Logs' retention periods (e.g. 30, 90, 365)."
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
