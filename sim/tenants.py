"""Tenants sharing a fleet's workers: what a noisy tenant does to the others' start lag,
with the kit's fair shares and without (`cronfleet sim tenants`, docs/tenants.md).

The worker stage of the storm model (sim.storm) with tenants: runs are already held by
the workers (claimed ahead, an even share each, as keyed partitions give them), and at
their second each worker hands them to its slots. A slot is one of the worker's
`places`: its task loop's for `http` runs, its pool's threads for `sleep` runs (each
kind has `places` of them). Who gets a slot that frees is the kit's own decision:

- shares on: the due batch in `kit.core.fair_share.fair_order`, then a freed slot to the
  run `kit.core.fair_share.FairQueue` pops, skipping a tenant whose part of its limits
  on this worker (`worker_part`, `worker_rate`) `TenantGate` refuses; the weights,
  classes and limits are a `kit.core.tenancy.TenantsPolicy` parsed from the operator's
  TOML file. As kit.worker.shares does, a run that finds a slot free and nobody waiting
  takes it at once, and a slot owed to a rate-limited tenant is looked at again 50 ms on;
- shares off (`cronfleet worker --no-fair-share`): first come, first served, no limits.

An http run (kit.tasks.http) takes a place, costs its task loop's CPU up to the send
(one thread per worker, on the cores), then waits for one of its target's `connections`
(per target per worker), giving its place back while it waits and taking one again
(uncharged) when it has the connection; then the target's CPU, and the target receives
it: its start, as the noisy-neighbour benchmark measures it. The target answers after
`duration_s`; the response costs the loop's CPU, and the place and connection are freed.
A sleep run starts when it holds a pool thread and holds it for `duration_s`.

The choice is FairQueue's, run for run (tests/sim/test_tenants.py::
test_the_model_starts_the_run_the_kits_fair_queue_picks); the limits are each worker's
part (test_a_tenants_max_running_holds_on_each_worker_its_part_and_counts_it,
test_a_tenants_start_rate_is_divided_among_the_workers).

The CPU per http task is the profile's (sim.storm.http_costs). No random draw: a
scenario gives one answer. Not modelled: the scheduler, the stream and the claims (the
storm model has them), the loop's pacing of new tasks (at most 64 per pass), the hold
thread, the rest of the machine, preemption.
"""

from __future__ import annotations

import tomllib
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from kit.core.dispatch import PRIORITY_TIERS, tier_rank
from kit.core.errors import FieldError
from kit.core.fair_share import FairQueue, TenantGate, fair_order, worker_part, worker_rate
from kit.core.tenancy import OPEN, TenantClass, TenantsPolicy
from sim.storm import Cpu, http_costs

Process = Generator[simpy.Event, Any, None]

TASKS = ("http", "sleep")
RETRY_S = 0.05  # kit.worker.shares.RETRY_S: a slot owed to a rate-limited tenant

TENANTS_DEFAULTS: dict[str, Any] = {
    "kind": "tenants",
    "name": "tenants",
    "description": "",
    "fleet": {
        "workers": 2,
        "places": 1024,  # the task loop's places and the pool's threads, per worker
        "cores": 2,  # shared by the workers' task loops and the targets
        "connections_per_target": 64,  # kit.tasks.http.CONNECTIONS_PER_TARGET, per worker
        "quantum_ms": 2.0,
        "limit_s": 3600.0,  # simulated time at most
    },
    "tenants": {},
    "profile": {},
}
TENANT_DEFAULTS: dict[str, Any] = {
    "runs": 1,
    "due_s": 0.0,  # the second its runs are due, from the start
    "task": "http",  # http (the task loop) or sleep (a pool thread)
    "duration_s": 0.0,  # http: the target answers after this; sleep: the run's length
    "connections": -1,  # http: connections to its target per worker (< 0: the fleet's)
    "tier": "normal",
}


@dataclass(frozen=True)
class Tenant:
    name: str
    runs: int
    due_s: float
    task: str
    duration_s: float
    connections: int
    tier: str


