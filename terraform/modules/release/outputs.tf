output "bucket" {
  description = "The release bucket (the fleet's release_bucket)."
  value       = aws_s3_bucket.release.id
}

output "key" {
  description = "Key of the wheel, wheels/<sha256>/<file name> (the fleet's release_key)."
  value       = aws_s3_object.wheel.key
}

output "sha256" {
  description = "SHA-256 of the wheel uploaded (the fleet's release_sha256: what machines check before installing)."
  value       = local.sha256
}

output "kms_key_arn" {
  description = "KMS key of the bucket (the fleet's release_kms_key_arn)."
  value       = aws_kms_key.release.arn
}
