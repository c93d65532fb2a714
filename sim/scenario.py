"""Scenarios are data: a TOML file in sim/scenarios/ merged over the defaults below,
then `--set key=value` overrides typed by the value they replace.

The merged mapping is the "scenario as run" stored in every result, so a result can
always be replayed with the seed printed next to it.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from kit.core import defaults
from kit.core.errors import FieldError
from kit.core.schedule import ScheduleKind, parse_cron, parse_timezone

SCENARIO_DIR = Path(__file__).parent / "scenarios"
PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = PROFILE_DIR / "default.toml"


class ScenarioError(ValueError):
    """A scenario name, file or override is wrong; the message names the key."""


DEFAULTS: dict[str, Any] = {
    "name": "custom",
    "description": "",
    "start": "2026-03-02T00:00:00Z",  # the instant simulated time 0 stands for (UTC)
    "lead_in_s": 0,  # simulated before the start (warm fleet), runs audited, not timed
    "duration_s": 3600,  # simulated time with workload arriving
    "peak_at_s": 60,  # where the top of the hour falls inside the simulated window
    "drain_s": 900,  # liveness phase: faults healed, no new work, until drained
    "workload": {
        # "cron" (cron classes over time zones), "cohort" (the top of the hour: hourly,
        # every-minute and sparse jobs) or "poisson" (M/M/c checks)
        "arrivals": "cohort",
        "schedules": 10_000_000,
        "cron": [],  # cron only: [{name, cron, share, jitter_s}], shares of the schedules
        "zones": {},  # cron only: {IANA zone: share of the schedules}
        "runs_per_s": 2000.0,  # average over an hour, peak included
        "peak_runs_per_s": 50000.0,  # total rate in the top-of-hour window
        "peak_spread_s": 10,  # jitter window of the hourly jobs (kit.core.jitter)
        "frequent_jobs": 20000,  # every-minute jobs (these can miss several fires)
        # cohort and poisson: each population's schedule kind (kit.core.schedule.
        # ScheduleKind: cron, interval, one_off), what a scan charges per fire of it (the
        # profile's per-kind keys). The fire times are the population's whatever its kind,
        # except that one-off hourly jobs fire once (at the peak), not every hour; every-
        # minute jobs are cron or interval. A cron population's jobs are cron.
        "schedule_kind": {"hourly": "cron", "frequent": "cron", "sparse": "cron"},
        "arrival_rate": 0.0,  # poisson only
        "tiers": {"critical": 0.05, "high": 0.15, "normal": 0.6, "low": 0.2},
        "misfire": "run_once",
        "misfire_deadline_s": 60,
        "overlap": "allow",
        "retry": {"max_attempts": 3, "base_s": 1.0, "cap_s": 300.0, "jitter": "full"},
        "classes": {
            "http": {"share": 0.8, "dist": "lognormal", "mean_s": 0.3, "cv": 1.0, "fail_p": 0.01},
            "batch": {"share": 0.18, "dist": "lognormal", "mean_s": 2.0, "cv": 1.0, "fail_p": 0.01},
            "report": {
                "share": 0.02,
                "dist": "lognormal",
                "mean_s": 20.0,
                "cv": 0.5,
                "fail_p": 0.0,
            },
        },
    },
    "fleet": {
        "nodes": 8,
        "partitions": 1024,
        "workers": 400,
        "concurrency": 256,
        "db_connections": 40,
        "kafka_partitions": 1024,  # per tier topic; caps the consumers that get work
    },
    "leases": {
        # the kit's own defaults (kit.core.defaults), in seconds
        "partition_ttl_s": defaults.PARTITION_LEASE_TTL_MS / 1000,
        "renew_s": defaults.PARTITION_LEASE_RENEW_MS / 1000,
        "run_ttl_s": defaults.RUN_LEASE_TTL_MS / 1000,
        "heartbeat_s": defaults.RUN_HEARTBEAT_MS / 1000,
        "scan_ahead_s": -1.0,  # < 0: the core's default (kit.core.dispatch.scan_window)
        "unclaimed_grace_s": defaults.UNCLAIMED_GRACE_MS / 1000,
        "scan_batch_rows": defaults.SCAN_BATCH_ROWS,  # most due rows one scan takes
    },
    "reaper": {"period_s": defaults.REAPER_PERIOD_MS / 1000},
    "history": {"retention_days": 30},  # run history kept (for the size it takes)
    "profile": {},  # overrides of the calibration profile's numbers
    "faults": [],
}

# keys of the mmc shorthand (issue 4): they map onto the full scenario
MMC_KEYS = ("arrival_rate", "mean_service_s", "workers", "duration_s")


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_scenario_file(name_or_path: str) -> dict[str, Any]:
    path = Path(name_or_path)
    if not path.suffix:
        path = SCENARIO_DIR / f"{name_or_path}.toml"
    if not path.exists():
        names = ", ".join(scenario_names())
        raise ScenarioError(f"scenario: no such scenario {name_or_path!r} (known: {names})")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"scenario: {path}: {exc}") from None


def _typed(raw: str, current: Any, key: str) -> Any:
    """Parse an override as the type of the value it replaces."""
    try:
        if isinstance(current, bool):
            low = raw.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return low in ("true", "1", "yes")
        if isinstance(current, int):
            return int(float(raw)) if float(raw).is_integer() else int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, str):
            return raw
    except ValueError:
        kind = type(current).__name__
        raise ScenarioError(f"{key}: expected {kind}, got {raw!r}") from None
    raise ScenarioError(f"{key}: is a {type(current).__name__}, set its fields one by one")


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`a.b=1`, `faults.0.at_s=58`: the key must exist (typos fail, they do not add)."""
    out = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ScenarioError(f"--set: expected key=value, got {item!r}")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        node: Any = out
        for part in parts[:-1]:
            node = _child(node, part, key)
        last = parts[-1]
        current = _child(node, last, key)
        value = _typed(raw.strip(), current, key)
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return out


