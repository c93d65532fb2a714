"""Scheduler nodes against the real PostgreSQL and Kafka of the stack: runs fire at
their second and are published once, partitions are shared and fenced, and the job's
policies (pause, edit, overlap, misfire, priority) decide what a scan writes."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from sqlalchemy import Engine, text

from kit.core.defaults import MISFIRE_GRACE_MS
from kit.core.dispatch import PRIORITY_TIERS
from kit.core.ids import run_id
from kit.core.partitions import partition_of
from kit.core.policies import MisfirePolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import parse_schedule
from kit.core.timeutil import to_epoch_ms
from kit.scheduler.node import NodeConfig, SchedulerNode
from kit.settings import Settings
from kit.store.jobs import JobCreate, JobSpec, JobUpdate, job_create, job_update
from kit.store.jobs_list import jobs_list
from kit.transport import RunMessage, RunPublisher, ensure_topics, topic_for
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.integration

FAR_MS = 2**62  # "dispatch everything held now"


# -- fixtures -------------------------------------------------------------------------


@pytest.fixture
def prefix(settings: Settings) -> str:
    p = f"cf_test_sched.{uuid.uuid4().hex[:10]}"
    ensure_topics(settings.kafka_bootstrap, 1, prefix=p)
    return p


@pytest.fixture
def publisher(settings: Settings, prefix: str) -> Iterator[RunPublisher]:
    pub = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix, linger_ms=1)
    yield pub
    pub.close()


@pytest.fixture
def make_node(engine: Engine, publisher: RunPublisher) -> Iterator:
    nodes: list[SchedulerNode] = []

    def make(node_id: str = "n1", **cfg: int) -> SchedulerNode:
        node = SchedulerNode(engine, publisher, node_id, NodeConfig(**cfg))
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.kill()


def _high_watermark(consumer: Consumer, tp: TopicPartition) -> int:
    """A topic just created may not have elected its leader yet: ask again, briefly."""
    refused: list[KafkaException] = []

    def ask() -> tuple[int] | None:
        try:
            return (consumer.get_watermark_offsets(tp, timeout=10)[1],)
        except KafkaException as exc:
            refused[:] = [exc]
            return None

    (high,) = wait_until(
        f"the watermarks of {tp.topic}[{tp.partition}]", ask, 10, lambda: str(refused), 0.2
    )
    return high


def messages(settings: Settings, prefix: str) -> list[RunMessage]:
    """Every message on the test's tier topics (every partition), from the beginning; a
    topic not created yet holds none."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"cf-test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    out: list[RunMessage] = []
    try:
        topics = consumer.list_topics(timeout=10).topics
        for tier in PRIORITY_TIERS:
            topic = topic_for(tier, prefix)
            if topic not in topics:
                continue
            for p in sorted(topics[topic].partitions):
                tp = TopicPartition(topic, p, 0)
                high = _high_watermark(consumer, tp)
                if high == 0:
                    continue
                consumer.assign([tp])
                got = 0
                while got < high:
                    msg = consumer.poll(5)
                    assert msg is not None, f"{topic}[{p}]: expected {high} messages, read {got}"
                    if msg.error():
                        continue
                    out.append(RunMessage.from_bytes(msg.value()))
                    got += 1
    finally:
        consumer.close()
    return out


def spec(name: str, schedule: dict, now: datetime, **extra: object) -> JobSpec:
    misfire = extra.pop("misfire", MisfirePolicy())
    return JobSpec(
        name=name,
        schedule=parse_schedule(schedule, now=now),
        task={"type": "noop"},
        retry=RetryPolicy().to_dict(),
        misfire=misfire.to_dict(),  # type: ignore[attr-defined]
        **extra,  # type: ignore[arg-type]
    )


def create(engine: Engine, name: str, schedule: dict, now: datetime, **extra: object) -> str:
    made = job_create(engine, JobCreate("acme", spec(name, schedule, now, **extra), now=now))
    return made.job.job_id


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def rows(engine: Engine, sql: str, **params: object) -> list:
    with engine.connect() as conn:
        return list(conn.execute(text(sql), params))


def runs_of(engine: Engine, job_id: str) -> list:
    return rows(
        engine,
        "SELECT * FROM runs WHERE job_id = :j ORDER BY scheduled_at",
        j=job_id,
    )


def owned_node(make_node, **cfg: int) -> SchedulerNode:
    node = make_node(**cfg)
    node.lease_pass()
    assert len(node.leases.epochs) == cfg.get("partitions", 1024)
    return node


def move_trigger(engine: Engine, job_id: str, to: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE triggers SET fire_at = :at WHERE job_id = :j"), {"at": to, "j": job_id}
        )


# -- firing -----------------------------------------------------------------------------


