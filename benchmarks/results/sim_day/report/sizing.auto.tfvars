# cronfleet sim size day --target-p99-start 2s (seed 1; windows: Sun 00:00:00 UTC; Sun 04:59:50 UTC; Sun 07:59:50 UTC)
scheduler_nodes           = 27
scheduler_nodes_headroom  = 1
workers                   = 431
workers_headroom          = 44
worker_concurrency        = 256
partitions                = 432
db_max_connections        = 40
kafka_partitions_per_tier = 1024
