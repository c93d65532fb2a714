"""Prometheus metrics of scheduler nodes, labelled by node so several nodes can share
one process (tests run N nodes as threads)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

DISPATCH_LAG = Histogram(
    "cronfleet_dispatch_lag_seconds",
    "Broker acknowledgement of a run's message minus the time it is due (seconds; negative:"
    " published ahead of its second, as the scan-ahead intends).",
    ["node"],
    buckets=(-10, -5, -2, -1, -0.5, -0.1, 0, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
PARTITIONS_OWNED = Gauge("cronfleet_partitions_owned", "Partitions this node holds.", ["node"])
RUNS_FIRED = Counter("cronfleet_runs_fired_total", "Runs inserted to be dispatched.", ["node"])
RUNS_SKIPPED = Counter(
    "cronfleet_runs_skipped_total",
    "Runs recorded as skipped or queued, by reason.",
    ["node", "reason"],
)
RUNS_PUBLISHED = Counter("cronfleet_runs_published_total", "Run messages confirmed.", ["node"])
PUBLISH_FAILED = Counter(
    "cronfleet_publish_failed_total",
    "Run messages the broker did not confirm (kept to send again; past the node's limit,"
    " left to the reaper).",
    ["node"],
)
RUNS_UNSENT = Gauge(
    "cronfleet_runs_unsent",
    "Committed runs the broker did not confirm, kept by the node to send again.",
    ["node"],
)
RUNS_RESENT = Counter(
    "cronfleet_runs_resent_total",
    "Runs kept from a failed publish and sent again by their node.",
    ["node"],
)
FENCED_REFUSED = Counter(
    "cronfleet_fenced_commits_refused_total",
    "Partitions a scan could not lock at the epoch it believed (lease lost).",
    ["node"],
)
SCAN_SECONDS = Histogram(
    "cronfleet_scan_duration_seconds",
    "One fenced scan transaction.",
    ["node"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
)
TRIGGERS_DROPPED = Counter(
    "cronfleet_triggers_dropped_total",
    "Triggers deleted unfired (old version, job gone).",
    ["node"],
)
