output "api_endpoint" {
  description = "The API's internal load balancer (HTTPS); point your certificate's DNS name at it."
  value       = module.fleet.api_endpoint
}

output "api_tunnel" {
  description = "How to reach the API from your machine without a network route: a Session Manager tunnel through an api machine to the load balancer (needs the AWS CLI's session-manager-plugin and ssm:StartSession)."
  value = join(" ", [
    "aws ssm start-session --region ${var.region}",
    "--target $(aws autoscaling describe-auto-scaling-groups --region ${var.region} --auto-scaling-group-names ${module.fleet.autoscaling_group_names["api"]} --query 'AutoScalingGroups[0].Instances[0].InstanceId' --output text)",
    "--document-name AWS-StartPortForwardingSessionToRemoteHost",
    "--parameters '{\"host\":[\"${trimprefix(module.fleet.api_endpoint, "https://")}\"],\"portNumber\":[\"443\"],\"localPortNumber\":[\"8443\"]}'",
  ])
}

output "autoscaling_group_names" {
  description = "The fleet's groups by role."
  value       = module.fleet.autoscaling_group_names
}

output "database_secret_arn" {
  description = "Where the database owner's credentials live (Secrets Manager, rotated by RDS; never in this state)."
  value       = module.database.master_user_secret_arn
}

output "release" {
  description = "The wheel the machines install: where it is and its SHA-256."
  value       = "s3://${module.release.bucket}/${module.release.key} sha256 ${module.release.sha256}"
}

output "db_connections" {
  description = "What the fleet's pools can open at worst, and what PostgreSQL allows."
  value = {
    fleet_max       = module.fleet.db_connections_max
    max_connections = module.fleet.db_connections_max + 50
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
