# cronfleet sim size top-of-hour --target-p99-start 2s (seed 1; windows: the peak (60 s into the scenario))
scheduler_nodes           = 7
scheduler_nodes_headroom  = 1
workers                   = 150
workers_headroom          = 15
worker_concurrency        = 256
partitions                = 112
db_max_connections        = 40
kafka_partitions_per_tier = 1024
