"""The one-machine storm model (sim.storm): the kit's current design, claims ahead and
starts at the second on shared cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.core import defaults, leases
from sim.scenario import ScenarioError, load_profile, read_scenario_file
from sim.storm import STORM_DEFAULTS, ScenarioShapeError, http_costs, simulate_storm

RAW = read_scenario_file("storm-2core")
SMALL = ["storm.runs=5000"]


def storm(*sets: str, seed: int = 1, **profile: float) -> dict:
    """The storm on the default profile, less the http costs measured in a burst (the
    tests give the costs they reason about)."""
    prof = {k: v for k, v in load_profile(None, {}).items() if not k.startswith("http_storm_")}
    prof.update(profile)
    return simulate_storm(RAW, [*SMALL, *sets], seed, prof)


def test_every_run_starts_once_at_or_after_its_second_and_succeeds():
    r = storm()
    assert r["started"] == r["succeeded"] == 5000
    assert r["given_back"] == 0
    p50, p99, mx = r["start_lag_s"]
    assert 0 <= p50 <= p99 <= mx
    assert r["all_claimed_s"] < 0  # the scan ahead left room to claim before the second


def test_a_short_scan_ahead_claims_after_the_second_and_starts_late():
    ahead = storm()
    late = storm("storm.scan_ahead_s=0.5", "storm.runs=50000")
    assert late["all_claimed_s"] > 0
    assert late["start_lag_s"][1] > 5 * ahead["start_lag_s"][1]


def test_the_start_lag_follows_the_measured_cost_of_a_start():
    # without storm.at_t, whose measured CPU per start at T would stand in for it
    cheap = storm("storm.at_t=false", worker_start_inline_s=1e-6)
    dear = storm("storm.at_t=false", worker_start_inline_s=20e-6)
    # 2,500 starts per worker: 19 us more each is about 47 ms more for the last ones
    assert dear["start_lag_s"][2] - cheap["start_lag_s"][2] == pytest.approx(0.0475, rel=0.2)


# the whole storm, scanned 20 s ahead: every run is claimed long before T whatever the
# profile's scan-ahead costs, so the start lag is the second's alone
FULL = ("storm.runs=50000", "storm.lead_s=30", "storm.scan_ahead_s=20")
ISOLATED = {"worker_wheel_pop_s": 1.66e-6, "worker_start_inline_s": 1.10e-6}


def test_the_second_is_charged_at_the_hold_threads_cpu_per_start_measured_in_a_storm():
    """storm.at_t: a worker's pop and starts at T cost what its hold thread took per run at
    T in the calibration storm, not the isolated measurement (2.76 us here)."""
    base = {**ISOLATED, "storm_at_t_cpu_s": 0.0}
    iso = storm(*FULL, storm_at_t_start_cpu_per_run_s=0.0, **base)
    dear = storm(*FULL, storm_at_t_start_cpu_per_run_s=5.52e-6, **base)
    off = storm(*FULL, "storm.at_t=false", storm_at_t_start_cpu_per_run_s=5.52e-6, **base)
    # 25,000 runs per worker, 2.76 us more each: about 69 ms more for the last start
    assert dear["start_lag_s"][2] - iso["start_lag_s"][2] == pytest.approx(0.069, rel=0.15)
    assert off["start_lag_s"] == iso["start_lag_s"]


def test_the_rest_of_the_machine_at_t_takes_the_cores_from_the_hold_threads():
    """The CPU the rest of the machine took from T to T + 0.3 s in the calibration storm
    competes with the two hold threads for the two cores."""
    base = {**ISOLATED, "storm_at_t_start_cpu_per_run_s": 0.0, "storm_at_t_window_s": 0.3}
    idle = storm(*FULL, storm_at_t_cpu_s=0.0, **base)
    busy = storm(*FULL, storm_at_t_cpu_s=0.3, **base)  # a core's worth for 0.3 s
    assert busy["cpu_s"]["rest of the machine at T"] == pytest.approx(0.3, abs=0.01)
    assert "rest of the machine at T" not in idle["cpu_s"]
    # three runnable threads on two cores: each hold thread gets about two thirds of one
    assert busy["start_lag_s"][1] > 1.3 * idle["start_lag_s"][1]


def test_the_rest_at_t_is_taken_slot_by_slot_as_measured():
    """The same CPU of the rest of the machine at T, all in the first 100 ms (the node's
    scan at the whole second, the benchmark's poll), delays the starts more than spread
    over the window."""
    base = {**ISOLATED, "storm_at_t_start_cpu_per_run_s": 0.0, "storm_at_t_window_s": 0.3}
    front = {"storm_at_t_slot_0_cpu_s": 0.15, "storm_at_t_slot_1_cpu_s": 0.0}
    even = {"storm_at_t_slot_0_cpu_s": 0.075, "storm_at_t_slot_1_cpu_s": 0.075}
    slots = {"storm_at_t_slot_2_cpu_s": 0.0, "storm_at_t_slot_s": 0.1}
    early = storm(*FULL, storm_at_t_cpu_s=0.15, **base, **slots, **front)
    spread = storm(*FULL, storm_at_t_cpu_s=0.15, **base, **slots, **even)
    assert early["cpu_s"]["rest of the machine at T"] == pytest.approx(0.15, abs=0.01)
    assert early["start_lag_s"][1] > spread["start_lag_s"][1] + 0.01


def test_the_shipped_prediction_depends_on_what_the_second_costs_in_a_storm():
    """The default profile's storm_at_t_* (cronfleet calibrate --storm-at-t): without them
    the model predicts the second as the isolated start path costs it."""
    prof = load_profile(None, {})
    assert prof["storm_at_t_start_cpu_per_run_s"] > prof["worker_wheel_pop_s"]
    assert prof["storm_at_t_cpu_s"] > 0
    with_at_t = simulate_storm(RAW, [*FULL], 1, prof)["start_lag_s"][1]
    without = simulate_storm(RAW, [*FULL, "storm.at_t=false"], 1, prof)["start_lag_s"][1]
    assert with_at_t > 1.25 * without


def test_the_burst_is_first_scanned_a_scan_ahead_before_its_second():
    """Scans fall on whole seconds (kit.core.dispatch.next_scan_at_ms, as the kit's node
    waits): the scan that reaches T starts at T - 10 s, whatever the seed."""
    runs = [storm(seed=s) for s in (1, 2, 3)]
    firsts = {r["published_s"][0] for r in runs}
    assert all(-10.0 < f < -9.0 for f in firsts)
    assert len(firsts) == 1  # no phase drawn for the scan


def test_a_publish_chunk_waits_for_its_acknowledgement_before_the_next():
    """publish_encoded produces and flushes: a dearer broker delays every later chunk."""
    cheap = storm("storm.runs=20000", storm_ahead_broker_cpu_per_run_s=1e-6)
    dear = storm("storm.runs=20000", storm_ahead_broker_cpu_per_run_s=50e-6)
    # 20,000 runs at 49 us more each on the publish's path: about 1 s later (more with the
    # cores shared); a producer that did not wait would be late by one chunk's, 0.25 s
    assert dear["published_s"][1] - cheap["published_s"][1] > 0.9


def test_the_finishers_lag_observation_waits_for_the_starts():
    """kit.worker's finisher observes the start lags recorded so far at its turn, but not
    while the hold thread starts (it used to, on the interpreter lock the starts need): a
    dearer observation no longer delays any start, whatever the finisher's phase."""
    for s in range(1, 7):  # whether its turn falls in the starts is the seed's phase
        cheap = storm(*FULL, seed=s, worker_observe_lag_s=0.0)
        dear = storm(*FULL, seed=s, worker_observe_lag_s=4e-6)
        assert dear["start_lag_s"] == cheap["start_lag_s"]


def test_heartbeats_renew_only_leases_ending_within_the_horizon():
    """The kit's rule (the machine's BEAT_WANTED): a run claimed ahead is leased a ttl past
    its second, so with the default ttl no beat of the storm renews anything; with a 3 s
    ttl beaten every second, beats renew the runs not yet written. The worker counts a
    lease from before its claim was sent (kit.core.worker_run.claimed), so a lease is
    within the horizon a claim's duration before T + ttl - horizon (here 0.2 s)."""
    assert storm(*FULL, seed=2)["heartbeats"] == []
    r = storm(*FULL, "storm.run_ttl_s=3", "storm.heartbeat_s=1", seed=2)
    assert r["heartbeats"], "a 3 s lease ends within the horizon of 1 s beats"
    margin_ms = leases.fence_margin_ms(3000, defaults.KILL_GRACE_MS)
    horizon_ms = leases.beat_rule(3000, 1000, margin_ms).horizon_ms
    earliest = (3000 - horizon_ms) / 1000 - 0.5  # a claim takes well under 0.5 s here
    assert all(at >= earliest and 0 < n <= 50_000 for _, at, n in r["heartbeats"])
    off = storm(*FULL, "storm.run_ttl_s=3", "storm.heartbeat_s=1", "storm.heartbeats=false")
    assert off["heartbeats"] == [] and off["succeeded"] == 50_000


def test_a_beat_due_during_the_starts_comes_after_them():
    """kit.worker's heartbeat thread lets the second's starts go first, as the finisher
    does: with short leases the beats due at T + 0.05 s come after each worker's last start."""
    r = storm(*FULL, "storm.run_ttl_s=3", "storm.heartbeat_s=1", "storm.heartbeat_phases=0.05,0.05")
    first = {}
    for name, at, _n in r["heartbeats"]:
        if at >= 0:  # (beats before T, of leases counted from before their claim, are
            first.setdefault(name, at)  # before every start)
    assert len(first) == 2
    for i, (_p50, _p99, last_start) in enumerate(r["start_lag_by_worker_s"]):
        assert first[f"worker-{i}"] >= last_start - 0.001


def test_a_heartbeat_at_the_second_renews_nothing_and_does_not_delay_the_starts():
    """Before the rule, a worker's beat at T + 0.05 s extended every run it had started,
    on the interpreter lock its hold thread needs, and delayed the starts by more than
    20 ms; now the leases granted past the second are left as they are."""
    during = storm(*FULL, "storm.heartbeat_phases=0.05,0.05")
    after = storm(*FULL, "storm.heartbeat_phases=5,5")
    assert during["heartbeats"] == []
    assert during["start_lag_s"] == after["start_lag_s"]
    with pytest.raises(ScenarioShapeError, match="one per worker"):
        storm("storm.heartbeat_phases=0.1")
    with pytest.raises(ScenarioShapeError, match=r"within \[-1, 10\)"):
        storm("storm.heartbeat_phases=0.1,12")


def test_more_cores_than_threads_do_not_change_a_lone_start_batch():
    two = storm()
    four = storm("storm.cores=4")
    assert four["start_lag_s"][1] <= two["start_lag_s"][1] + 1e-9


def test_same_seed_same_result():
    assert storm(seed=3) == storm(seed=3)


def test_bad_input_names_the_field():
    with pytest.raises(ScenarioShapeError, match=r"storm\.runs"):
        storm("storm.runs=0")
    with pytest.raises(ScenarioError, match=r"storm\.nope"):
        simulate_storm({**RAW, "storm": {**RAW["storm"], "nope": 1}}, [], 1, load_profile(None, {}))
    prof = load_profile(None, {})
    del prof["worker_start_inline_s"]
    with pytest.raises(ScenarioShapeError, match="worker_start_inline_s"):
        simulate_storm(RAW, SMALL, 1, prof)
    with pytest.raises(ScenarioShapeError, match=r"profile\.storm_at_t_cpu_s"):
        storm(storm_at_t_cpu_s=-1.0)


def test_the_cli_runs_the_storm_scenario(tmp_path: Path):
    out = tmp_path / "storm.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.cli",
            "sim",
            "storm-2core",
            "--set",
            "storm.runs=2000",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert "start lag p50 / p99 / max" in p.stdout
    r = json.loads(out.read_text())
    assert r["succeeded"] == 2000
    bad = subprocess.run(
        [sys.executable, "-m", "kit.cli", "sim", "storm-2core", "--set", "storm.cores=x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "storm.cores" in bad.stderr


def test_the_comparison_reads_the_measured_runs(tmp_path: Path):
    """benchmarks/storm_model.py sets the model's p99 against each measured run's."""
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps({"jobs": 2000, "workers": 2, "start_lag_s": [0.1, 0.2, 0.3]}))
    p = subprocess.run(
        [
            sys.executable,
            "benchmarks/storm_model.py",
            "--seeds",
            "2",
            "--measured",
            str(measured),
            "--json",
            str(tmp_path / "c.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    c = json.loads((tmp_path / "c.json").read_text())
    assert len(c["predicted"]) == 2
    (row,) = c["compared"]
    assert row["measured_p99_s"] == 0.2
    assert row["error"] == pytest.approx(c["predicted_p99_s"] / 0.2 - 1, abs=1e-3)
    assert row["within_15pct"] == (abs(row["error"]) <= 0.15)


def _sitting(root: Path, name: str, runs: list[float], median: float, model: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    compared = [{"measured_p99_s": r} for r in runs]
    summary = {"compared": compared, "measured_median_p99_s": median, "model_median_p99_s": model}
    (d / "model_vs_kit.json").write_text(json.dumps(summary))
    return d


def _sittings(*dirs: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "benchmarks/storm_sittings.py", *map(str, dirs)]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_the_sittings_table_judges_each_sitting_by_the_median_of_its_runs(tmp_path: Path):
    """benchmarks/storm_sittings.py: a model 10 % over its sitting's median is within, one
    20 % under is not, and a prediction written before the sitting is judged beside it."""
    near = _sitting(tmp_path, "d1/near", [0.08, 0.10, 0.30], 0.10, 0.11)
    far = _sitting(tmp_path, "d1/far", [0.09, 0.10, 0.11, 0.12], 0.105, 0.084)
    (far / "model_pooled.json").write_text(json.dumps({"model_median_p99_s": 0.126}))
    p = _sittings(near, far)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines()[1:]}
    assert "+10.0%  yes" in rows["d1/near"]
    assert "-20.0%  NO" in rows["d1/far"]
    assert rows["d1/far"].rstrip().endswith("+20.0%  NO")


def test_the_sittings_table_refuses_a_summary_its_runs_do_not_give(tmp_path: Path):
    wrong = _sitting(tmp_path, "d1/s", [0.08, 0.10, 0.30], 0.15, 0.11)  # the median is 0.10
    p = _sittings(wrong)
    assert p.returncode != 0
    assert "is not the median of its runs" in p.stderr


def test_defaults_cover_every_key_of_the_scenario():
    assert set(RAW["storm"]) <= set(STORM_DEFAULTS["storm"])


# -- http and command tasks (storm.task; cronfleet calibrate --only-tasks) ----------------

HTTP = {
    "worker_http_submit_s": 0.5e-6,
    "worker_http_loop_cpu_s": 150e-6,
    "worker_http_loop_before_send_s": 50e-6,
    "http_target_cpu_s": 40e-6,
}


def test_an_http_storm_costs_the_loops_and_the_targets_cpu_and_starts_later_than_noop():
    noop = storm(**HTTP)
    http = storm("storm.task=http", **HTTP)
    assert http["started"] == http["succeeded"] == 5000
    assert http["start_lag_s"][1] > 5 * noop["start_lag_s"][1]
    # every request's target CPU, on a core of its own account
    assert http["cpu_s"]["target"] == pytest.approx(5000 * 40e-6, abs=0.01)
    assert "target" not in noop["cpu_s"]
    # each worker's task loop runs its 2,500 tasks' 150 us on its interpreter lock
    extra = http["cpu_s"]["worker-0"] - noop["cpu_s"]["worker-0"]
    assert extra == pytest.approx(2500 * 150e-6, rel=0.1)


def test_the_http_start_lag_scales_with_the_measured_loop_cpu_per_task():
    cheap = storm("storm.task=http", **HTTP)
    dear = storm("storm.task=http", **{**HTTP, "worker_http_loop_cpu_s": 300e-6})
    # 2,500 tasks per worker, 150 us more each, two workers on two cores with the rest of
    # the machine: the last arrivals come at least ~0.3 s later
    assert dear["start_lag_s"][2] - cheap["start_lag_s"][2] > 0.3
    assert dear["start_lag_s"][1] > 1.5 * cheap["start_lag_s"][1]


def test_the_loop_and_target_costs_measured_in_a_burst_replace_the_isolated_ones():
    """`http_storm_*` (cronfleet calibrate --http-storm): the loop's CPU per task as a
    burst measured it, split before and after the send at the isolated share; the
    target's per request likewise. Without them the isolated costs stand."""
    assert http_costs(HTTP) == pytest.approx(
        {"http_before_send": 50e-6, "http_after_send": 100e-6, "http_target": 40e-6}
    )
    measured = {**HTTP, "http_storm_loop_cpu_s": 300e-6, "http_storm_target_cpu_s": 90e-6}
    assert http_costs(measured) == pytest.approx(
        {"http_before_send": 100e-6, "http_after_send": 200e-6, "http_target": 90e-6}
    )
    alone = storm("storm.task=http", **HTTP)
    burst = storm("storm.task=http", **measured)
    assert burst["cpu_s"]["target"] == pytest.approx(5000 * 90e-6, abs=0.01)
    extra = burst["cpu_s"]["worker-0"] - alone["cpu_s"]["worker-0"]
    assert extra == pytest.approx(2500 * 150e-6, rel=0.1)
    assert burst["start_lag_s"][1] > 1.5 * alone["start_lag_s"][1]


def test_an_http_start_is_the_requests_arrival_after_the_part_before_the_send():
    """Moving loop CPU from before the send to after it (same total) starts runs earlier."""
    early = storm("storm.task=http", **{**HTTP, "worker_http_loop_before_send_s": 10e-6})
    late = storm("storm.task=http", **{**HTTP, "worker_http_loop_before_send_s": 140e-6})
    assert late["start_lag_s"][1] > early["start_lag_s"][1]
    assert late["cpu_s"]["worker-0"] == pytest.approx(early["cpu_s"]["worker-0"], rel=0.02)


def test_one_connection_per_target_serialises_a_workers_requests():
    """One worker: with one connection its loop waits for each reply before the next
    request; with the kit's 64 the target's CPU runs on the other core beside the loop."""
    slow_target = {**HTTP, "http_target_cpu_s": 1e-3}
    one = ("storm.task=http", "storm.runs=400", "storm.workers=1")
    wide = storm(*one, **slow_target)
    narrow = storm(*one, "storm.connections_per_target=1", **slow_target)
    # 400 requests one after another: 400 x (0.05 + 1 + 0.1) ms = 0.46 s at least
    assert narrow["start_lag_s"][2] > 0.4
    assert narrow["start_lag_s"][2] > 1.5 * wide["start_lag_s"][2]


def test_the_models_connections_per_target_are_the_kits():
    from kit.tasks.http import CONNECTIONS_PER_TARGET

    assert STORM_DEFAULTS["storm"]["connections_per_target"] == CONNECTIONS_PER_TARGET


def test_a_command_storm_charges_the_worker_and_the_command():
    costs = {
        "worker_command_submit_s": 50e-6,
        "worker_command_cpu_s": 1e-3,
        "command_child_cpu_s": 0.5e-3,
    }
    r = storm("storm.task=command", "storm.runs=1000", **costs)
    assert r["started"] == r["succeeded"] == 1000
    assert r["cpu_s"]["command"] == pytest.approx(0.5, abs=0.01)
    dear = storm("storm.task=command", "storm.runs=1000", **{**costs, "command_child_cpu_s": 2e-3})
    assert dear["start_lag_s"][1] > r["start_lag_s"][1] + 0.3


def test_a_task_kind_without_its_measured_costs_or_unknown_is_refused():
    prof = load_profile(None, {})
    for k in HTTP:
        prof.pop(k, None)
    with pytest.raises(ScenarioShapeError, match="calibrate --only-tasks"):
        simulate_storm(RAW, [*SMALL, "storm.task=http"], 1, prof)
    with pytest.raises(ScenarioShapeError, match=r"storm\.task"):
        storm("storm.task=grpc")


def test_a_run_past_its_fence_at_its_second_is_given_back_not_started():
    """The fence is the kit's worker machine's (kit.core.worker_run.PAST_FENCE), in the
    model as in the kit: with a 0.2 s lease counted from before its claim, most runs'
    fences come before their second, and those are given back, never started. Planted
    away (tests/plants.py `no_fence`), every run starts and this test fails."""
    r = storm(*FULL, "storm.run_ttl_s=0.2", "storm.heartbeats=false")
    assert r["given_back"] > 40_000
    assert r["started"] + r["given_back"] == 50_000