def test_cron_and_one_off_fire_at_their_second(engine, make_node, settings, prefix) -> None:
    start = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    cron = create(engine, "minutely", {"cron": "* * * * *"}, start)
    one_off = create(engine, "once", {"at": "2030-01-01T00:01:02Z"}, start)
    node = owned_node(make_node)

    ahead = timedelta(milliseconds=node.config.scan_ahead_ms)
    early = node.scan_once(now=datetime(2030, 1, 1, 0, 0, 55, tzinfo=UTC) - ahead)
    assert early.held == []
    scan = node.scan_once(now=datetime(2030, 1, 1, 0, 1, 3, tzinfo=UTC) - ahead)
    minute, at = datetime(2030, 1, 1, 0, 1, tzinfo=UTC), datetime(2030, 1, 1, 0, 1, 2, tzinfo=UTC)
    assert {(h.job_id, h.due_ms) for h in scan.held} == {
        (cron, to_epoch_ms(minute)),
        (one_off, to_epoch_ms(at)),
    }
    # published at once (a worker holds each until its second), nothing written after
    sent = node.publish_held()
    assert sorted(h.run_id for h in sent) == sorted([run_id(cron, minute), run_id(one_off, at)])
    assert node.publish_held() == []

    for job, when in ((cron, minute), (one_off, at)):
        (run,) = runs_of(engine, job)
        assert str(run.run_id) == run_id(job, when) and run.scheduled_at == when
        assert run.status == "pending" and run.dispatched_at is None
    triggers = rows(engine, "SELECT job_id::text, fire_at FROM triggers")
    assert [(t.job_id, t.fire_at) for t in triggers] == [(cron, minute + timedelta(minutes=1))]
    got = messages(settings, prefix)
    assert sorted((m.run_id, m.attempt, m.tier) for m in got) == sorted(
        [(run_id(cron, minute), 1, "normal"), (run_id(one_off, at), 1, "normal")]
    )


def test_a_running_node_publishes_each_run_once_ahead_of_its_second(
    engine, make_node, settings, prefix
) -> None:
    """Published as soon as committed, up to the scan-ahead early (the worker holds a run
    until its second: tests/integration/test_worker_safety.py); every second once."""
    now = db_now(engine)
    job = create(engine, "every-second", {"every_s": 1}, now)
    node = make_node(scan_ahead_ms=2000)
    node.start()
    try:
        wait_until("three runs published", lambda: len(messages(settings, prefix)) >= 3)
    finally:
        node.stop()
    runs = runs_of(engine, job)
    times = [r.scheduled_at for r in runs]
    assert times == [times[0] + timedelta(seconds=i) for i in range(len(times))]  # none missed
    sent = Counter(m.run_id for m in messages(settings, prefix))
    assert set(sent) == {str(r.run_id) for r in runs} and max(sent.values()) == 1
    assert all(r.status == "pending" and r.dispatched_at is None for r in runs)
    assert rows(engine, "SELECT owner FROM partition_leases WHERE owner IS NOT NULL") == []


def test_runs_the_broker_did_not_confirm_are_sent_again_when_it_answers(
    engine, make_node, settings, prefix
) -> None:
    """A broker that is away: the node keeps what it committed, sends it once the broker
    answers (not after the workers' group has read past it, the reaper's rule), and marks
    it published then, so that the reaper does not send it a third time."""
    start = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    jobs = [create(engine, f"away-{i}", {"at": "2030-01-01T00:01:02Z"}, start) for i in range(3)]
    node = owned_node(make_node)
    away = RunPublisher("127.0.0.1:9", topic_prefix=prefix, config={"message.timeout.ms": 500})
    node.publisher = away  # a broker nobody answers at
    ahead = timedelta(milliseconds=node.config.scan_ahead_ms)
    scan = node.scan_once(now=datetime(2030, 1, 1, 0, 1, 2, tzinfo=UTC) - ahead)
    assert len(scan.held) == 3
    assert node.publish_held() == [] and node.held() == 3  # kept, not left to the reaper
    assert all(r.dispatched_at is None for j in jobs for r in runs_of(engine, j))

    back = RunPublisher(settings.kafka_bootstrap, topic_prefix=prefix, linger_ms=1)
    node.publisher = back  # the broker answers again
    try:
        sent = wait_until("the kept runs sent again", lambda: node.publish_held() or None, 10)
    finally:
        back.close()
    assert sorted(h.run_id for h in sent) == sorted(h.run_id for h in scan.held)
    assert node.held() == 0 and node.publish_held() == []
    assert Counter(m.run_id for m in messages(settings, prefix)) == {h.run_id: 1 for h in scan.held}
    for job in jobs:
        (run,) = runs_of(engine, job)
        assert run.status == "pending" and run.dispatched_at is not None  # the reaper waits


# -- membership, leases, fencing --------------------------------------------------------


def owners(engine: Engine) -> Counter:
    live = rows(
        engine,
        "SELECT owner FROM partition_leases WHERE owner IS NOT NULL AND expires_at > now()",
    )
    return Counter(r.owner for r in live)


