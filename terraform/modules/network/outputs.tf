output "vpc_id" {
  description = "The VPC every module runs in."
  value       = aws_vpc.this.id
}

output "vpc_cidr_block" {
  description = "Address range of the VPC."
  value       = aws_vpc.this.cidr_block
}

output "private_subnet_ids" {
  description = "Private subnets, one per zone (at least two: AWS needs two for a database subnet group and a load balancer)."
  value       = aws_subnet.private[*].id
}

output "service_subnet_ids" {
  description = "The private subnets of the zones the machines, database and brokers live in (`zones` of them)."
  value       = slice(aws_subnet.private[*].id, 0, var.zones)
}

output "public_subnet_ids" {
  description = "Public subnets (NAT gateways; an internet-facing API load balancer)."
  value       = aws_subnet.public[*].id
}
