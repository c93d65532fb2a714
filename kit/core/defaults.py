"""Timing defaults shared by the kit's settings and the capacity model's scenarios, so
the model simulates the fleet as it ships. Change one here and both follow."""

from __future__ import annotations

# How far ahead a scheduler node reads due triggers. A run is committed, published and
# claimed this far ahead of its second and started then: 10 s is room for a 50,000-run
# top-of-hour burst on 2 cores (5 s left half of it still being scanned at the second).
SCAN_AHEAD_MS = 10_000
PARTITION_LEASE_TTL_MS = 10_000  # a dead node's partitions move after at most this
PARTITION_LEASE_RENEW_MS = 4_000  # renew well within the TTL (survives one missed beat)
NODE_HEARTBEAT_MS = 2_000  # scheduler membership beat
RUN_LEASE_TTL_MS = 30_000  # a dead worker's run is recovered after at most this
RUN_HEARTBEAT_MS = 10_000  # workers extend run leases this often
# A job's runs are leased 1.5 x their measured p99 (kit.core.durations) within these
RUN_LEASE_MIN_MS = 10_000
RUN_LEASE_MAX_MS = 3_600_000
KILL_GRACE_MS = 2_000  # a stopped command's process group: SIGTERM, then SIGKILL this later
REAPER_PERIOD_MS = 5_000  # how often the reaper looks for expired and unpublished runs
# The reaper counts a run nobody claimed as lost only if it went out (commit, re-arm, or
# its own publish) this long before the instant the workers provably read past: room for
# a node's publish after its commit. Above the scan-ahead (checked at start).
UNCLAIMED_GRACE_MS = 15_000
SCAN_PERIOD_MS = 1_000  # a scheduler node scans its partitions once a second
# Most due triggers one scan transaction takes. A scan of 20,000 fires takes ~5-8 s of
# the node and the database on 2 cores; a 50,000-row one (~19 s) outlasts the partition
# lease, so the node loses its partitions mid-scan and the fires come late.
SCAN_BATCH_ROWS = 20_000


def misfire_grace_ms(
    partition_lease_ttl_ms: int = PARTITION_LEASE_TTL_MS,
    node_heartbeat_ms: int = NODE_HEARTBEAT_MS,
    scan_period_ms: int = SCAN_PERIOD_MS,
) -> int:
    """How late a fire may be and still count as on time: the longest the kit itself can
    make it late by losing a scheduler node (its lease runs out, the next lease pass of
    another node takes the partition, its next scan fires), plus a second. Only a fire
    later than that was missed (an outage, not a failover) and goes through the job's
    misfire policy, so losing one node never skips a fire."""
    return partition_lease_ttl_ms + node_heartbeat_ms + scan_period_ms + 1_000


MISFIRE_GRACE_MS = misfire_grace_ms()  # 14 s with the defaults above
