"""Static group membership (kit.transport.consumer, `instance_id` = the worker's
--worker-id): a worker that dies and comes back within its session takes its partitions
back without a rebalance, so the other workers never stop. The chaos drill `worker-kill`
(100 cycles, a worker killed and restarted every few seconds) found runs starting up to
ten minutes late with dynamic members: every restart stopped the whole group for the
dead member's session.

The real broker, consumers in this process; waits have deadlines, nothing is timed. A
closed static member does not leave the group, as a killed one does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from kit.settings import Settings, load_settings
from kit.transport import TieredConsumer, ensure_topics
from kit.transport.consumer import ConsumerFenced

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a deadline for "eventually", never a speed claim
TIERS = ("normal",)
SESSION_MS = 10_000


@pytest.fixture
def topics() -> Iterator[tuple[str, str]]:
    bootstrap = load_settings().kafka_bootstrap
    prefix = f"cf.it.{uuid.uuid4().hex[:10]}"
    ensure_topics(bootstrap, 4, prefix=prefix, tiers=TIERS)
    yield bootstrap, prefix
    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
    for future in admin.delete_topics(doomed, operation_timeout=30).values():
        future.result()


def _consumer(topics: tuple[str, str], group: str, instance: str | None) -> TieredConsumer:
    bootstrap, prefix = topics
    return TieredConsumer(
        bootstrap,
        group,
        TIERS,
        topic_prefix=prefix,
        session_timeout_ms=SESSION_MS,
        instance_id=instance,
    )


def _parts(c: TieredConsumer) -> set[int]:
    return c.assignment()["normal"]


def _poll_until(what: str, members: list[TieredConsumer], done) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"waited {WAIT_S:g} s for {what}"
        for c in members:
            c.poll_batch(10, 0.1)


def _restart_one(topics: tuple[str, str], static: bool) -> tuple[int, set[int], set[int]]:
    """a and b share the topic's 4 partitions; a goes away without leaving (closed
    static, or closed dynamic: that one does leave) and a new a joins. Returns b's
    rebalance callbacks meanwhile, a's partitions before and the new a's after."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = _consumer(topics, group, "a" if static else None)
    b = _consumer(topics, group, "b" if static else None)
    again = None
    try:
        _poll_until(
            "a and b to share the partitions",
            [a, b],
            lambda: _parts(a) and _parts(b) and len(_parts(a) | _parts(b)) == 4,
        )
        before, settled = set(_parts(a)), b.rebalances
        a.close()
        again = _consumer(topics, group, "a" if static else None)
        _poll_until("the new a to be assigned", [again, b], lambda: bool(_parts(again)))
        _poll_until("a few more polls", [again, b], lambda: b.poll_batch(10, 0.5) == [])
        return b.rebalances - settled, before, set(_parts(again))
    finally:
        for c in (b, again):
            if c is not None:
                c.close()


def test_a_static_member_back_within_its_session_takes_its_partitions_without_a_rebalance(
    topics: tuple[str, str],
) -> None:
    moved, before, after = _restart_one(topics, static=True)
    assert moved == 0, f"b saw {moved} rebalance callbacks"
    assert after == before


def test_a_dynamic_member_back_makes_the_others_rebalance(topics: tuple[str, str]) -> None:
    """The same restart without static ids: the group rebalances (b's partitions are
    revoked and assigned again), which is what static membership spares."""
    moved, _, _ = _restart_one(topics, static=False)
    assert moved > 0


def test_two_live_members_with_one_id_fence_the_older_one_loudly(
    topics: tuple[str, str],
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    old = _consumer(topics, group, "same")
    new = None
    try:
        _poll_until("the first member to be assigned", [old], lambda: bool(_parts(old)))
        new = _consumer(topics, group, "same")
        with pytest.raises(ConsumerFenced, match="worker-id"):
            _poll_until("the older member to be fenced", [new, old], lambda: False)
    finally:
        for c in (old, new):
            if c is not None:
                c.close()


def test_a_worker_whose_id_another_worker_takes_exits_saying_why(
    settings: Settings, db_url: str, prefix: str
) -> None:
    """Two `cronfleet worker --worker-id same` processes: the first one's consumers are
    fenced when the second joins; it stops with exit code 1 and names the cause. It never
    closes the fenced consumer: that close can hang for good (confluentinc/librdkafka#4884,
    caught by the chaos drill broker-stall), so the first worker runs with a close that
    hangs planted and must exit before the close bound's watchdog would fire."""
    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_TASK_POLICY_FILE": settings.task_policy_file,
        "CRONFLEET_TENANT_POLICY_FILE": settings.tenant_policy_file,
    }
    group = f"g-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "kit.cli", "worker", "--worker-id", "same"]
    argv += ["--topic-prefix", prefix, "--group-id", group, "--drain-s", "1"]
    hanging = [sys.executable, "-c", HANG_CLOSE, *argv[argv.index("worker") + 1 :]]
    first = subprocess.Popen(hanging, env=env, stderr=subprocess.PIPE, text=True)
    second = None
    try:
        time.sleep(5)  # not a measurement: lets the first join before the second
        second = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        try:
            _, err = first.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the first worker still runs {WAIT_S:g} s after its id was taken")
        assert first.returncode == 1, err
        assert "stops:" in err and "worker-id" in err, err
        assert "Traceback" not in err, err
        assert "Timeout (0:00:" not in err, err  # the fenced consumer was never closed
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)


HANG_CLOSE = (
    "import sys, time\n"
    "import kit.transport.consumer as c\n"
    "c.TieredConsumer.close = lambda self: time.sleep(3600)  # librdkafka#4884: assign() in close\n"
    "from kit.cli import main\n"
    "raise SystemExit(main(['worker', *sys.argv[1:]]))\n"
)


def test_a_worker_whose_close_hangs_still_exits_with_its_stacks(
    settings: Settings, db_url: str, prefix: str
) -> None:
    """In the chaos drill `broker-stall` (100 cycles) a worker fenced in a stall logged its
    stop and never exited: alive and still a static member, it kept its partitions from
    the other workers for 15 minutes. Closing is now bounded: with close() hanging, the
    worker told to stop exits 1 after CLOSE_BOUND_S with every thread's stack."""
    from kit.worker.cli import CLOSE_BOUND_S

    env = {
        **os.environ,
        "CRONFLEET_DATABASE_URL": db_url,
        "CRONFLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "CRONFLEET_TASK_POLICY_FILE": settings.task_policy_file,
        "CRONFLEET_TENANT_POLICY_FILE": settings.tenant_policy_file,
    }
    argv = [sys.executable, "-c", HANG_CLOSE, "--worker-id", "hangs"]
    argv += ["--topic-prefix", prefix, "--group-id", f"g-{uuid.uuid4().hex[:8]}"]
    argv += ["--drain-s", "1"]
    worker = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(5)  # not a measurement: lets it start
        assert worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        try:
            _, err = worker.communicate(timeout=CLOSE_BOUND_S + WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker still runs {CLOSE_BOUND_S + WAIT_S:g} s after SIGTERM")
        assert worker.returncode == 1, err
        assert "Timeout (0:00:" in err, err  # faulthandler's watchdog, then the stacks
        assert "in <lambda>" in err, err  # where it hung: the planted close
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
