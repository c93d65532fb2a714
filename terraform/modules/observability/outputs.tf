output "workspace_id" {
  description = "Amazon Managed Service for Prometheus workspace holding the kit's metrics."
  value       = aws_prometheus_workspace.this.id
}

output "prometheus_endpoint" {
  description = "Query endpoint of the workspace (Grafana's data source for the grafana_dashboard output, or awscurl)."
  value       = aws_prometheus_workspace.this.prometheus_endpoint
}

output "alarm_topic_arn" {
  description = "SNS topic every alarm publishes to."
  value       = aws_sns_topic.alarms.arn
}

output "collector_security_group_id" {
  description = "Security group of the collector: give it to the fleet's metrics_source_security_group_ids."
  value       = aws_security_group.collector.id
}

output "alert_rules" {
  description = "The rendered Prometheus alerting rules (what the workspace evaluates)."
  value       = local.alert_rules
}

output "grafana_dashboard" {
  description = "The fleet's Grafana dashboard (JSON: start lag, backlog per tier, partitions, dead letters, API errors, database and broker health); import it with the workspace as its Prometheus data source."
  value       = file("${path.module}/dashboards/cronfleet.json")
}
