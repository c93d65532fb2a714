output "security_group_id" {
  description = "Security group of the fleet's machines (allow it into the database and Kafka)."
  value       = aws_security_group.fleet.id
}

output "api_endpoint" {
  description = "HTTPS address of the API's load balancer (point a DNS name matching the certificate at it)."
  value       = "https://${aws_lb.api.dns_name}"
}

output "api_load_balancer_arn_suffix" {
  description = "ARN suffix of the API's load balancer, for CloudWatch metrics and alarms."
  value       = aws_lb.api.arn_suffix
}

output "autoscaling_group_names" {
  description = "Auto Scaling group of each role (scheduler, worker, reaper, maintenance, api)."
  value       = { for role, group in aws_autoscaling_group.role : role => group.name }
}

output "instance_role_names" {
  description = "IAM role of each role's machines (attach more policies for your tasks to the worker's)."
  value       = { for role, r in aws_iam_role.role : role => r.name }
}

output "metrics_ports" {
  description = "Port serving /metrics for each role: what the observability module scrapes."
  value = {
    scheduler   = var.metrics_port
    worker      = var.metrics_port
    reaper      = var.metrics_port
    maintenance = var.metrics_port
    api         = var.api_port
  }
}

output "db_connections_max" {
  description = "Database connections the fleet may open at once (every pool full, workers at workers_max); the database's max_connections must exceed it."
  value       = local.db_connections_max
}

output "kit_settings" {
  description = "The CRONFLEET_* settings every service receives (not secret: the database URL is built on the machine from Secrets Manager)."
  value       = local.kit_settings
}
