"""No transition lets a stale epoch or token win: random interleavings of lease
operations by several nodes (partition leases) and workers (run leases), checked with
the shared invariants of kit.core.invariants."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kit.core.invariants import check_monotonic_epochs, check_single_holder
from kit.core.leases import (
    TRANSITIONS,
    RunLease,
    RunStatus,
    acquire_partition,
    cancel_run,
    claim_run,
    expire_run,
    fenced_write_allowed,
    finish_run,
    heartbeat_run,
    release_partition,
    renew_partition,
    retry_due_run,
)

TTL_MS = 1_000
NODES = ["n0", "n1", "n2"]
PARTITIONS = [0, 1]
RULES = {(r.source, r.event, r.target) for r in TRANSITIONS}

partition_ops = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["acquire", "renew", "release", "write"]),
            st.sampled_from(NODES),
            st.sampled_from(PARTITIONS),
            st.integers(-1, 1),  # epoch skew: a confused node offers a wrong epoch
        ),
        st.tuples(st.just("tick"), st.integers(1, 1_500)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(partition_ops)
def test_no_stale_epoch_wins_a_partition(ops):
    leases = dict.fromkeys(PARTITIONS)
    believed: dict[tuple[str, int], int] = {}  # what each node thinks its epoch is
    now = 0
    grants, writes = [], []
    for op in ops:
        if op[0] == "tick":
            now += op[1]
            continue
        kind, node, p, skew = op
        lease = leases[p]
        epoch = believed.get((node, p), 0) + skew
        if kind == "acquire":
            d = acquire_partition(lease, p, node, now, TTL_MS)
        elif lease is None:
            continue
        elif kind == "renew":
            d = renew_partition(lease, node, epoch, now, TTL_MS)
        elif kind == "release":
            d = release_partition(lease, node, epoch)
        else:
            if fenced_write_allowed(lease, node, epoch, now):
                # only the live owner at the current epoch ever writes
                assert lease.owner == node and lease.epoch == epoch and now < lease.expires_at_ms
                writes.append((p, epoch, node))
            continue
        if d.granted:
            if lease is not None and kind != "release" and d.lease.owner != lease.owner:
                assert d.lease.epoch == lease.epoch + 1  # ownership changed -> new epoch
            if lease is not None and lease.live(now) and d.lease.owner is not None:
                assert d.lease.owner == lease.owner  # no one takes a live lease
            leases[p] = d.lease
            if d.lease.owner is not None:
                believed[(node, p)] = d.lease.epoch
                grants.append((p, d.lease.epoch, node))
        else:
            assert d.lease == lease and d.reason
    check_single_holder(grants)
    check_monotonic_epochs(grants)
    check_single_holder(writes)  # one writer per epoch
    check_monotonic_epochs(writes)  # once a newer epoch wrote, an older one never does


WORKERS = ["w0", "w1", "w2"]
run_ops = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.sampled_from(WORKERS), st.integers(-1, 0)),
        st.tuples(st.just("heartbeat"), st.sampled_from(WORKERS)),
        st.tuples(st.just("finish"), st.sampled_from(WORKERS), st.booleans(), st.booleans()),
        st.tuples(st.sampled_from(["expire", "retry_due", "cancel"])),
        st.tuples(st.just("tick"), st.integers(1, 1_500)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(run_ops)
def test_no_stale_token_wins_a_run(ops):
    run = RunLease("r1", 1, RunStatus.pending)
    tokens: dict[str, str] = {}  # each worker's token from its last claim attempt
    live_claim: tuple[str, str] | None = None  # (worker, token) of the accepted claim
    finished_tokens: set[str] = set()
    now = 0
    claims = []
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == "tick":
            now += op[1]
            continue
        before = run
        if kind == "claim":
            _, worker, skew = op
            tokens[worker] = f"{worker}-{i}"
            t = claim_run(run, worker, tokens[worker], run.attempt + skew, now, TTL_MS)
        elif kind == "heartbeat":
            t = heartbeat_run(run, tokens.get(op[1], "none"), now, TTL_MS)
        elif kind == "finish":
            _, worker, ok, retry = op
            t = finish_run(run, tokens.get(worker, "none"), ok, now, now + 500 if retry else None)
        elif kind == "expire":
            t = expire_run(run, now, max_attempts=5)
        elif kind == "retry_due":
            t = retry_due_run(run, now)
        else:
            t = cancel_run(run)
        if not t.accepted:
            assert t.run == before and t.reason
            continue
        assert (before.status, t.event, t.run.status) in RULES
        if kind == "claim":
            assert live_claim is None  # at most one live holder at a time
            live_claim = (op[1], t.run.token)
            claims.append((run.run_id, t.run.attempt, op[1]))
        elif kind in ("heartbeat", "finish"):
            # only the holder of the accepted claim, with its current token
            assert live_claim == (op[1], tokens.get(op[1])) == (op[1], before.token)
            if kind == "finish":
                assert before.token not in finished_tokens
                finished_tokens.add(before.token)
        if t.run.status is not RunStatus.running:
            live_claim = None
        assert t.run.attempt >= before.attempt
        run = t.run
    check_single_holder(claims)  # one worker per attempt
    check_monotonic_epochs(claims)  # attempts never go back
