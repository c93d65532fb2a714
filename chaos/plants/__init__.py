"""Planted bugs, to prove the drills can fail: each module patches one safety check out
of the kit and then runs `kit.cli.main`, so a drill can start a role's services with it
(`cronfleet chaos run DRILL --plant ROLE=chaos.plants.NAME`) and must report what the
bug does as lost, duplicated or stale. Never used by the kit itself.

- `ack_before_effect` (worker): the run is written succeeded before its task runs;
  a worker killed mid-task leaves a success with no effect (lost).
- `no_epoch_check` (scheduler): a node scans every partition it ever held, without
  locking its lease row at the epoch it believes (a stale node's fire: a stale write).
- `reaper_ignores_lease` (reaper): the reaper takes running runs a lease TTL before
  their lease expires (a stale write; duplicate executions).
"""

PLANTS = {
    "ack_before_effect": "worker",
    "no_epoch_check": "scheduler",
    "reaper_ignores_lease": "reaper",
}
