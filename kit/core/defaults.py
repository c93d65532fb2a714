"""Timing defaults shared by the kit's settings and the capacity model's scenarios, so
the model simulates the fleet as it ships. Change one here and both follow."""

from __future__ import annotations

SCAN_AHEAD_MS = 5_000  # how far ahead a scheduler node reads due triggers
PARTITION_LEASE_TTL_MS = 10_000  # a dead node's partitions move after at most this
PARTITION_LEASE_RENEW_MS = 4_000  # renew well within the TTL (survives one missed beat)
NODE_HEARTBEAT_MS = 2_000  # scheduler membership beat
RUN_LEASE_TTL_MS = 30_000  # a dead worker's run is recovered after at most this
RUN_HEARTBEAT_MS = 10_000  # workers extend run leases this often
REAPER_PERIOD_MS = 5_000  # how often the reaper looks for expired and unpublished runs
UNDISPATCHED_GRACE_MS = 10_000  # age after which a committed, unpublished run is re-published
