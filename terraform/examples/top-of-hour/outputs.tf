output "api_endpoint" {
  description = "The API's load balancer (HTTPS); point your certificate's DNS name at it."
  value       = module.fleet.api_endpoint
}

output "autoscaling_group_names" {
  description = "The fleet's groups by role."
  value       = module.fleet.autoscaling_group_names
}

output "database_secret_arn" {
  description = "Where the database credentials live (Secrets Manager; never in this state)."
  value       = module.database.master_user_secret_arn
}

output "db_connections" {
  description = "What the fleet's pools can open at worst, and what PostgreSQL allows."
  value = {
    fleet_max       = module.fleet.db_connections_max
    max_connections = min(5000, max(var.db_max_connections, module.fleet.db_connections_max + 50))
  }
}

output "alarm_topic_arn" {
  description = "SNS topic of every alarm."
  value       = module.observability.alarm_topic_arn
}

output "prometheus_endpoint" {
  description = "Query endpoint of the metrics workspace."
  value       = module.observability.prometheus_endpoint
}