def owned_by(engine: Engine, shares: dict[str, int] | list[int]) -> Callable[[], bool]:
    """A condition: the live leases are these shares (by node, or their sorted sizes)."""

    def now_owned() -> bool:
        held = owners(engine)
        return held == shares if isinstance(shares, dict) else sorted(held.values()) == shares

    return now_owned


def fired_since(engine: Engine, jobs: list[str], at: datetime) -> Callable[[], bool]:
    """A condition: every job has a run scheduled at or after `at`."""

    def fired() -> bool:
        got = rows(
            engine, "SELECT count(DISTINCT job_id) FROM runs WHERE scheduled_at >= :at", at=at
        )
        return got[0][0] == len(jobs)

    return fired


def test_two_then_three_nodes_share_the_partitions(engine, make_node) -> None:
    a, b = make_node("a"), make_node("b")
    for _ in range(3):
        for n in (a, b):
            n.lease_pass()
    assert owners(engine) == {"a": 512, "b": 512}
    assert set(a.leases.epochs).isdisjoint(b.leases.epochs)
    c = make_node("c")
    for _ in range(3):
        for n in (a, b, c):
            n.lease_pass()
    assert sorted(owners(engine).values()) == [341, 341, 342]
    held = [set(n.leases.epochs) for n in (a, b, c)]
    assert sum(len(h) for h in held) == 1024 and len(set().union(*held)) == 1024
    # c leaves gracefully: its partitions go back to a and b at a new epoch
    before = dict(a.leases.epochs)
    c.leases.leave()
    for _ in range(2):
        for n in (a, b):
            n.lease_pass()
    assert owners(engine) == {"a": 512, "b": 512}
    assert all(a.leases.epochs[p] == e for p, e in before.items())  # a kept its own


def test_fenced_node_commits_nothing_for_a_lost_partition(engine, make_node) -> None:
    now = db_now(engine)
    taken = create(engine, "taken", {"at": (now + timedelta(seconds=2)).isoformat()}, now)
    expired = create(engine, "expired", {"at": (now + timedelta(seconds=2)).isoformat()}, now)
    kept = create(engine, "kept", {"at": (now + timedelta(seconds=2)).isoformat()}, now)
    parts = [partition_of(j) for j in (taken, expired, kept)]
    assert len(set(parts)) == 3
    node = owned_node(make_node)
    with engine.begin() as conn:  # another node took one over; the other lease expired
        conn.execute(
            text(
                "UPDATE partition_leases SET owner = 'intruder', epoch = epoch + 1 "
                "WHERE partition_id = :p"
            ),
            {"p": parts[0]},
        )
        conn.execute(
            text(
                "UPDATE partition_leases SET expires_at = now() - interval '1 s' "
                "WHERE partition_id = :p"
            ),
            {"p": parts[1]},
        )
    scan = node.scan_once()
    assert scan.refused == {parts[0], parts[1]}
    assert [h.job_id for h in scan.held] == [kept]
    assert runs_of(engine, taken) == [] and runs_of(engine, expired) == []
    left = rows(engine, "SELECT job_id::text AS j FROM triggers ORDER BY 1")
    assert sorted(r.j for r in left) == sorted([taken, expired])
    assert parts[0] not in node.leases.epochs and parts[1] not in node.leases.epochs
    # the lease pass re-takes the expired partition at a new epoch, not the intruder's
    node.lease_pass()
    assert parts[0] not in node.leases.epochs and parts[1] in node.leases.epochs
    assert [h.job_id for h in node.scan_once().held] == [expired]