def _child(node: Any, part: str, key: str) -> Any:
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise ScenarioError(f"{key}: no item {part} (the list has {len(node)})")
        return node[int(part)]
    if not isinstance(node, dict) or part not in node:
        raise ScenarioError(f"{key}: unknown key")
    return node[part]


def expand_mmc(data: dict[str, Any]) -> dict[str, Any]:
    """The mmc shorthand: Poisson arrivals straight into `workers` exponential servers,
    every latency of the path set to zero so the queue alone is measured."""
    if data.get("kind") != "mmc":
        return data
    rate = float(data["arrival_rate"])
    mean = float(data["mean_service_s"])
    out = deep_merge(
        data,
        {
            "peak_at_s": 0,
            "drain_s": int(data.get("drain_s", 600)),
            "workload": {
                "arrivals": "poisson",
                "arrival_rate": rate,
                "frequent_jobs": 0,
                "tiers": {"critical": 0.0, "high": 0.0, "normal": 1.0, "low": 0.0},
                "classes": {
                    "exp": {
                        "share": 1.0,
                        "dist": "exponential",
                        "mean_s": mean,
                        "cv": 1.0,
                        "fail_p": 0.0,
                    },
                },
            },
            "fleet": {
                "workers": int(data["workers"]),
                "concurrency": 1,
                "nodes": 1,
                "partitions": 64,
                "kafka_partitions": 1_000_000,
            },
            "profile": {key: 0.0 for key in ZERO_LATENCY_KEYS},
        },
    )
    out["workload"]["classes"] = {"exp": out["workload"]["classes"]["exp"]}
    return out


ZERO_LATENCY_KEYS = (
    "kafka_publish_per_msg_s",
    "kafka_publish_latency_s",
    "kafka_consume_latency_s",
    "claim_s",
    "finish_s",
)


