"""Tenants in the model (sim.tenants): a freed slot goes where the kit's fair queue sends
it, and the shares change what a noisy tenant does to the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.cli import main as cronfleet
from kit.core.errors import FieldError
from kit.core.fair_share import FairQueue, fair_order
from kit.core.tenancy import TenantsPolicy
from sim.scenario import ScenarioError, load_profile
from sim.tenants import TenantsModel, load_tenants, read_policy, simulate_tenants

PROFILE = load_profile(None, {})
POLICIES = Path(__file__).parents[2] / "sim" / "scenarios" / "policies"


def scenario(tenants: dict[str, dict[str, Any]], **fleet: Any) -> dict[str, Any]:
    return load_tenants({"name": "t", "fleet": fleet, "tenants": tenants}, [])


def policy(text: str, tmp_path: Path) -> TenantsPolicy:
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    return read_policy(path)


def lag(result: dict[str, Any], tenant: str) -> list[float]:
    (row,) = [r for r in result["tenants"] if r["tenant"] == tenant]
    return row["start_lag_s"]


# a small noisy neighbour: 2,000 slow http runs ahead of 20 fast ones at the same second
NOISY = {
    "bench": {"runs": 2000, "due_s": 1.0, "duration_s": 1.0},
    "quiet": {"runs": 20, "due_s": 1.0},
}


def test_with_shares_the_quiet_tenant_starts_well_before_it_does_without():
    s = scenario(NOISY, workers=1, places=64, connections_per_target=8)
    on = simulate_tenants(s, TenantsPolicy(), PROFILE, shares=True)
    off = simulate_tenants(s, TenantsPolicy(), PROFILE, shares=False)
    assert lag(on, "quiet")[1] < lag(off, "quiet")[1] / 4
    # the noisy tenant's own lag is its target's doing (8 connections, 1 s each): unchanged
    assert lag(on, "bench")[2] == pytest.approx(lag(off, "bench")[2], rel=0.05)
    assert lag(on, "bench")[2] == pytest.approx(2000 / 8, rel=0.05)
    for r in (on, off):
        assert [row["started"] for row in r["tenants"]] == [2000, 20]


def test_with_shares_a_pool_thread_goes_to_the_quiet_tenant_when_one_frees():
    s = scenario(
        {
            "bench": {"runs": 200, "task": "sleep", "duration_s": 10.0},
            "quiet": {"runs": 4, "due_s": 1.0, "task": "sleep", "duration_s": 1.0},
        },
        workers=1,
        places=10,
    )
    on = simulate_tenants(s, TenantsPolicy(), PROFILE, shares=True)
    off = simulate_tenants(s, TenantsPolicy(), PROFILE, shares=False)
    assert lag(on, "quiet")[2] == pytest.approx(9.0)  # the first threads to free, at 10 s
    assert lag(off, "quiet")[2] == pytest.approx(199.0)  # behind all 200 runs of 10 s


# one pool thread, held by a blocker until every other run is waiting: from then on each
# freed thread goes to the run the queue picks, with nothing pushed in between
PICKING = {
    "first": {"runs": 1, "task": "sleep", "duration_s": 5.0},
    "a": {"runs": 30, "due_s": 1.0, "task": "sleep", "duration_s": 0.1},
    "b": {"runs": 30, "due_s": 1.0, "task": "sleep", "duration_s": 0.1},
    "p": {"runs": 5, "due_s": 1.0, "task": "sleep", "duration_s": 0.1},
}
WEIGHTS = """
[tenants.a]
weight = 2
[tenants.b]
weight = 1
[tenants.p]
class = "paid"
"""


def test_the_model_starts_the_run_the_kits_fair_queue_picks(tmp_path: Path):
    pol = policy(WEIGHTS, tmp_path)
    m = TenantsModel(scenario(PICKING, workers=1, places=1), pol, PROFILE)
    m.run()
    threads = m.fleet[0].threads
    assert threads.granted[0] == 0  # the blocker, at once (nobody waiting)
    assert threads.popped == threads.granted[1:]  # every other start popped from FairQueue
    # the same runs pushed, in the same order, into the kit's own queue, popped one by one
    queue: FairQueue[int] = FairQueue()
    batch = fair_order(
        list(range(1, m.n)),
        m.tenant_name,
        lambda _r: 2,
        pol.weight,
        lambda t: t == "p",
    )
    for r in batch:
        queue.push(r, m.tenant_name(r), 2, pol.weight(m.tenant_name(r)), m.tenant_name(r) == "p")
    expected = [queue.pop() for _ in batch]
    assert threads.granted[1:] == expected
    names = [m.tenant_name(r) for r in threads.granted[1:]]
    assert names[:5] == ["p"] * 5  # paid before free


def test_weights_two_to_one_give_two_starts_to_one_while_both_wait(tmp_path: Path):
    pol = policy(WEIGHTS, tmp_path)
    m = TenantsModel(scenario(PICKING, workers=1, places=1), pol, PROFILE)
    m.run()
    names = [m.tenant_name(r) for r in m.fleet[0].threads.granted[6:]]  # after blocker, paid
    assert names.count("a") == names.count("b") == 30
    for k in range(1, 45):  # SFQ's bound over each stretch from the start while both wait
        a, b = names[:k].count("a"), names[:k].count("b")
        assert abs(a / 2 - b / 1) <= 1 / 2 + 1
    assert names[:30].count("a") == 20 and names[:30].count("b") == 10


def test_a_tenants_max_running_holds_on_each_worker_its_part_and_counts_it(tmp_path: Path):
    pol = policy("[tenants.bench]\nmax_running = 6\n", tmp_path)
    s = scenario(
        {
            "bench": {"runs": 60, "task": "sleep", "duration_s": 1.0},
            "quiet": {"runs": 6, "due_s": 0.5, "task": "sleep", "duration_s": 1.0},
        },
        workers=2,
        places=20,
    )
    m = TenantsModel(s, pol, PROFILE)
    r = m.run()
    bench = np.flatnonzero(m.tenant_of == 0)
    for w in range(2):
        mine = bench[m.worker_of[bench] == w]
        for t in np.unique(m.started[mine]):  # running at each start: at most 6 / 2
            running = (m.started[mine] <= t) & (m.finished[mine] > t)
            assert running.sum() <= 3
    assert lag(r, "quiet")[2] == pytest.approx(0.0)  # free places, bench held at its limit
    (row,) = [x for x in r["tenants"] if x["tenant"] == "bench"]
    assert row["limited"] > 0 and row["peak_waiting_limit"] > 0 and row["started"] == 60


def test_a_negative_weight_is_refused_with_one_line_naming_the_entry(tmp_path: Path, capsys):
    with pytest.raises(FieldError) as err:
        policy("[tenants.quiet]\nweight = -1\n", tmp_path)
    assert err.value.field == "policy"
    assert "tenants.quiet.weight: must be a number greater than 0" in err.value.reason
    code = cronfleet(
        [
            "sim",
            "tenants",
            "--scenario",
            "noisy-neighbour",
            "--policy",
            str(tmp_path / "tenants.toml"),
        ]
    )
    out = capsys.readouterr()
    assert code == 2
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cronfleet sim: policy: ")
    assert lines[0].endswith("tenants.quiet.weight: must be a number greater than 0")


def test_a_bad_scenario_names_the_key():
    with pytest.raises(ScenarioError, match=r"^tenants\.quiet\.runs: "):
        scenario({"quiet": {"runs": 0}})
    with pytest.raises(ScenarioError, match=r"^tenants\.quiet\.task: "):
        scenario({"quiet": {"task": "noop"}})
    with pytest.raises(ScenarioError, match=r"^fleet\.places: "):
        scenario({"quiet": {}}, places=0)


def test_the_command_prints_each_tenant_with_and_without_shares(capsys):
    code = cronfleet(
        [
            "sim",
            "tenants",
            "--scenario",
            "noisy-neighbour",
            "--policy",
            str(POLICIES / "noisy-neighbour.toml"),
            "--set",
            "tenants.bench.runs=2000",
            "--set",
            "tenants.quiet.runs=20",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["bench"], ["quiet"])]
    assert [r[:2] for r in rows] == [
        ["bench", "on"],
        ["bench", "off"],
        ["quiet", "on"],
        ["quiet", "off"],
    ]
    assert [r[2] for r in rows] == ["2,000", "2,000", "20", "20"]


def test_a_tenants_start_rate_is_divided_among_the_workers(tmp_path: Path):
    pol = policy("[tenants.bench]\nmax_starts_per_s = 20\n", tmp_path)
    s = scenario(
        {
            "bench": {"runs": 200, "task": "sleep", "duration_s": 0.1},
            "quiet": {"runs": 4, "due_s": 0.5, "task": "sleep", "duration_s": 0.1},
        },
        workers=2,
        places=50,
    )
    r = simulate_tenants(s, pol, PROFILE)
    # 10 per second on each worker, a bucket of one second's starts full at the start:
    # its 100th run there after about 9 s
    assert 8.5 <= lag(r, "bench")[2] <= 9.5
    assert lag(r, "quiet")[2] == pytest.approx(0.0)
    # no limits without shares: two rounds of 50 places
    assert lag(simulate_tenants(s, pol, PROFILE, shares=False), "bench")[2] == pytest.approx(0.1)
