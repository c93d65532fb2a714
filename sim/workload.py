"""The workload, generated one window (a minute of fire times) at a time, so only the
runs near the simulated present exist in memory.

A population is a list of templates: jobs sharing a schedule (a cron expression in an
IANA zone, or an interval) and a jitter. Every decision goes through kit.core: a
template's fire times come from `kit.core.schedule.fires_in` (the DST rule of the kit),
each job's partition from `kit.core.partitions`, its offset inside the jitter window
from `kit.core.jitter` (the kit's `jitter_s`), both hashed from the job's own id. A job
fires at nominal fire time + its offset, as `kit.core.trigger.next_fire_ms` has it.

Three kinds of population:
- `cron`: the scenario lists cron classes (expression, share of the schedules, jitter)
  and time zones (share of the schedules); every class is spread over every zone.
- `cohort` (the top of the hour): hourly jobs jittered over `peak_spread_s` (sized so
  the jitter window runs at the peak rate), every-minute jobs, and a sparse rest of the
  population arriving at a steady rate on hash-weighted partitions.
- `poisson` (M/M/c checks): Poisson arrivals on uniform partitions.

Every run carries its job's schedule kind (`kind`: an index into SCHEDULE_KINDS,
kit.core.schedule.ScheduleKind), which is what the scan charges for its fire: a cron
population's are cron; a cohort's or poisson's are the scenario's
`workload.schedule_kind` of each population (hourly, frequent, sparse). The cohort's
hourly and every-minute jobs fire on interval schedules whatever their kind (an hour or a
minute from the peak, the same fire times as the crons they stand for), except one-off
hourly jobs, which fire once, at the peak.

Randomness (tiers, task classes of jobs; sparse arrivals and poison per window) comes
from generators seeded by (seed, stream, template or window), so a window is the same
whenever it is generated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from kit.core import dispatch, jitter, partitions
from kit.core.schedule import (
    CronSchedule,
    IntervalSchedule,
    OneOffSchedule,
    Schedule,
    ScheduleKind,
    fires_in,
    parse_cron,
    parse_timezone,
)
from kit.core.timeutil import to_epoch_ms

SCHEDULE_KINDS = tuple(ScheduleKind)  # a run's `kind` is an index into these
KIND_INDEX = {k: i for i, k in enumerate(SCHEDULE_KINDS)}
HOUR_S = 3600
HOUR_MS = HOUR_S * 1000
WINDOW_MS = 60_000
SPARSE_HASH_SAMPLE = 200_000  # ids hashed to weigh partitions for the sparse population
NOMINAL_CHUNK_MS = 6 * HOUR_MS  # fire times computed ahead per call of fires_in
HASH_CHUNK = 100_000

# random streams (the seed's other streams live in sim.model)
STREAM_JOBS, STREAM_WINDOW, STREAM_POISON = 11, 12, 13

# job hashes are the same for every seed: kept per process (sizing runs many models)
_PARTS: dict[tuple[str, int, int], np.ndarray] = {}
_OFFSETS: dict[tuple[str, int, int], np.ndarray] = {}


def start_of(s: dict[str, Any]) -> datetime:
    return parse_instant(s["start"], "start")


def parse_instant(raw: str, what: str = "anchor") -> datetime:
    at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError(f"{what}: needs a UTC offset or 'Z'")
    return at.astimezone(UTC)


def _ids(prefix: str, a: int, b: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(a, b)]


def _per_job(
    cache: dict[tuple[str, int, int], np.ndarray],
    key: tuple[str, int, int],
    compute: Callable[[list[str], int], Sequence[int] | np.ndarray],
    dtype: type[np.generic],
) -> np.ndarray:
    """compute(ids, arg) for every job id `prefix + i`, in job order, kept per process."""
    if key not in cache:
        prefix, jobs, arg = key
        out = np.empty(jobs, dtype)
        for a in range(0, jobs, HASH_CHUNK):
            b = min(jobs, a + HASH_CHUNK)
            out[a:b] = compute(_ids(prefix, a, b), arg)
        cache[key] = out
        return out
    return cache[key]


def job_partitions(prefix: str, jobs: int, n_parts: int) -> np.ndarray:
    """kit.core.partitions of every job id `prefix + i`, in job order."""
    return _per_job(_PARTS, (prefix, jobs, n_parts), partitions.partitions_of, np.int16)


def job_offsets(prefix: str, jobs: int, jitter_ms: int) -> np.ndarray:
    """kit.core.jitter offsets of every job id `prefix + i`, in job order."""
    return _per_job(_OFFSETS, (prefix, jobs, jitter_ms), jitter.jitter_offsets_ms, np.int32)


@dataclass
class Template:
    """Jobs sharing a schedule and a jitter window; hashed on first use."""

    index: int
    name: str  # the population class
    zone: str
    schedule: Schedule
    jitter_ms: int
    jobs: int
    key0: int  # job key of the first job
    id_prefix: str
    kind: ScheduleKind  # what a scan charges per fire (the fire times are `schedule`'s)
    expr: str = ""
    # filled by `ready`: jobs in offset order
    offset: np.ndarray | None = None
    part: np.ndarray | None = None
    key: np.ndarray | None = None
    tier: np.ndarray | None = None
    cls: np.ndarray | None = None
    nominal: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    computed_to_ms: int | None = None


class WorkloadStream:
    """Runs for each window of fire times, sorted, as the model's runs table takes them."""

    def __init__(
        self, s: dict[str, Any], seed: int, poison: list[tuple[int, float]] | None = None
    ) -> None:
        self.s = s
        self.seed = seed
        w = s["workload"]
        self.kind = w["arrivals"]
        self.n_parts = int(s["fleet"]["partitions"])
        self.start = start_of(s)
        self.start_ms = to_epoch_ms(self.start)
        self.duration_ms = int(float(s["duration_s"]) * 1000)
        self.class_names = list(w["classes"])
        shares = np.array([float(w["classes"][c]["share"]) for c in self.class_names])
        self.class_p = shares / shares.sum()
        tier_p = np.array([float(w["tiers"].get(t, 0.0)) for t in dispatch.PRIORITY_TIERS])
        self.tier_p = tier_p / tier_p.sum()
        self.poison = poison or []
        self.templates: list[Template] = []
        self.sparse_rate = 0.0  # runs/s without identity
        kinds = w["schedule_kind"]
        self.sparse_kind = ScheduleKind(kinds["sparse"])
        self.sparse_weights: np.ndarray | None = None  # None: uniform partitions
        self.generated_to = -int(float(s.get("lead_in_s", 0)) * 1000)
        self.window_index = 0
        self.runs = 0
        self.hours = max(1, -(-self.duration_ms // HOUR_MS))
        if self.kind == "cron":
            self._cron_population(w)
        elif self.kind == "cohort":
            self._cohort_population(s, w)
        else:
            self.sparse_rate = float(w["arrival_rate"])
        n_src = len(self.templates) + 1  # + the sparse stream
        self.offered = np.zeros((self.hours, n_src), np.int64)  # runs due per hour, source

    # -- populations ------------------------------------------------------------------

    @property
    def jobs(self) -> int:
        return sum(t.jobs for t in self.templates)

    @property
    def kinds(self) -> set[ScheduleKind]:
        """The schedule kinds of the runs this workload generates."""
        out = {t.kind for t in self.templates}
        if self.sparse_rate > 0:
            out.add(self.sparse_kind)
        return out

    def _add(
        self,
        name: str,
        zone: str,
        sched: Schedule,
        jitter_s: float,
        jobs: int,
        kind: ScheduleKind,
        expr: str = "",
    ) -> None:
        if jobs <= 0:
            return
        key0 = self.jobs
        self.templates.append(
            Template(
                index=len(self.templates),
                name=name,
                zone=zone,
                schedule=sched,
                jitter_ms=round(float(jitter_s) * 1000),
                jobs=int(jobs),
                key0=key0,
                id_prefix=f"{name}.{zone}.",
                kind=kind,
                expr=expr,
            )
        )

    def _cron_population(self, w: dict[str, Any]) -> None:
        """Each class over the scenario's zones, or over its own (`zones` of the class: a
        team's mix, sim.mix); a class with `every_s` is an interval from its `anchor`
        (default: the scenario's start) instead of a cron expression."""
        total = int(w["schedules"])
        for i, c in enumerate(w["cron"]):
            zones = {str(z): float(v) for z, v in (c.get("zones") or w["zones"]).items()}
            zsum = sum(zones.values())
            n_class = total * float(c["share"])
            if "every_s" in c:
                anchor = c.get("anchor")
                at = self.start if anchor is None else parse_instant(str(anchor))
                every = IntervalSchedule(int(c["every_s"]), at)
                jobs = round(n_class)
                self._add(c["name"], "", every, c["jitter_s"], jobs, ScheduleKind.interval)
                continue
            expr = parse_cron(c["cron"], f"workload.cron.{i}.cron")
            for zone, zshare in zones.items():
                parse_timezone(zone, f"workload.zones.{zone}")
                jobs = round(n_class * zshare / zsum)
                sched = CronSchedule(expr, zone)
                self._add(c["name"], zone, sched, c["jitter_s"], jobs, ScheduleKind.cron, expr)

    def _cohort_population(self, s: dict[str, Any], w: dict[str, Any]) -> None:
        hourly = hourly_job_count(w)
        peak_ms = int(float(s["peak_at_s"]) * 1000)
        kinds = w["schedule_kind"]
        hourly_kind = ScheduleKind(kinds["hourly"])
        anchor = self.start + timedelta(milliseconds=peak_ms % HOUR_MS)
        every_hour: Schedule = IntervalSchedule(HOUR_S, anchor)
        if hourly_kind is ScheduleKind.one_off:  # fires once, at the peak
            every_hour = OneOffSchedule(self.start + timedelta(milliseconds=peak_ms))
        self._add("job-h", "", every_hour, w["peak_spread_s"], hourly, hourly_kind)
        base_rate = (float(w["runs_per_s"]) * HOUR_S - hourly) / HOUR_S
        frequent = min(int(w["frequent_jobs"]), int(base_rate * 60))
        every_minute = IntervalSchedule(60, self.start)
        self._add("job-m", "", every_minute, 60, frequent, ScheduleKind(kinds["frequent"]))
        for t in self.templates:  # the model's first ids: job-h0, job-m0, ...
            t.id_prefix = t.name
        self.sparse_rate = max(0.0, base_rate - frequent / 60.0)
        self.sparse_weights = sparse_partition_weights(s, self.n_parts)

    def ready(self, t: Template) -> None:
        """Hash the template's jobs (kit.core) and draw their tiers and task classes."""
        if t.offset is not None:
            return
        off = job_offsets(t.id_prefix, t.jobs, t.jitter_ms)
        order = np.argsort(off, kind="stable").astype(np.int32)
        t.offset = off[order]
        t.part = job_partitions(t.id_prefix, t.jobs, self.n_parts)[order]
        t.key = order + np.int32(t.key0)
        rng = np.random.default_rng([self.seed, STREAM_JOBS, t.index])
        t.tier = rng.choice(len(self.tier_p), t.jobs, p=self.tier_p).astype(np.int8)
        t.cls = rng.choice(len(self.class_p), t.jobs, p=self.class_p).astype(np.int8)

    def nominal_between(self, t: Template, lo_ms: int, hi_ms: int) -> np.ndarray:
        """The template's nominal fire times in [lo_ms, hi_ms), model ms (kit.core)."""
        if t.computed_to_ms is None:
            t.computed_to_ms = lo_ms - 1
        while t.computed_to_ms < hi_ms:
            a = t.computed_to_ms
            b = max(hi_ms, a + NOMINAL_CHUNK_MS)
            fires = fires_in(
                t.schedule,
                self.start + timedelta(milliseconds=a),
                self.start + timedelta(milliseconds=b),
            )
            new = np.array([to_epoch_ms(f) - self.start_ms for f in fires], np.int64)
            t.nominal = np.concatenate((t.nominal[t.nominal >= lo_ms], new))
            t.computed_to_ms = b
        i0, i1 = np.searchsorted(t.nominal, [lo_ms, hi_ms], "left")
        out = t.nominal[i0:i1]
        t.nominal = t.nominal[i0:]
        return out

    # -- windows -----------------------------------------------------------------------

    def generate(self, a: int, b: int) -> dict[str, np.ndarray]:
        """Every run with fire time in [a, b) ms, sorted by fire time."""
        b = min(b, self.duration_ms)
        pieces: dict[str, list[np.ndarray]] = {
            k: [] for k in ("fire", "part", "tier", "cls", "job", "kind")
        }
        hour = min(a // HOUR_MS, self.hours - 1)  # < 0: the lead-in, not counted
        for t in self.templates:
            first = a - max(t.jitter_ms - 1, 0)
            nominal = self.nominal_between(t, first, b)
            if nominal.size == 0:
                continue
            self.ready(t)
            assert t.offset is not None and t.part is not None and t.key is not None
            assert t.tier is not None and t.cls is not None
            n_before = sum(x.size for x in pieces["fire"])
            for n in nominal.tolist():
                i0, i1 = np.searchsorted(t.offset, [a - n, b - n], "left")
                if i1 <= i0:
                    continue
                pieces["fire"].append(t.offset[i0:i1] + np.int64(n))
                pieces["part"].append(t.part[i0:i1])
                pieces["tier"].append(t.tier[i0:i1])
                pieces["cls"].append(t.cls[i0:i1])
                pieces["job"].append(t.key[i0:i1])
                pieces["kind"].append(np.full(i1 - i0, KIND_INDEX[t.kind], np.int8))
            if hour >= 0:
                self.offered[hour, t.index] += sum(x.size for x in pieces["fire"]) - n_before
        rng = np.random.default_rng([self.seed, STREAM_WINDOW, _window_key(a)])
        if self.sparse_rate > 0 and b > a:
            n = int(rng.poisson(self.sparse_rate * (b - a) / 1000))
            pieces["fire"].append(np.sort(rng.integers(a, b, n, dtype=np.int64)))
            if self.sparse_weights is None:
                pieces["part"].append(rng.integers(0, self.n_parts, n).astype(np.int16))
            else:
                pieces["part"].append(
                    rng.choice(self.n_parts, n, p=self.sparse_weights).astype(np.int16)
                )
            pieces["tier"].append(rng.choice(len(self.tier_p), n, p=self.tier_p).astype(np.int8))
            pieces["cls"].append(rng.choice(len(self.class_p), n, p=self.class_p).astype(np.int8))
            pieces["job"].append(np.full(n, -1, np.int32))
            pieces["kind"].append(np.full(n, KIND_INDEX[self.sparse_kind], np.int8))
            if hour >= 0:
                self.offered[hour, -1] += n
        if not pieces["fire"]:
            return {"fire": np.empty(0, np.int64)}
        fire = np.concatenate(pieces["fire"])
        order = np.argsort(fire, kind="stable")
        out = {"fire": fire[order]}
        for k in ("part", "tier", "cls", "job", "kind"):
            out[k] = np.concatenate(pieces[k])[order]
        poison = np.zeros(fire.size, bool)
        if self.poison:
            prng = np.random.default_rng([self.seed, STREAM_POISON, _window_key(a)])
            draw = prng.random(fire.size)
            for at_ms, share in self.poison:
                poison |= (out["fire"] >= at_ms) & (draw < share)
        out["poison"] = poison
        self.runs += int(fire.size)
        return out


def _window_key(a_ms: int) -> int:
    """A window's seed entropy: non-negative, the same whatever the lead-in."""
    return a_ms // WINDOW_MS + (1 << 32)


def hourly_job_count(w: dict[str, Any]) -> int:
    """Hourly jobs such that the total rate in the jitter window is the peak rate, while
    the hour still averages runs_per_s: H = J (P - R) / (1 - J / 3600)."""
    j = float(w["peak_spread_s"])
    p, r = float(w["peak_runs_per_s"]), float(w["runs_per_s"])
    if j <= 0 or p <= r:
        return 0
    return int(j * (p - r) / (1 - j / HOUR_S))


def sparse_partition_weights(s: dict[str, Any], n_parts: int) -> np.ndarray:
    """Partition shares of the sparse population, hashed by kit.core from a sample of ids."""
    sample = min(int(s["workload"]["schedules"]), SPARSE_HASH_SAMPLE)
    if sample <= 0:
        return np.full(n_parts, 1.0 / n_parts)
    counts = np.bincount(job_partitions("job-s", sample, n_parts), minlength=n_parts)
    shares: np.ndarray = counts.astype(float) / counts.sum()
    return shares


class TaskDurations:
    """Per-run task durations from each task class's distribution. When every class is
    lognormal (the usual case) one normal draw per run serves all classes at once."""

    def __init__(self, s: dict[str, Any], names: list[str]) -> None:
        self.classes = [s["workload"]["classes"][n] for n in names]
        self.mu = np.zeros(len(names))
        self.sigma = np.zeros(len(names))
        self.all_lognormal = True
        dists = [c.get("dist", "lognormal") for c in self.classes]
        self.any_lognormal = "lognormal" in dists
        self.any_exponential = "exponential" in dists
        for i, c in enumerate(self.classes):
            if c.get("dist", "lognormal") != "lognormal":
                self.all_lognormal = False
                continue
            mean = float(c["mean_s"]) * 1000
            cv = float(c.get("cv", 1.0))
            sigma2 = np.log1p(cv * cv)
            self.mu[i] = np.log(mean) - sigma2 / 2
            self.sigma[i] = np.sqrt(sigma2)

    def draw(self, cls: np.ndarray, normal: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """Durations from each run's own standard normal and uniform number (sim.draws:
        keyed by run and attempt, so a run's duration does not depend on which runs
        were drawn before it)."""
        if self.all_lognormal:
            drawn: np.ndarray = np.exp(self.mu[cls] + self.sigma[cls] * normal)
            return drawn
        out = np.empty(cls.size, np.float64)
        for i, c in enumerate(self.classes):
            idx = np.flatnonzero(cls == i)
            if idx.size == 0:
                continue
            mean = float(c["mean_s"]) * 1000
            dist = c.get("dist", "lognormal")
            if dist == "exponential":
                out[idx] = -mean * np.log(uniform[idx])
            elif dist == "fixed":
                out[idx] = mean
            else:
                out[idx] = np.exp(self.mu[i] + self.sigma[i] * normal[idx])
        return out


def due_per_second(stream: WorkloadStream) -> np.ndarray:
    """Expected runs due in each second of the period, from the templates' fire times
    (kit.core) with each fire's jobs spread evenly over its jitter window, plus the
    sparse rate: the offered load, without hashing a job or simulating anything. Used
    to find a period's worst windows before simulating them."""
    n = max(1, -(-stream.duration_ms // 1000))
    diff = np.zeros(n + 1)
    for t in stream.templates:
        first = -max(t.jitter_ms - 1, 0)
        for f in stream.nominal_between(t, first, stream.duration_ms).tolist():
            span = max(t.jitter_ms, 1)
            a, b = f / 1000, (f + span) / 1000
            lo, hi = max(0, int(np.floor(a))), min(n, int(np.ceil(b)))
            if hi <= lo:
                continue
            # the fire's jobs spread evenly over the whole seconds it touches (a window
            # shorter than a second: its jobs in that second; tests/sim/test_mix.py)
            rate = t.jobs / (hi - lo)
            diff[lo] += rate
            diff[hi] -= rate
        t.nominal = np.empty(0, np.int64)  # a later stream starts over
        t.computed_to_ms = None
    out = np.cumsum(diff[:n])
    return out + stream.sparse_rate


def busiest_windows(per_s: np.ndarray, window_s: int, k: int) -> list[tuple[int, float]]:
    """Up to k non-overlapping windows of window_s seconds with the most runs due:
    (start second, runs due in the window), busiest first."""
    w = max(1, min(int(window_s), per_s.size))
    sums = np.convolve(per_s, np.ones(w), "valid")
    out: list[tuple[int, float]] = []
    taken = np.zeros(sums.size, bool)
    for _ in range(k):
        masked = np.where(taken, -np.inf, sums)
        i = int(np.argmax(masked))
        if not np.isfinite(masked[i]) or masked[i] <= 0:
            break
        out.append((i, float(sums[i])))
        taken[max(0, i - w + 1) : i + w] = True
    return out
