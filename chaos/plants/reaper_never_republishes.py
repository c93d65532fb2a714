"""Planted bug (reaper): it never judges a run's message lost (no tier is ever read past),
so a run whose publish failed (the broker frozen past the publish timeout) stays pending
for ever: the broker-stall drill must report it lost."""

from __future__ import annotations

from kit.reaper import reaper as reaper_module


def plant() -> None:
    original = reaper_module.runs_publish_unclaimed

    def never_lost(engine, grace_ms, publish, limit=1000, now=None, lost_before=None):  # type: ignore[no-untyped-def]
        return original(engine, grace_ms, publish, limit, now=now, lost_before={})

    reaper_module.runs_publish_unclaimed = never_lost


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