def load_scenario(name_or_path: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The scenario as run: defaults <- file <- overrides (mmc shorthand expanded last,
    so `--set arrival_rate=...` works on it)."""
    raw = read_scenario_file(name_or_path)
    merged = deep_merge(DEFAULTS, raw)
    merged = apply_overrides(merged, overrides)
    merged = expand_mmc(merged)
    merged["workload"]["classes"] = _only_file_classes(raw, merged)
    validate(merged)
    return merged


def _only_file_classes(raw: Mapping[str, Any], merged: dict[str, Any]) -> dict[str, Any]:
    """A scenario that lists its own job classes replaces the default ones."""
    file_classes = raw.get("workload", {}).get("classes")
    classes: dict[str, Any] = merged["workload"]["classes"]
    if file_classes and merged.get("kind") != "mmc":
        return {k: v for k, v in classes.items() if k in file_classes}
    return classes


def validate(s: Mapping[str, Any]) -> None:
    fleet = s["fleet"]
    for key in ("nodes", "partitions", "workers", "concurrency", "db_connections"):
        if int(fleet[key]) < 1:
            raise ScenarioError(f"fleet.{key}: must be at least 1")
    if fleet["nodes"] > fleet["partitions"]:
        raise ScenarioError("fleet.nodes: more nodes than partitions leaves nodes idle")
    if s["duration_s"] <= 0:
        raise ScenarioError("duration_s: must be positive")
    if not 0 <= s["lead_in_s"] <= 3600:
        raise ScenarioError("lead_in_s: must be between 0 and 3600")
    shares = sum(float(c["share"]) for c in s["workload"]["classes"].values())
    if abs(shares - 1.0) > 1e-6:
        raise ScenarioError(f"workload.classes: shares must add up to 1 (they add to {shares})")
    tiers = s["workload"]["tiers"]
    if abs(sum(tiers.values()) - 1.0) > 1e-6:
        raise ScenarioError("workload.tiers: shares must add up to 1")
    if s["workload"]["arrivals"] not in ("cron", "cohort", "poisson"):
        raise ScenarioError("workload.arrivals: must be cron, cohort or poisson")
    if s["workload"]["arrivals"] == "cron":
        _validate_cron(s["workload"])
    _validate_schedule_kinds(s["workload"]["schedule_kind"])
    try:
        start = datetime.fromisoformat(str(s["start"]).replace("Z", "+00:00"))
    except ValueError:
        raise ScenarioError(f"start: {s['start']!r} is not an ISO 8601 time") from None
    if start.tzinfo is None:
        raise ScenarioError("start: needs a UTC offset or 'Z'")


def _validate_cron(w: Mapping[str, Any]) -> None:
    """The cron population: valid expressions and zones (kit.core's own parsers),
    shares that add up, jitter within the kit's limit. A class may carry its own `zones`
    (a team's mix, sim.mix), or be an interval (`every_s`, optional `anchor`)."""
    classes = w["cron"]
    if not classes:
        raise ScenarioError("workload.cron: a cron population needs at least one class")
    for i, c in enumerate(classes):
        for key in ("name", "share", "jitter_s"):
            if key not in c:
                raise ScenarioError(f"workload.cron.{i}.{key}: missing")
        if ("cron" in c) == ("every_s" in c):
            raise ScenarioError(f"workload.cron.{i}: exactly one of cron and every_s")
        if "cron" in c:
            try:
                parse_cron(c["cron"], f"workload.cron.{i}.cron")
            except FieldError as exc:
                raise ScenarioError(f"{exc.field}: {exc.reason}") from None
        else:
            _validate_interval(c, f"workload.cron.{i}")
        if not 0 <= float(c["jitter_s"]) <= 3600:
            raise ScenarioError(f"workload.cron.{i}.jitter_s: must be between 0 and 3600")
        if "zones" in c:
            _validate_zones(c["zones"], f"workload.cron.{i}.zones")
        elif "cron" in c and not w["zones"]:
            raise ScenarioError("workload.zones: a cron population needs at least one zone")
    total = sum(float(c["share"]) for c in classes)
    if abs(total - 1.0) > 1e-6:
        raise ScenarioError(f"workload.cron: shares must add up to 1 (they add to {total})")
    if w["zones"]:
        _validate_zones(w["zones"], "workload.zones")


def _validate_zones(zones: Mapping[str, Any], where: str) -> None:
    if not zones:
        raise ScenarioError(f"{where}: at least one zone")
    for zone in zones:
        try:
            parse_timezone(zone, f"{where}.{zone}")
        except FieldError as exc:
            raise ScenarioError(f"{exc.field}: {exc.reason}") from None
    if abs(sum(float(v) for v in zones.values()) - 1.0) > 1e-6:
        raise ScenarioError(f"{where}: shares must add up to 1")


def _validate_interval(c: Mapping[str, Any], where: str) -> None:
    if int(c["every_s"]) < 1:
        raise ScenarioError(f"{where}.every_s: at least 1 second")
    anchor = c.get("anchor")
    if anchor is not None:
        try:
            at = datetime.fromisoformat(str(anchor).replace("Z", "+00:00"))
        except ValueError:
            raise ScenarioError(f"{where}.anchor: {anchor!r} is not an ISO 8601 time") from None
        if at.tzinfo is None:
            raise ScenarioError(f"{where}.anchor: needs a UTC offset or 'Z'")


SCHEDULE_KINDS = tuple(k.value for k in ScheduleKind)
POPULATIONS = ("hourly", "frequent", "sparse")


def _validate_schedule_kinds(kinds: Mapping[str, Any]) -> None:
    for population in POPULATIONS:
        if population not in kinds:
            raise ScenarioError(f"workload.schedule_kind.{population}: missing")
    for population, kind in kinds.items():
        if population not in POPULATIONS:
            raise ScenarioError(
                f"workload.schedule_kind.{population}: unknown population "
                f"(known: {', '.join(POPULATIONS)})"
            )
        if kind not in SCHEDULE_KINDS:
            raise ScenarioError(
                f"workload.schedule_kind.{population}: {kind!r} is not a schedule kind "
                f"(must be one of {', '.join(SCHEDULE_KINDS)})"
            )
    if kinds["frequent"] == ScheduleKind.one_off:
        raise ScenarioError(
            "workload.schedule_kind.frequent: every-minute jobs fire every minute: "
            "cron or interval, not one_off"
        )


def scan_cost_keys(kind: str) -> tuple[str, str, str]:
    """The profile's keys of what a scan costs per fire of a schedule kind: the scheduler
    node's CPU, the database's trigger advance, the run insert (written by `cronfleet
    calibrate`, charged by sim/model.py's scan)."""
    return (
        f"sched_scan_cpu_per_fire_{kind}_s",
        f"db_scan_advance_per_row_{kind}_s",
        f"db_run_insert_per_row_{kind}_s",
    )


# keys of profiles before the per-kind scan costs (one cost for every fire)
_BEFORE_KINDS = (
    "sched_scan_cpu_per_fire_s",
    "db_scan_advance_per_row_s",
    "db_run_insert_per_row_s",
)


def load_profile(path: str | Path | None, overrides: Mapping[str, Any]) -> dict[str, float]:
    """The calibration profile (service times in seconds, run row bytes), with the
    scenario's overrides."""
    p = Path(path) if path else DEFAULT_PROFILE
    if not p.exists():
        raise ScenarioError(f"profile: no such file {p}")
    data = tomllib.loads(p.read_text())
    numbers = {k: float(v) for k, v in data.get("service_times", {}).items()}
    # bytes a run row takes in the run history (absent from older profiles)
    numbers.update({k: float(v) for k, v in data.get("history", {}).items()})
    missing = [k for kind in SCHEDULE_KINDS for k in scan_cost_keys(kind) if k not in numbers]
    if missing:
        older = [k for k in _BEFORE_KINDS if k in numbers]
        why = f" (it has {', '.join(older)}: one cost for every fire)" if older else ""
        raise ScenarioError(
            f"profile: {p} has no {', '.join(missing)}{why}; re-calibrate: "
            "cronfleet calibrate (docs/calibration.md)"
        )
    for key, value in overrides.items():
        if key not in numbers:
            raise ScenarioError(f"profile.{key}: unknown service time")
        numbers[key] = float(value)
    return numbers
