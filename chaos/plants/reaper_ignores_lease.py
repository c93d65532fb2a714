"""Planted bug (reaper): expired-lease reaping reads the clock a run lease TTL ahead, so
it takes running runs from live workers before their lease expires: the drill must
report stale writes accepted (and count the duplicate executions it causes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kit.reaper import reaper as reaper_module
from kit.settings import load_settings


def plant() -> None:
    original = reaper_module.runs_reap_expired
    ahead = timedelta(milliseconds=load_settings().run_lease_ttl_ms)

    def reap_early(engine, publish, limit=1000, now=None, **kw):  # type: ignore[no-untyped-def]
        return original(engine, publish, limit, now=datetime.now(UTC) + ahead, **kw)

    reaper_module.runs_reap_expired = reap_early


if __name__ == "__main__":
    plant()
    from kit.cli import main

    raise SystemExit(main())