def test_no_run_twice_none_missed_across_a_killed_and_restarted_node(
    engine, make_node, settings, prefix
) -> None:
    cfg = {"scan_ahead_ms": 1500, "lease_ttl_ms": 2000, "heartbeat_ms": 300}
    now = db_now(engine)
    run_all = MisfirePolicy("run_all")
    jobs = [create(engine, f"j{i}", {"every_s": 1}, now, misfire=run_all) for i in range(40)]
    nodes = [make_node(n, **cfg) for n in ("a", "b")]
    for n in nodes:
        n.start()

    def held() -> str:
        return f"leases: {dict(owners(engine))}"

    wait_until("a and b to share the partitions", owned_by(engine, {"a": 512, "b": 512}), 15, held)
    wait_until("every job to fire", fired_since(engine, jobs, now), 15)
    c = make_node("c", **cfg)
    c.start()
    wait_until("c to take its share", owned_by(engine, [341, 341, 342]), 15, held)
    nodes[0].kill()  # no release: its leases expire, what it did not publish is the reaper's
    wait_until(
        "b and c to take the killed a's over", owned_by(engine, {"b": 512, "c": 512}), 15, held
    )
    a2 = make_node("a", **cfg)
    a2.start()
    wait_until("the restarted a to take its share", owned_by(engine, [341, 341, 342]), 15, held)
    rejoined = db_now(engine)
    wait_until(
        "every job to fire after a rejoined",
        fired_since(engine, jobs, rejoined + timedelta(seconds=1)),
        15,
    )
    end = db_now(engine)  # before the stops, which take their own time
    for n in (nodes[1], c, a2):
        n.stop()

    all_runs = rows(
        engine,
        "SELECT job_id::text AS j, scheduled_at, status, dispatched_at, "
        "run_id::text AS r FROM runs",
    )
    by_job: dict[str, list[datetime]] = {}
    for r in all_runs:
        by_job.setdefault(r.j, []).append(r.scheduled_at)
    for job in jobs:
        times = sorted(by_job[job])  # distinct by the primary key: run id = job + time
        expected = [times[0] + timedelta(seconds=i) for i in range(len(times))]
        assert times == expected, f"job {job}: a fire time is missing"
        assert times[-1] >= end - timedelta(seconds=3), f"job {job}: firing stalled"
    sent = Counter(m.run_id for m in messages(settings, prefix))
    # delivery counts: no run was published twice across the kill and the restart, and
    # every run marked dispatched was published
    assert max(sent.values()) == 1
    assert {r.r for r in all_runs if r.dispatched_at is not None} <= set(sent)
    assert set(sent) <= {r.r for r in all_runs}
    # what the killed node committed and never sent waits for the reaper, still pending
    assert all(r.status == "pending" for r in all_runs)
    assert sorted(owners(engine).values()) == []  # everyone left or expired...
    # ...except that the killed node's leases were taken over, never released by it
    assert rows(engine, "SELECT 1 FROM partition_leases WHERE owner = 'a'") == []


def test_losing_a_node_skips_no_fire(engine, make_node) -> None:
    """Regression (issue 7, item 10): the dead node's partitions move after its lease runs
    out (here 4 s), longer than the 2 s after which a fire counted as missed, so on-time
    fires went through the misfire policy: a skip_late job lost them, run_once ones were
    recorded as skipped. A fire is now missed only when later than the failover itself."""
    cfg = {"scan_ahead_ms": 1000, "lease_ttl_ms": 4000, "heartbeat_ms": 300}
    now = db_now(engine)
    policies = [MisfirePolicy("skip_late", deadline_s=0), MisfirePolicy("run_once")]
    jobs = [
        create(engine, f"j{i}", {"every_s": 1}, now, misfire=policies[i % 2]) for i in range(40)
    ]
    a, b = make_node("a", **cfg), make_node("b", **cfg)
    for n in (a, b):
        n.start()
    wait_until("a and b to share the partitions", lambda: sum(owners(engine).values()) == 1024, 15)
    wait_until("every job to fire", fired_since(engine, jobs, now), 15)
    a.kill()  # no release: its partitions wait for their leases to run out
    wait_until("b to take the killed a's partitions over", owned_by(engine, {"b": 1024}), 20)
    taken = db_now(engine)
    wait_until(
        "every job to fire after the takeover",
        fired_since(engine, jobs, taken + timedelta(seconds=1)),
        15,
    )
    end = db_now(engine)
    b.stop()
    skipped = rows(engine, "SELECT skip_reason FROM runs WHERE status = 'skipped'")
    assert skipped == [], (
        f"fires skipped across the failover: {Counter(r.skip_reason for r in skipped)}"
    )
    for job in jobs:
        times = [r.scheduled_at for r in runs_of(engine, job)]
        assert times == [times[0] + timedelta(seconds=i) for i in range(len(times))], job
        assert times[-1] >= end - timedelta(seconds=2), f"job {job}: firing stalled"


# -- policies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("misfire", "fired"),
    [
        (MisfirePolicy("run_once"), ["latest"]),
        (MisfirePolicy("skip_late", 25), ["last 25 s"]),
        (MisfirePolicy("run_all"), ["all"]),
    ],
)
def test_a_paused_job_writes_nothing_per_fire_and_resumes_by_its_misfire_policy(
    engine, make_node, misfire, fired
) -> None:
    now = db_now(engine).replace(microsecond=0)
    job = create(engine, "paused", {"every_s": 10}, now, paused=True, misfire=misfire)
    node = owned_node(make_node)
    (trig,) = rows(engine, "SELECT fire_at FROM triggers")
    first = node.scan_once(now=trig.fire_at - timedelta(seconds=1))
    assert (first.held, first.skipped, first.parked, first.taken) == ([], {}, 1, 1)
    (parked,) = rows(engine, "SELECT fire_at = 'infinity' AS away, parked_fire_at FROM triggers")
    assert (parked.away, parked.parked_fire_at) == (True, trig.fire_at)
    # two minutes of scans: nothing read, nothing written; the job shows the fire it owes
    for k in range(1, 13):
        assert node.scan_once(now=trig.fire_at + timedelta(seconds=10 * k)).triggers == 0
    assert runs_of(engine, job) == []
    resume_at = trig.fire_at + timedelta(minutes=2, seconds=5)
    assert job_update_at(engine, job, resume_at, paused=True).next_fire_at == trig.fire_at
    ((listed, _last),) = jobs_list(engine, "acme").jobs
    assert (listed.status, listed.next_fire_at) == ("paused", trig.fire_at)
    resumed = job_update_at(engine, job, resume_at, paused=False)
    owed = [trig.fire_at + timedelta(seconds=10 * k) for k in range(13)]  # up to 2 min
    late = [t for t in owed if t < resume_at - timedelta(milliseconds=MISFIRE_GRACE_MS)]
    first_fired = {
        "latest": late[-1],
        "last 25 s": min(t for t in owed if t >= resume_at - timedelta(seconds=25)),
        "all": owed[0],
    }[fired[0]]
    assert resumed.next_fire_at == first_fired
    (back,) = rows(engine, "SELECT fire_at, parked_fire_at FROM triggers")
    assert (back.fire_at, back.parked_fire_at) == (first_fired, None)
    scan = node.scan_once(now=resume_at)
    ran = sorted(h.scheduled_at_ms for h in scan.held)
    assert ran == [to_epoch_ms(t) for t in owed if t >= first_fired] + [
        to_epoch_ms(owed[-1]) + 10_000 * k for k in range(1, 2)
    ]
    assert [r.status for r in runs_of(engine, job)] == ["pending"] * len(ran)


