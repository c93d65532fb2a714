"""Chaos drills against a real local stack: kill, restart, cut off and skew the kit's own
processes, then audit what was lost, doubled or written stale, Jepsen style.

`cronfleet chaos list` names the drills; `cronfleet chaos run DRILL|all` runs them. Every
drill runs on a stack of its own (its own CRONFLEET_HOME, PostgreSQL and Kafka), so a
drill that crashes the database never touches anyone else's. Nothing here is imported by
the kit: `kit/cli.py` only names `chaos.cli` as the module of the `chaos` subcommand.
"""
