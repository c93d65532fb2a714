"""Planted bug (worker): the heartbeat rule before stalls were thought of: one look a beat,
renewing a lease that would end within 2.5 beats and the fence margin. A running lease
falls to ttl - beat before it is renewed and the fence takes it the margin before that,
so a database stall shorter than a lease less a beat gives healthy runs back and runs
them again: the postgres-stall drill must report runs started twice in such a stall."""

from __future__ import annotations

from kit.core import leases
from kit.worker import worker as worker_module


def plant() -> None:
    def one_look_a_beat(ttl_ms: int, beat_ms: int, fence_margin_ms: int) -> leases.BeatRule:
        return leases.BeatRule(beat_ms, beat_ms * 5 // 2 + fence_margin_ms, 0)

    worker_module.beat_rule = one_look_a_beat  # type: ignore[assignment]


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
