# cronfleet sim size top-of-hour --target-p99-start 2s (seed 1; windows: the peak (60 s into the scenario))
scheduler_nodes           = 11
scheduler_nodes_headroom  = 1
workers                   = 134
workers_headroom          = 14
worker_concurrency        = 256
partitions                = 1024
db_max_connections        = 40
kafka_partitions_per_tier = 1024
