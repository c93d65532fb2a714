# The release the fleet installs: the wheel scripts/release.sh built, in a private,
# encrypted, versioned bucket, under a key named by its SHA-256 (a new wheel is a new key,
# so a new launch template, so a rolling replacement of every group). The machines fetch
# it with their instance role and install it only if its SHA-256 is the one here.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  tags   = merge(var.tags, { "cronfleet:release" = var.name })
  sha256 = filesha256(var.wheel_path)
  key    = "wheels/${local.sha256}/${basename(var.wheel_path)}"
}

data "aws_iam_policy_document" "key" {
  # checkov:skip=CKV_AWS_109:a key policy's resource is the key itself ("*" means this key)
  # checkov:skip=CKV_AWS_111:a key policy's resource is the key itself ("*" means this key)
  # checkov:skip=CKV_AWS_356:a key policy's resource is the key itself ("*" means this key)
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "release" {
  description         = "${var.name}: the release bucket"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.key.json
  tags                = local.tags
}

resource "aws_s3_bucket" "release" {
  # checkov:skip=CKV_AWS_18:a bucket of release artefacts written only by Terraform: CloudTrail records its writes; an access-log bucket is the organisation's to give
  # checkov:skip=CKV_AWS_144:the wheel is rebuilt from the repository by scripts/release.sh; a copy in another region adds nothing a re-apply does not
  # checkov:skip=CKV2_AWS_62:nothing listens for new releases: Terraform writes them and rolls the fleet itself
  bucket_prefix = "${var.name}-release-"
  force_destroy = false
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "release" {
  bucket                  = aws_s3_bucket.release.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "release" {
  bucket = aws_s3_bucket.release.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_versioning" "release" {
  bucket = aws_s3_bucket.release.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "release" {
  bucket = aws_s3_bucket.release.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.release.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "release" {
  bucket = aws_s3_bucket.release.id
  rule {
    id     = "old-releases"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.keep_old_releases_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid       = "TlsOnly"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.release.arn, "${aws_s3_bucket.release.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "release" {
  bucket = aws_s3_bucket.release.id
  policy = data.aws_iam_policy_document.bucket.json
}

resource "aws_s3_object" "wheel" {
  bucket      = aws_s3_bucket.release.id
  key         = local.key
  source      = var.wheel_path
  source_hash = local.sha256
  kms_key_id  = aws_kms_key.release.arn
  tags        = local.tags

  lifecycle {
    # the .sha256 file scripts/release.sh wrote beside the wheel: a wheel changed since
    # its release is not uploaded
    precondition {
      condition     = !fileexists("${var.wheel_path}.sha256") || split(" ", trimspace(file("${var.wheel_path}.sha256")))[0] == local.sha256
      error_message = "wheel_path: its SHA-256 differs from ${var.wheel_path}.sha256 (rebuild it with scripts/release.sh)."
    }
  }

  depends_on = [aws_s3_bucket_server_side_encryption_configuration.release, aws_s3_bucket_policy.release]
}