def job_update_at(engine: Engine, job_id: str, now: datetime, **changes: object):
    """An edit at an explicit instant (a pause whose value is already set is one too: it
    bumps the version and reads the job back)."""
    return job_update(engine, JobUpdate("acme", job_id, changes, now=now))


def test_an_old_version_trigger_never_fires(engine, make_node) -> None:
    now = db_now(engine)
    job = create(engine, "edited", {"every_s": 60}, now)
    (old,) = rows(engine, "SELECT * FROM triggers")
    job_update(engine, JobUpdate("acme", job, {"priority": "high"}))
    with engine.begin() as conn:  # the old trigger survived a race with the edit
        conn.execute(
            text(
                "INSERT INTO triggers (partition_id, fire_at, job_id, job_version) "
                "VALUES (:p, :f, :j, 1)"
            ),
            {"p": old.partition_id, "f": old.fire_at - timedelta(seconds=30), "j": job},
        )
    node = owned_node(make_node)
    scan = node.scan_once(now=old.fire_at - timedelta(seconds=2))
    assert [(h.due_ms, h.tier) for h in scan.held] == [(to_epoch_ms(old.fire_at), "high")]
    assert scan.dropped == 1
    (run,) = runs_of(engine, job)
    assert run.job_version == 2 and run.scheduled_at == old.fire_at
    left = rows(engine, "SELECT job_version FROM triggers")
    assert [t.job_version for t in left] == [2]


def _insert_run(engine: Engine, job: str, at: datetime, status: str) -> str:
    rid = run_id(job, at)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status, "
                "trigger_kind, lease_token) VALUES (:r, :j, 'acme', 1, :at, :s, 'schedule', "
                "CASE WHEN :s = 'running' THEN 't' END)"
            ),
            {"r": rid, "j": job, "at": at, "s": status},
        )
    return rid


@pytest.mark.parametrize("policy", ["forbid", "replace", "queue", "allow"])
def test_overlap_policies(engine, make_node, policy) -> None:
    now = db_now(engine)
    job = create(engine, f"overlap-{policy}", {"every_s": 30}, now, overlap=policy)
    (trig,) = rows(engine, "SELECT fire_at FROM triggers")
    running = _insert_run(engine, job, trig.fire_at - timedelta(seconds=30), "running")
    node = owned_node(make_node)
    if policy != "allow":
        # only judged within a second of the fire: not even read before
        assert node.scan_once(now=trig.fire_at - timedelta(seconds=3)).triggers == 0
        assert len(runs_of(engine, job)) == 1
    scan = node.scan_once(now=trig.fire_at - timedelta(milliseconds=500))
    new = [r for r in runs_of(engine, job) if str(r.run_id) != running]
    (old,) = [r for r in runs_of(engine, job) if str(r.run_id) == running]
    assert len(new) == 1
    outcome = (old.status, new[0].status, new[0].skip_reason, len(scan.held))
    assert (
        outcome
        == {
            "forbid": ("running", "skipped", "overlap", 0),
            "replace": ("cancelled", "pending", None, 1),
            "queue": ("running", "pending", "queued", 0),
            "allow": ("running", "pending", None, 1),
        }[policy]
    )
    if policy == "replace":
        assert old.lease_token is None


