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
- `one_look_a_beat` (worker): the heartbeat rule of one look a beat and a 2.5-beat
  horizon: a stall shorter than a lease less a beat runs runs twice (postgres-stall).
- `reaper_never_republishes` (reaper): no run's message is ever judged lost: a publish
  that failed while the broker was frozen leaves its run pending for ever (broker-stall).
- `keeper_ignores_deadlines` (worker): a frozen worker's task runs on past its lease
  into another worker's (worker-freeze: overlapping executions).
- `no_fence` (worker): a worker cut off from the database does not stop its tasks
  (worker-cut: overlapping executions).
- `api_unclear_refusals` (api): a full disk is answered "the database is unavailable"
  (disk-full: writes refused without saying why).
"""

PLANTS = {
    "ack_before_effect": "worker",
    "no_epoch_check": "scheduler",
    "reaper_ignores_lease": "reaper",
    "one_look_a_beat": "worker",
    "reaper_never_republishes": "reaper",
    "keeper_ignores_deadlines": "worker",
    "no_fence": "worker",
    "api_unclear_refusals": "api",
}
