"""The drill's witness inside its own database: triggers that record, as they commit,
the writes a stale node or worker could make, with what the writer could see then.

- `fire`: a scheduler node deleted or moved a trigger (fired it, advanced it in place,
  parked it for a paused job); recorded with the partition's lease row as the writing
  statement sees it. A node that commits while it
  is not the lease's unexpired owner has had a stale write accepted.
- `claim`, `finish`, `holder_write`, `reap`: changes to a run that is (or becomes)
  `running`, with the run's holder before the change. A worker writing a run another
  worker holds, or a reaper taking a lease that had not expired, is a stale write.

Writers are named by their connection's `application_name` (`scheduler:sched-a`,
`worker:w1`, `reaper:reaper`, set by chaos.fleet). The triggers record only; what counts
as stale is decided by the pure auditor (chaos.audit). They live in the drill's
database alone, never in the kit's schema or migrations.
"""

from __future__ import annotations

import time
from datetime import datetime

from sqlalchemy import Engine, text

from chaos.records import Write, interned
from kit.core.timeutil import to_epoch_ms

INSTALL = """
CREATE TABLE IF NOT EXISTS chaos_writes (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    tx_now timestamptz NOT NULL DEFAULT now(),
    writer text NOT NULL DEFAULT current_setting('application_name'),
    kind text NOT NULL,
    partition_id int,
    lease_owner text,
    lease_epoch bigint,
    lease_expires_at timestamptz,
    run_id uuid,
    old_status text,
    new_status text,
    old_worker text,
    new_worker text,
    old_attempt int,
    new_attempt int,
    old_lease_expires_at timestamptz
);

CREATE OR REPLACE FUNCTION chaos_trigger_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    l record;
BEGIN
    IF current_setting('application_name') NOT LIKE 'scheduler:%' THEN
        RETURN NULL;
    END IF;
    SELECT owner, epoch, expires_at INTO l FROM partition_leases
    WHERE partition_id = OLD.partition_id;
    INSERT INTO chaos_writes (kind, partition_id, lease_owner, lease_epoch, lease_expires_at)
    VALUES ('fire', OLD.partition_id, l.owner, l.epoch, l.expires_at);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS chaos_trigger_deleted ON triggers;
CREATE TRIGGER chaos_trigger_deleted AFTER DELETE OR UPDATE ON triggers
FOR EACH ROW EXECUTE FUNCTION chaos_trigger_deleted();

CREATE OR REPLACE FUNCTION chaos_run_written() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    app text := current_setting('application_name');
    what text;
BEGIN
    IF app LIKE 'worker:%' THEN
        IF OLD.status <> 'running' AND NEW.status = 'running' THEN
            what := 'claim';
        ELSIF OLD.status = 'running' AND NEW.status <> 'running' THEN
            what := 'finish';
        ELSIF OLD.status = 'running' AND OLD.worker_id IS DISTINCT FROM substr(app, 8) THEN
            what := 'holder_write';
        ELSIF OLD.status <> 'running' AND NEW.status IS DISTINCT FROM OLD.status THEN
            what := 'finish';  -- a worker finishing a run that is not running any more
        ELSE
            RETURN NULL;
        END IF;
    ELSIF app LIKE 'reaper:%' AND OLD.status = 'running' THEN
        what := 'reap';
    ELSE
        RETURN NULL;
    END IF;
    INSERT INTO chaos_writes (kind, run_id, old_status, new_status, old_worker, new_worker,
                              old_attempt, new_attempt, old_lease_expires_at)
    VALUES (what, NEW.run_id, OLD.status, NEW.status, OLD.worker_id, NEW.worker_id,
            OLD.attempt, NEW.attempt, OLD.lease_expires_at);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS chaos_run_written ON runs;
CREATE TRIGGER chaos_run_written AFTER UPDATE ON runs
FOR EACH ROW EXECUTE FUNCTION chaos_run_written();
"""


def install(engine: Engine) -> None:
    """Create the witness (idempotent). Sent without parameters: its `%` are SQL's."""
    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur:
            cur.execute(INSTALL)
        raw.commit()
    finally:
        raw.close()


UNINSTALL = """
DROP TRIGGER IF EXISTS chaos_trigger_deleted ON triggers;
DROP TRIGGER IF EXISTS chaos_run_written ON runs;
DROP FUNCTION IF EXISTS chaos_trigger_deleted();
DROP FUNCTION IF EXISTS chaos_run_written();
DROP TABLE IF EXISTS chaos_writes;
"""


UNINSTALL_TRIES = 5


def uninstall(engine: Engine) -> None:
    """Remove the witness: a deployment's database keeps nothing of a drill but its jobs
    (paused) and their runs. The deployment's services still run: dropping the triggers
    takes each table's exclusive lock, which a busy fleet's transactions can hold past a
    lock timeout or meet in a deadlock, so it is tried again (bounded) before it fails."""
    for attempt in range(1, UNINSTALL_TRIES + 1):
        raw = engine.raw_connection()
        try:
            with raw.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '5s'")
                cur.execute(UNINSTALL)
            raw.commit()
            return
        except Exception:
            raw.rollback()
            if attempt == UNINSTALL_TRIES:
                raise
            time.sleep(1.0)
        finally:
            raw.close()


def _ms(value: datetime | None) -> int | None:
    return None if value is None else to_epoch_ms(value)


def writes_read(engine: Engine) -> list[Write]:
    """Every witnessed write, streamed and with its repeated strings shared (sys.intern):
    a soak's history holds millions, and a row mapping each, then a record with its own
    copies of the same few statuses and writers, is what made the auditor's memory grow
    by kilobytes a run."""
    out: list[Write] = []
    s = interned
    with engine.connect().execution_options(stream_results=True, yield_per=20_000) as conn:
        rows = conn.execute(text(f"SELECT {_WRITE_COLUMNS} FROM chaos_writes ORDER BY seq"))
        for r in rows:
            out.append(
                Write(
                    seq=r[0],
                    at_ms=to_epoch_ms(r[1]),
                    tx_now_ms=to_epoch_ms(r[2]),
                    writer=s(r[3]),
                    kind=s(r[4]),
                    partition_id=r[5],
                    lease_owner=s(r[6]),
                    lease_epoch=r[7],
                    lease_expires_ms=_ms(r[8]),
                    run_id=s(r[9]),
                    old_status=s(r[10]),
                    new_status=s(r[11]),
                    old_worker=s(r[12]),
                    new_worker=s(r[13]),
                    old_attempt=r[14],
                    new_attempt=r[15],
                    old_lease_expires_ms=_ms(r[16]),
                )
            )
    return out


_WRITE_COLUMNS = (
    "seq, at, tx_now, writer, kind, partition_id, lease_owner, lease_epoch, lease_expires_at, "
    "run_id::text, old_status, new_status, old_worker, new_worker, old_attempt, new_attempt, "
    "old_lease_expires_at"
)
