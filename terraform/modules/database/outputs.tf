output "address" {
  description = "Host name of the database endpoint (the fleet's db_host)."
  value       = aws_db_instance.this.address
}

output "port" {
  description = "Port of the database endpoint."
  value       = aws_db_instance.this.port
}

output "db_name" {
  description = "Name of the kit's database."
  value       = aws_db_instance.this.db_name
}

output "master_user_secret_arn" {
  description = "Secrets Manager secret of the owner (RDS's master user: migrations, maintenance), kept and rotated by RDS; its ARN, never its value."
  value       = aws_db_instance.this.master_user_secret[0].secret_arn
}

output "kms_key_arn" {
  description = "KMS key of the storage and of the secret (the fleet needs kms:Decrypt on it to read the secret)."
  value       = aws_kms_key.db.arn
}

output "security_group_id" {
  description = "Security group of the database."
  value       = aws_security_group.db.id
}

output "instance_identifier" {
  description = "RDS instance identifier, for CloudWatch metrics and alarms."
  value       = aws_db_instance.this.identifier
}

output "app_user_secret_arn" {
  description = "Secrets Manager secret of the services' role (its password is set by the fleet's first api machine); its ARN, never its value."
  value       = aws_secretsmanager_secret.app.arn
}

output "app_username" {
  description = "The role the services connect as."
  value       = var.app_username
}
