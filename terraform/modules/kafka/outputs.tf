output "bootstrap_brokers" {
  description = "Bootstrap servers the kit connects to (plaintext 9092 with TLS_PLAINTEXT, TLS 9094 with TLS)."
  value       = var.client_broker_encryption == "TLS" ? aws_msk_cluster.this.bootstrap_brokers_tls : aws_msk_cluster.this.bootstrap_brokers
}

output "bootstrap_brokers_tls" {
  description = "TLS bootstrap servers (port 9094)."
  value       = aws_msk_cluster.this.bootstrap_brokers_tls
}

output "cluster_name" {
  description = "MSK cluster name (dimension of its CloudWatch metrics, consumer lag included)."
  value       = aws_msk_cluster.this.cluster_name
}

output "cluster_arn" {
  description = "MSK cluster ARN."
  value       = aws_msk_cluster.this.arn
}

output "security_group_id" {
  description = "Security group of the brokers."
  value       = aws_security_group.kafka.id
}

output "topics" {
  description = "The run topics the kit creates on first start, with their partitions, replication factor and min.insync.replicas."
  value       = local.topics
}

output "replication_factor" {
  description = "Replication factor of the run topics (the fleet's kafka_replication_factor)."
  value       = var.replication_factor
}

output "min_insync_replicas" {
  description = "min.insync.replicas of the run topics (the fleet's kafka_min_insync_replicas)."
  value       = var.min_insync_replicas
}