@pytest.mark.parametrize("policy", ["forbid", "queue", "replace"])
def test_a_run_awaiting_its_retry_still_counts_for_overlap(engine, make_node, policy) -> None:
    """Regression (issue 7, item 12): a run waiting for its retry was not 'active', so with
    forbid or queue the next fire ran, and the retry then ran beside it."""
    now = db_now(engine)
    job = create(engine, f"retrying-{policy}", {"every_s": 30}, now, overlap=policy)
    (trig,) = rows(engine, "SELECT fire_at FROM triggers")
    waiting = _insert_run(engine, job, trig.fire_at - timedelta(seconds=30), "retry_scheduled")
    node = owned_node(make_node)
    scan = node.scan_once(now=trig.fire_at - timedelta(milliseconds=500))
    (old,) = [r for r in runs_of(engine, job) if str(r.run_id) == waiting]
    (new,) = [r for r in runs_of(engine, job) if str(r.run_id) != waiting]
    outcome = (old.status, new.status, new.skip_reason, len(scan.held))
    assert (
        outcome
        == {
            "forbid": ("retry_scheduled", "skipped", "overlap", 0),
            "queue": ("retry_scheduled", "pending", "queued", 0),
            "replace": ("cancelled", "pending", None, 1),
        }[policy]
    )


def test_overlap_triggers_not_due_yet_do_not_fill_the_scan_batch(engine, make_node) -> None:
    """Regression: triggers of overlap-limited jobs (forbid, queue) are taken only within
    a second of their fire, but counted toward the scan's batch limit. With a batch of
    them due a few seconds ahead, every scan read only them, took none, and said it was
    full, so the node scanned again at once, over and over, while an ordinary trigger due
    later in the window waited for its own second."""
    start = datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)
    forbid_at = start + timedelta(seconds=5)
    limited = [
        create(engine, f"limited-{i}", {"at": forbid_at.isoformat()}, start, overlap=policy)
        for i, policy in enumerate(["forbid", "queue"] * 3)
    ]
    ordinary = create(engine, "ordinary", {"at": (start + timedelta(seconds=8)).isoformat()}, start)
    node = owned_node(make_node, scan_batch=4)

    first = node.scan_once(now=start)
    assert [h.job_id for h in first.held] == [ordinary]
    assert (first.triggers, first.taken, first.full, first.rescan) == (1, 1, False, False)
    again = node.scan_once(now=start + timedelta(milliseconds=10))
    assert (again.triggers, again.taken, again.rescan) == (0, 0, False)  # no busy loop
    assert {str(t.job_id) for t in rows(engine, "SELECT job_id FROM triggers")} == set(limited)

    # within their second they are taken, a batch at a time, rescanning while it takes
    near = forbid_at - timedelta(milliseconds=500)
    batches = [node.scan_once(now=near) for _ in range(2)]
    assert [(b.taken, b.full, b.rescan) for b in batches] == [(4, True, True), (2, False, False)]
    assert sorted(h.job_id for b in batches for h in b.held) == sorted(limited)
    assert rows(engine, "SELECT job_id FROM triggers") == []


def test_a_trigger_says_whether_its_job_limits_overlap_and_an_older_one_asks_the_job(
    engine, make_node
) -> None:
    """The hold-back reads the trigger's own `limits_overlap` (written with it: create,
    edit, the scan's advance), so no job is looked up for it; a trigger written before
    the flag (NULL) is held back by its job, and the scan's advance then writes it."""
    start = datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)
    forbid = create(engine, "limited", {"every_s": 60}, start, overlap="forbid")
    allow = create(engine, "free", {"every_s": 60}, start)
    flags = "SELECT job_id::text, limits_overlap FROM triggers ORDER BY job_id"
    assert dict(rows(engine, flags)) == {forbid: True, allow: False}
    job_update(engine, JobUpdate("acme", allow, {"overlap": "queue"}, now=start))
    assert dict(rows(engine, flags)) == {forbid: True, allow: True}
    with engine.begin() as conn:
        conn.execute(text("UPDATE triggers SET limits_overlap = NULL"))
    (fire,) = {r.fire_at for r in rows(engine, "SELECT fire_at FROM triggers")}
    node = owned_node(make_node)
    early = node.scan_once(now=fire - timedelta(seconds=5))
    assert (early.triggers, early.held) == (0, [])  # held back by their jobs
    due = node.scan_once(now=fire - timedelta(milliseconds=500))
    assert sorted(h.job_id for h in due.held) == sorted([forbid, allow])
    assert dict(rows(engine, flags)) == {forbid: True, allow: True}