def load_tenants(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The scenario as run: defaults <- file <- overrides; every tenant checked."""
    from sim.scenario import ScenarioError, apply_overrides, deep_merge

    s = deep_merge(TENANTS_DEFAULTS, raw)
    s["tenants"] = {k: deep_merge(TENANT_DEFAULTS, v) for k, v in raw.get("tenants", {}).items()}
    # `--set profile.KEY=SECONDS`: a cost of the calibration profile (load_profile checks it)
    for o in overrides:
        key, _, value = o.partition("=")
        if key.startswith("profile."):
            try:
                s["profile"][key.removeprefix("profile.")] = float(value)
            except ValueError:
                raise ScenarioError(f"{key}: expected a number of seconds, got {value!r}") from None
    s = apply_overrides(s, [o for o in overrides if not o.startswith("profile.")])
    for key in set(s["fleet"]) - set(TENANTS_DEFAULTS["fleet"]):
        raise ScenarioError(f"fleet.{key}: unknown key")
    for key in ("workers", "places", "cores", "connections_per_target"):
        if not isinstance(s["fleet"][key], int) or s["fleet"][key] < 1:
            raise ScenarioError(f"fleet.{key}: must be a whole number of at least 1")
    for key in ("quantum_ms", "limit_s"):
        if not float(s["fleet"][key]) > 0:
            raise ScenarioError(f"fleet.{key}: must be greater than 0")
    if not s["tenants"]:
        raise ScenarioError("tenants: the scenario names no tenant ([tenants.<name>])")
    for name, t in s["tenants"].items():
        where = f"tenants.{name}"
        for key in set(t) - set(TENANT_DEFAULTS):
            raise ScenarioError(f"{where}.{key}: unknown key")
        if not isinstance(t["runs"], int) or t["runs"] < 1:
            raise ScenarioError(f"{where}.runs: must be a whole number of at least 1")
        for key in ("due_s", "duration_s"):
            if not float(t[key]) >= 0:
                raise ScenarioError(f"{where}.{key}: must not be negative")
        if t["task"] not in TASKS:
            raise ScenarioError(f"{where}.task: one of {', '.join(TASKS)}, got {t['task']!r}")
        if t["tier"] not in PRIORITY_TIERS:
            raise ScenarioError(f"{where}.tier: one of {', '.join(PRIORITY_TIERS)}")
        if not isinstance(t["connections"], int) or t["connections"] == 0:
            raise ScenarioError(f"{where}.connections: a whole number >= 1 (< 0: the fleet's)")
    return s


def read_policy(path: str | Path | None) -> TenantsPolicy:
    """The operator's tenant policy file, parsed by the kit (`TenantsPolicy.parse`); no
    file: every tenant weight 1, no limit (the kit without a file)."""
    if path is None:
        return OPEN
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise FieldError("policy", f"{p}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FieldError("policy", f"{p} is not valid TOML: {exc}") from None
    try:
        return TenantsPolicy.parse(data)
    except FieldError as exc:
        raise FieldError("policy", f"{p}: {exc.field}: {exc.reason}") from None


@dataclass
class _Counts:
    waited: int = 0  # runs that found no slot for them at once
    limited: int = 0  # times a free slot passed the tenant over for a limit (the kit's counter)
    # most of its runs waiting at once, sampled each second as the kit's gauge is: for
    # their share (others' turn, or first come first served), at one of its limits
    peak_share: int = 0
    peak_limit: int = 0


class TenantSlots:
    """One worker's slots of one kind, given to waiting runs as the kit's worker gives
    them (kit.worker.shares.FairSlots, on simulated time): by `FairQueue` and `TenantGate`
    with shares on, first come first served without."""

    def __init__(self, model: TenantsModel, places: int) -> None:
        self.m = model
        self.free = places
        self.fair: FairQueue[tuple[int, simpy.Event]] = FairQueue()
        self.fifo: deque[tuple[int, simpy.Event]] = deque()
        self.gate = TenantGate()
        self.granted: list[int] = []  # runs given a slot, in order (tests)
        self.popped: list[int] = []  # of those, the ones FairQueue popped
        self._retry = False
        self.waiting: dict[str, int] = {}  # runs waiting here, by tenant

    def _waiting(self) -> int:
        return len(self.fair) if self.m.shares else len(self.fifo)

    def _refusal(self, tenant: str) -> str | None:
        limits = self.m.policy.for_tenant(tenant)
        return self.gate.refusal(
            tenant,
            worker_part(limits.max_running, self.m.workers),
            worker_rate(limits.max_starts_per_s, self.m.workers),
            self.m.now_ms(),
        )

    def _started(self, r: int, charge: bool) -> None:
        tenant = self.m.tenant_name(r)
        rate = self.m.policy.for_tenant(tenant).max_starts_per_s
        self.gate.started(
            tenant, worker_rate(rate, self.m.workers) if charge else None, self.m.now_ms()
        )
        self.granted.append(r)

    def request(self, r: int, charge: bool = True) -> simpy.Event:
        """An event that fires when run `r` holds a slot."""
        ev = self.m.env.event()
        tenant = self.m.tenant_name(r)
        if not self.m.shares:
            if self.free > 0 and not self.fifo:
                self.free -= 1
                self.granted.append(r)
                return ev.succeed()
            self.fifo.append((r, ev))
        else:
            if self.free > 0 and not self.fair:
                why = self._refusal(tenant)
                if why is None:
                    self.free -= 1
                    self._started(r, charge)
                    return ev.succeed()
                self.m.counts[tenant].limited += 1
            limits = self.m.policy.for_tenant(tenant)
            paid = limits.tenant_class is TenantClass.paid
            tier = tier_rank(self.m.tenants[self.m.tenant_of[r]].tier)
            self.fair.push((r, ev), tenant, tier, limits.weight, paid)
            self.m.charge_of[r] = charge
        self.waiting[tenant] = self.waiting.get(tenant, 0) + 1
        self._wake()
        if charge and not ev.triggered:
            self.m.counts[tenant].waited += 1
        return ev

    def waiting_by_reason(self) -> dict[tuple[str, str], int]:
        """Runs waiting by tenant and reason, as kit.worker.shares.show_waiting counts
        them: its limit if the gate refuses it now, else `share`."""
        out: dict[tuple[str, str], int] = {}
        for tenant, n in self.waiting.items():
            if n:
                why = (self._refusal(tenant) if self.m.shares else None) or "share"
                out[tenant, why] = out.get((tenant, why), 0) + n
        return out

    def release(self, r: int) -> None:
        self.free += 1
        if self.m.shares:
            self.gate.finished(self.m.tenant_name(r))
        self._wake()

    def _wake(self) -> None:
        while self.free > 0 and self._waiting():
            if not self.m.shares:
                r, ev = self.fifo.popleft()
                self.granted.append(r)
            else:
                got = self._pop()
                if got is None:  # every tenant waiting is at a limit: a rate refills
                    if not self._retry:
                        self._retry = True
                        self.m.env.process(self._retried())
                    return
                r, ev = got
                self.popped.append(r)
                self._started(r, self.m.charge_of.pop(r))
            self.free -= 1
            self.waiting[self.m.tenant_name(r)] -= 1
            ev.succeed()

    def _pop(self) -> tuple[int, simpy.Event] | None:
        """FairQueue's pick among the tenants the gate lets start one more now."""
        refused: dict[str, str | None] = {}

        def startable(tenant: str) -> bool:
            if tenant not in refused:
                refused[tenant] = self._refusal(tenant)
                self.m.counts[tenant].limited += refused[tenant] is not None
            return refused[tenant] is None

        return self.fair.pop(startable)

    def _retried(self) -> Process:
        yield self.m.env.timeout(RETRY_S)
        self._retry = False
        self._wake()


@dataclass
class _Worker:
    name: str
    loop: simpy.Resource  # its task loop's thread (the interpreter lock)
    places: TenantSlots  # the task loop's
    threads: TenantSlots  # the pool's
    connections: dict[str, simpy.Resource] = field(default_factory=dict)  # by target


class TenantsModel:
    def __init__(
        self,
        scenario: dict[str, Any],
        policy: TenantsPolicy,
        profile: dict[str, float],
        shares: bool = True,
    ) -> None:
        self.s = scenario
        self.policy = policy
        self.shares = shares
        fleet = scenario["fleet"]
        self.workers = int(fleet["workers"])
        self.limit_s = float(fleet["limit_s"])
        self.env = simpy.Environment()
        self.cpu = Cpu(self.env, int(fleet["cores"]), float(fleet["quantum_ms"]) / 1000)
        costs = http_costs(profile)
        self.first_step_s = costs["http_before_send"]  # made and run up to its connection
        self.after_s = costs["http_after_send"]
        self.target_s = costs["http_target"]
        self.tenants = [
            Tenant(
                name,
                int(t["runs"]),
                float(t["due_s"]),
                str(t["task"]),
                float(t["duration_s"]),
                int(t["connections"])
                if int(t["connections"]) > 0
                else int(fleet["connections_per_target"]),
                str(t["tier"]),
            )
            for name, t in scenario["tenants"].items()
        ]
        # runs in the order they reach the workers: by second, then as the scenario lists
        # the tenants (a tenant listed first has its burst ahead in the stream)
        order = sorted(range(len(self.tenants)), key=lambda i: self.tenants[i].due_s)
        self.tenant_of = np.concatenate(
            [np.full(self.tenants[i].runs, i, dtype=np.int32) for i in order]
        )
        n = self.n = len(self.tenant_of)
        self.due = np.array([self.tenants[i].due_s for i in self.tenant_of])
        self.started = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.charge_of: dict[int, bool] = {}
        self.counts = {t.name: _Counts() for t in self.tenants}
        places = int(fleet["places"])
        self.fleet = [
            _Worker(
                f"worker-{i}",
                simpy.Resource(self.env, 1),
                TenantSlots(self, places),
                TenantSlots(self, places),
            )
            for i in range(self.workers)
        ]
        # keyed by job: each tenant's runs spread evenly over the workers
        seen = np.zeros(len(self.tenants), dtype=np.int64)
        self.worker_of = np.zeros(n, dtype=np.int32)
        for r in range(n):
            t = self.tenant_of[r]
            self.worker_of[r] = seen[t] % self.workers
            seen[t] += 1
        for w in range(self.workers):
            mine = np.flatnonzero(self.worker_of == w)
            for due_s in sorted(set(self.due[mine].tolist())):
                batch = [int(r) for r in mine[self.due[mine] == due_s]]
                self.env.process(self._hand(self.fleet[w], due_s, batch))

    def tenant_name(self, r: int) -> str:
        return self.tenants[int(self.tenant_of[r])].name

    def now_ms(self) -> int:
        return int(self.env.now * 1000)

    def _hand(self, w: _Worker, due_s: float, batch: list[int]) -> Process:
        """At the second: the due runs handed to the slots, in the fair queue's order with
        shares on (kit.worker's `_loop_order`), in arrival order without."""
        yield self.env.timeout(due_s)
        if self.shares and len(batch) > 1:
            policy = self.policy

            def paid(tenant: str) -> bool:
                return policy.for_tenant(tenant).tenant_class is TenantClass.paid

            batch = fair_order(
                batch,
                self.tenant_name,
                lambda r: tier_rank(self.tenants[self.tenant_of[r]].tier),
                policy.weight,
                paid,
            )
        for r in batch:
            t = self.tenants[self.tenant_of[r]]
            self.env.process(self._http(w, r, t) if t.task == "http" else self._sleep(w, r, t))

    def _sleep(self, w: _Worker, r: int, t: Tenant) -> Process:
        yield w.threads.request(r)
        self.started[r] = self.env.now
        yield self.env.timeout(t.duration_s)
        w.threads.release(r)
        self.finished[r] = self.env.now

    def _http(self, w: _Worker, r: int, t: Tenant) -> Process:
        env = self.env
        yield w.places.request(r)
        yield env.process(self.cpu.run(w.name, self.first_step_s, w.loop))
        pool = w.connections.get(t.name)
        if pool is None:
            pool = w.connections[t.name] = simpy.Resource(env, t.connections)
        conn = pool.request()
        if not conn.triggered:  # its place given back while it waits for its turn
            w.places.release(r)
            yield conn
            yield w.places.request(r, charge=False)
        yield env.process(self.cpu.run("target", self.target_s))
        self.started[r] = env.now
        yield env.timeout(t.duration_s)
        yield env.process(self.cpu.run(w.name, self.after_s, w.loop))
        pool.release(conn)
        w.places.release(r)
        self.finished[r] = env.now

    def _sample(self) -> Process:
        """Each second, the runs waiting by tenant and reason: the peaks reported."""
        while True:
            yield self.env.timeout(1.0)
            now: dict[tuple[str, str], int] = {}
            for w in self.fleet:
                for slots in (w.places, w.threads):
                    for key, n in slots.waiting_by_reason().items():
                        now[key] = now.get(key, 0) + n
            for (tenant, why), n in now.items():
                c = self.counts[tenant]
                if why == "share":
                    c.peak_share = max(c.peak_share, n)
                else:
                    c.peak_limit = max(c.peak_limit, n)

    def run(self) -> dict[str, Any]:
        self.env.process(self._sample())
        self.env.run(until=self.limit_s)
        return self.result()

    def result(self) -> dict[str, Any]:
        rows = []
        for i, t in enumerate(self.tenants):
            mine = self.tenant_of == i
            lag = self.started[mine] - self.due[mine]
            lag = np.sort(lag[np.isfinite(lag)])
            c = self.counts[t.name]
            rows.append(
                {
                    "tenant": t.name,
                    "runs": t.runs,
                    "started": int(lag.size),
                    "start_lag_s": [_pct(lag, 0.5), _pct(lag, 0.99), _pct(lag, 1.0)],
                    "waited_for_a_slot": c.waited,
                    "peak_waiting_share": c.peak_share,
                    "peak_waiting_limit": c.peak_limit,
                    "limited": c.limited,
                }
            )
        done = self.finished[np.isfinite(self.finished)]
        return {
            "scenario": self.s["name"],
            "shares": self.shares,
            "tenants": rows,
            "all_finished_s": None if done.size < self.n else round(float(done.max()), 3),
        }


def _pct(sorted_lags: np.ndarray, q: float) -> float | None:
    """The benchmark's percentile: the value at rank int(q * (n - 1)) of the sorted."""
    if sorted_lags.size == 0:
        return None
    return round(float(sorted_lags[int(q * (sorted_lags.size - 1))]), 3)


def simulate_tenants(
    scenario: dict[str, Any],
    policy: TenantsPolicy,
    profile: dict[str, float],
    shares: bool = True,
) -> dict[str, Any]:
    return TenantsModel(scenario, policy, profile, shares).run()


def compare(
    scenario: dict[str, Any], policy: TenantsPolicy, profile: dict[str, float]
) -> dict[str, Any]:
    """The scenario with the kit's shares and without: the architect's question."""
    return {
        "scenario": scenario["name"],
        "with_shares": simulate_tenants(scenario, policy, profile, True),
        "without_shares": simulate_tenants(scenario, policy, profile, False),
    }


def table(result: dict[str, Any]) -> list[str]:
    """Per tenant, with and without shares, as lines of text."""
    head = (
        f"{'tenant':<12} {'shares':<6} {'runs':>7} {'started':>7} "
        f"{'lag p50 / p99 / max s':>26} {'waited':>7} {'for share':>9} {'limited':>7}"
    )
    lines = [head, "-" * len(head)]
    w, wo = result["with_shares"]["tenants"], result["without_shares"]["tenants"]
    for on, off in zip(w, wo, strict=True):
        for label, row in (("on", on), ("off", off)):
            lag = " / ".join("-" if v is None else f"{v:g}" for v in row["start_lag_s"])
            lines.append(
                f"{row['tenant']:<12} {label:<6} {row['runs']:>7,} {row['started']:>7,} "
                f"{lag:>26} {row['waited_for_a_slot']:>7,} {row['peak_waiting_share']:>9,} "
                f"{row['peak_waiting_limit']:>7,}"
            )
    return lines
