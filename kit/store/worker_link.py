"""A worker's own line to PostgreSQL, outside the run path: it hears cancellations the
moment they commit, and keeps the worker's presence row for the fleet view.

Cancel: the API's cancel transaction sends `NOTIFY cronfleet_run_cancel, '<run id>'`
(kit.store.run_cancel); every worker LISTENs on one dedicated connection and hands the
run ids to a callback, which stops the tasks it is running. A notification is
delivered at commit and the wait returns at once, so the task is told within
milliseconds (measured: benchmarks/cancel_latency.py). Notifications sent while the
connection is down are lost; the heartbeat's lease check is the fallback (the cancel
cleared the run's lease token).

Presence: every PRESENCE_S the worker upserts its row in `workers` (id, concurrency,
runs in flight, and its per-tenant figures, kit.core.tenant_figures, in `tenants`); the
fleet view counts a worker live while its row is fresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import Engine

from kit.store.run_cancel import CANCEL_CHANNEL

log = logging.getLogger(__name__)

LIVE_S = 15.0  # a worker whose presence row is younger counts as live (the fleet view's TTL)
POLL_S = 0.5  # how long one wait for notifications lasts (bounds how fast stop is seen)
PRESENCE_S = 5.0
RECONNECT_S = 1.0

_NOW = "coalesce(CAST(%(now)s AS timestamptz), now())"  # kit.store.db.NOW_SQL, psycopg's style
_PRESENCE = f"""
INSERT INTO workers (worker_id, heartbeat_at, started_at, concurrency, in_flight, tenants)
VALUES (%(id)s, {_NOW}, {_NOW}, %(concurrency)s, %(in_flight)s, %(tenants)s)
ON CONFLICT (worker_id) DO UPDATE
SET heartbeat_at = EXCLUDED.heartbeat_at, concurrency = EXCLUDED.concurrency,
    in_flight = EXCLUDED.in_flight, tenants = EXCLUDED.tenants
"""


def presence_upsert(
    conn: psycopg.Connection,
    worker_id: str,
    concurrency: int,
    in_flight: int,
    *,
    tenants: dict[str, dict[str, Any]] | None = None,
    now: datetime | None = None,
) -> None:
    """The worker's presence row, fresh as of `now` (the database's clock by default):
    the fleet view counts it live while it is younger than the worker TTL. `tenants`:
    its per-tenant figures (None: it reports none)."""
    conn.execute(
        _PRESENCE,
        {
            "id": worker_id,
            "concurrency": concurrency,
            "in_flight": in_flight,
            "tenants": None if tenants is None else Jsonb(tenants),
            "now": now,
        },
    )


def live_workers_count(conn: psycopg.Connection) -> int:
    """Workers whose presence row is younger than LIVE_S, at least 1 (the caller)."""
    row = conn.execute(
        "SELECT count(*) FROM workers WHERE heartbeat_at > now() - make_interval(secs => %s)",
        (LIVE_S,),
    ).fetchone()
    return max(1, int(row[0]) if row else 1)


def psycopg_url(engine: Engine) -> str:
    """The engine's database as a libpq URL (SQLAlchemy's carries its driver name)."""
    url = engine.url.set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class WorkerLink:
    def __init__(
        self,
        engine: Engine,
        worker_id: str,
        concurrency: int,
        in_flight: Callable[[], int],
        on_cancel: Callable[[Iterable[str]], object],
        *,
        presence_s: float = PRESENCE_S,
        tenants: Callable[[], dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        self.url = psycopg_url(engine)
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.in_flight = in_flight
        self.on_cancel = on_cancel
        self.presence_s = presence_s
        self.tenants = tenants
        # live workers in the fleet as of the last presence beat (at least this one): a
        # tenant's fleet-wide limits are divided among them (kit.core.fair_share.worker_part)
        self.live_workers = 1
        self.listening = threading.Event()  # set while LISTEN is in force (tests wait on it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
        self._leave()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._session()
            except Exception:  # the connection dropped: reconnect; the heartbeat covers the gap
                log.exception("worker link lost; reconnecting")
            finally:
                self.listening.clear()
            self._stop.wait(RECONNECT_S)

    def _session(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"LISTEN {CANCEL_CHANNEL}")
            self.listening.set()
            next_presence = 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_presence:
                    presence_upsert(
                        conn,
                        self.worker_id,
                        self.concurrency,
                        self.in_flight(),
                        tenants=self._tenant_figures(),
                    )
                    self.live_workers = live_workers_count(conn)
                    next_presence = time.monotonic() + self.presence_s
                # Returns at the first notification (or after POLL_S without one).
                for notice in conn.notifies(timeout=POLL_S, stop_after=1):
                    self.on_cancel([notice.payload])

    def _tenant_figures(self) -> dict[str, dict[str, Any]] | None:
        """The per-tenant figures, or None if reading them failed (presence comes first)."""
        if self.tenants is None:
            return None
        try:
            return self.tenants()
        except Exception:
            log.exception("reading the per-tenant figures failed; presence without them")
            return None

    def _leave(self) -> None:
        """A stopping worker removes its presence row (a killed one's goes stale)."""
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute("DELETE FROM workers WHERE worker_id = %s", (self.worker_id,))
        except Exception:
            log.warning("could not remove worker %s from the fleet view", self.worker_id)