def test_a_fire_whose_run_or_next_slot_exists_already_falls_back_and_fires_the_rest(
    engine, make_node
) -> None:
    """The common case is written without ON CONFLICT (COPY, under a savepoint): a run id
    that exists already (a backfill of a fire the scheduler had not reached) or a next
    trigger slot already taken makes the whole batch go by the general statements, which
    keep the existing run unpublished and resolve the slot; every other fire of the scan
    is still made once."""
    start = datetime(2030, 1, 1, 0, 0, 0, tzinfo=UTC)
    backfilled = create(engine, "backfilled", {"every_s": 60}, start)
    taken = create(engine, "taken", {"every_s": 60}, start)
    plain = create(engine, "plain", {"every_s": 60}, start)
    (fire,) = {r.fire_at for r in rows(engine, "SELECT fire_at FROM triggers")}
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, job_id, tenant, job_version, scheduled_at, status,"
                " trigger_kind) VALUES (:r, :j, 'acme', 1, :at, 'succeeded', 'backfill')"
            ),
            {"r": run_id(backfilled, fire), "j": backfilled, "at": fire},
        )
        conn.execute(
            text(
                "INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, attempt)"
                " VALUES (:p, :at, :j, 1, 'schedule', 1)"
            ),
            {"p": partition_of(taken), "at": fire + timedelta(seconds=60), "j": taken},
        )
    node = owned_node(make_node)
    scan = node.scan_once(now=fire - timedelta(seconds=1))
    assert sorted(h.job_id for h in scan.held) == sorted([taken, plain])
    assert scan.taken == 3
    left = rows(engine, "SELECT job_id::text, fire_at FROM triggers ORDER BY job_id")
    assert sorted((r.job_id, r.fire_at) for r in left) == sorted(
        (j, fire + timedelta(seconds=60)) for j in (backfilled, taken, plain)
    )
    assert [r.status for r in runs_of(engine, backfilled)] == ["succeeded"]


def test_misfire_policies_after_an_outage(engine, make_node) -> None:
    now = db_now(engine)
    jobs = {
        kind: create(
            engine,
            f"misfire-{kind}",
            {"every_s": 10},
            now,
            misfire=MisfirePolicy(kind, deadline_s=25),
        )
        for kind in ("run_all", "run_once", "skip_late")
    }
    node = owned_node(make_node)
    outage_end = now + timedelta(hours=1)  # the scan runs an hour later than the triggers
    for job in jobs.values():
        (t,) = rows(engine, "SELECT fire_at FROM triggers WHERE job_id = :j", j=job)
        move_trigger(engine, job, t.fire_at + timedelta(seconds=3540))  # 50-60 s late
    node.scan_once(now=outage_end)
    for kind, job in jobs.items():
        runs = runs_of(engine, job)
        ages = [(outage_end - r.scheduled_at).total_seconds() for r in runs]
        assert all(round(b - a, 3) == 10 for a, b in zip(ages[1:], ages[:-1], strict=False))
        fired = [a for a, r in zip(ages, runs, strict=True) if r.status == "pending"]
        skipped = {r.skip_reason for r in runs if r.status == "skipped"}
        grace_s = NodeConfig().misfire_grace_ms / 1000  # older fires were missed
        late = [a for a in ages if a > grace_s]
        if kind == "run_all":
            assert len(fired) == len(runs) and skipped == set()
        elif kind == "run_once":
            assert [a for a in fired if a > grace_s] == [min(late)] and skipped == {"misfire"}
        else:
            assert all(a <= 25 for a in fired) and skipped == {"misfire"}
            assert len([a for a in ages if a > 25]) == len(runs) - len(fired)


def test_catch_up_backlog_goes_highest_priority_first(engine, make_node, settings, prefix):
    now = db_now(engine)
    past = now - timedelta(seconds=30)
    made = []
    for i, tier in enumerate(["low", "normal", "critical", "high"] * 3):
        at = past + timedelta(seconds=i)
        made.append(
            create(
                engine,
                f"p{i}",
                {"at": at.isoformat()},
                now - timedelta(minutes=1),
                priority=tier,
                misfire=MisfirePolicy("run_all"),
            )
        )
    node = owned_node(make_node)
    assert len(node.scan_once().held) == 12
    sent = node.publish_held()
    assert [h.tier for h in sent] == ["critical"] * 3 + ["high"] * 3 + ["normal"] * 3 + ["low"] * 3
    for tier_runs in (sent[i : i + 3] for i in range(0, 12, 3)):
        assert [h.due_ms for h in tier_runs] == sorted(h.due_ms for h in tier_runs)
    assert sorted(m.tier for m in messages(settings, prefix)) == sorted(h.tier for h in sent)


def test_retry_trigger_rearms_and_dispatches_its_run(engine, make_node, settings, prefix):
    now = db_now(engine)
    job = create(engine, "retrying", {"every_s": 3600}, now)
    first = now - timedelta(minutes=1)
    rid = _insert_run(engine, job, first, "retry_scheduled")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, "
                "attempt, run_scheduled_at) VALUES (:p, :f, :j, 1, 'retry', 2, :s)"
            ),
            {"p": partition_of(job), "f": now + timedelta(seconds=1), "j": job, "s": first},
        )
    node = owned_node(make_node)
    scan = node.scan_once(now=now)
    assert [(h.run_id, h.attempt) for h in scan.held] == [(rid, 2)]
    node.publish_held()
    (run,) = runs_of(engine, job)
    assert (run.status, run.attempt) == ("pending", 2)
    assert [(m.run_id, m.attempt) for m in messages(settings, prefix)] == [(rid, 2)]
    assert rows(engine, "SELECT kind FROM triggers")[0].kind == "schedule"


