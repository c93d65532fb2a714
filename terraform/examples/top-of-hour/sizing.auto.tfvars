# cronfleet sim size --mix terraform/examples/top-of-hour/schedules.toml sha256 27b4fd0fb298, 10,000,000 schedules --target-p99-start 2s --min-nodes 16 (seed 1; windows: Sun 00:00:00 UTC; Sun 04:59:50 UTC; Sun 07:59:50 UTC; Sun 08:59:50 UTC (top of hour))
scheduler_nodes           = 18
scheduler_nodes_headroom  = 1
workers                   = 437
workers_headroom          = 44
worker_concurrency        = 256
partitions                = 288
db_max_connections        = 40
kafka_partitions_per_tier = 1024
