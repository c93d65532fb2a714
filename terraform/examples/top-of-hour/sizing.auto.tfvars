# cronfleet sim size top-of-hour --target-p99-start 2s (seed 1)
scheduler_nodes           = 2
scheduler_nodes_headroom  = 1
workers                   = 140
workers_headroom          = 14
worker_concurrency        = 256
partitions                = 64
db_max_connections        = 40
kafka_partitions_per_tier = 1024