# -- a trigger slot already taken (partition, fire_at, job) ----------------------------


def _trigger_rows(engine: Engine, job_id: str) -> list:
    return rows(
        engine,
        "SELECT fire_at, kind, job_version, run_scheduled_at FROM triggers "
        "WHERE job_id = :j ORDER BY fire_at",
        j=job_id,
    )


def test_a_retry_in_the_next_schedule_slot_keeps_both_triggers(engine, make_node) -> None:
    """Regression (found in review): the next schedule trigger was inserted with a bare
    ON CONFLICT DO NOTHING, so a retry trigger on the same millisecond silently ended
    the job's schedule once it fired."""
    start = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    job = create(engine, "minutely", {"cron": "* * * * *"}, start)
    t1, t2 = (datetime(2030, 1, 1, 0, m, tzinfo=UTC) for m in (1, 2))
    earlier = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, "
                "attempt, run_scheduled_at) VALUES (:p, :at, :j, 1, 'retry', 2, :run_at)"
            ),
            {"p": partition_of(job), "at": t2, "j": job, "run_at": earlier},
        )
    node = owned_node(make_node)
    node.scan_once(now=t1 - timedelta(seconds=1))  # fires t1, next schedule slot is t2
    left = _trigger_rows(engine, job)
    assert sorted((r.kind, r.fire_at) for r in left) == [("retry", t2), ("schedule", t2)]
    assert next(r for r in left if r.kind == "retry").run_scheduled_at == earlier


def test_retries_of_one_job_a_millisecond_apart_do_not_stall_the_scan(engine, make_node) -> None:
    """Regression (issue 7, item 15): a retry trigger in the next schedule slot was slid by
    1 ms; when another retry of the job held that millisecond, the unique key aborted the
    node's whole scan transaction, every second, and none of its partitions fired again.
    Schedule and retry triggers now have keys of their own (kind is in the key)."""
    start = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    job = create(engine, "minutely", {"cron": "* * * * *"}, start)
    other = create(engine, "another", {"every_s": 3600}, start)
    t1, t2 = (datetime(2030, 1, 1, 0, m, tzinfo=UTC) for m in (1, 2))
    earlier = [datetime(2030, 1, 1, 0, 0, s, tzinfo=UTC) for s in (0, 1)]
    with engine.begin() as conn:
        for at, run_at in ((t2, earlier[0]), (t2 + timedelta(milliseconds=1), earlier[1])):
            conn.execute(
                text(
                    "INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind, "
                    "attempt, run_scheduled_at) VALUES (:p, :at, :j, 1, 'retry', 2, :run_at)"
                ),
                {"p": partition_of(job), "at": at, "j": job, "run_at": run_at},
            )
        conn.execute(  # another job due in the same scan, on any partition
            text("UPDATE triggers SET fire_at = :at WHERE job_id = :j"), {"at": t1, "j": other}
        )
    node = owned_node(make_node)
    scan = node.scan_once(now=t1 - timedelta(seconds=1))
    assert sorted(h.job_id for h in scan.held) == sorted([job, other])
    left = _trigger_rows(engine, job)
    assert sorted((r.fire_at, r.kind) for r in left) == [
        (t2, "retry"),
        (t2, "schedule"),
        (t2 + timedelta(milliseconds=1), "retry"),
    ]


def test_an_edit_racing_a_scan_cannot_leave_the_job_without_a_live_trigger(
    engine, make_node
) -> None:
    """Regression (found in review): an edit that read the trigger before a scan
    advanced it re-inserted the old slot at the new version while the scan's next
    slot stayed at the old version; that one was then dropped as stale."""
    start = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    job = create(engine, "minutely", {"cron": "* * * * *"}, start)
    t1, t2 = (datetime(2030, 1, 1, 0, m, tzinfo=UTC) for m in (1, 2))
    with engine.begin() as conn:  # the state the race leaves: t1 at v2, t2 at v1
        conn.execute(text("UPDATE jobs SET version = 2 WHERE job_id = :j"), {"j": job})
        conn.execute(text("UPDATE triggers SET job_version = 2 WHERE job_id = :j"), {"j": job})
        conn.execute(
            text(
                "INSERT INTO triggers (partition_id, fire_at, job_id, job_version, kind) "
                "VALUES (:p, :at, :j, 1, 'schedule')"
            ),
            {"p": partition_of(job), "at": t2, "j": job},
        )
    node = owned_node(make_node)
    node.scan_once(now=t1 - timedelta(seconds=1))
    assert [(r.fire_at, r.job_version) for r in _trigger_rows(engine, job)] == [(t2, 2)]
    node.scan_once(now=t2 - timedelta(seconds=1))
    assert [r.scheduled_at for r in runs_of(engine, job)] == [t1, t2]
