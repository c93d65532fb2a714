"""A team's schedule mix, read from a file, as the `day` scenario's cron population: what
`cronfleet sim size --mix FILE` sizes a fleet for (docs/sim-day.md, "Sizing for your own
schedules").

Two formats:

- TOML counts, one entry per schedule shape:

      [[schedules]]
      cron = "0 0 * * *"        # or every_s = 300 (an interval, anchor optional)
      timezone = "Europe/Paris" # default UTC
      count = 120000
      jitter_s = 60             # default 0

- JSON, an export of `GET /v1/jobs` (what `curl .../v1/jobs?limit=500` answers, page after
  page): one page `{"jobs": [...]}`, a list of pages, or one page or job per line. Jobs are
  counted by (schedule, time zone, jitter); paused jobs and one-off jobs (`at`) fire no
  daily peak and are left out, and said so.

Every expression and zone is checked by kit.core's parsers (the scenario's validation).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.scenario import ScenarioError, read_scenario_file


@dataclass(frozen=True)
class Shape:
    """Schedules that fire alike: a cron expression in a zone, or an interval."""

    cron: str | None
    timezone: str
    every_s: int | None
    anchor: str | None
    jitter_s: int


@dataclass
class Mix:
    counts: Counter[Shape] = field(default_factory=Counter)
    left_out: Counter[str] = field(default_factory=Counter)  # reason -> jobs

    @property
    def schedules(self) -> int:
        return sum(self.counts.values())


def read_mix(path: str | Path) -> Mix:
    """The mix in `path` (TOML counts, or JSON of `GET /v1/jobs` pages); ScenarioError
    naming the entry and the reason."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ScenarioError(f"mix: cannot read {p}: {exc.strerror}") from None
    mix = _toml_mix(text, p) if p.suffix == ".toml" else _jobs_mix(text, p)
    if mix.schedules == 0:
        raise ScenarioError(f"mix: {p} has no schedule that fires every day")
    return mix


def _toml_mix(text: str, p: Path) -> Mix:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"mix: {p}: {exc}") from None
    entries = data.get("schedules")
    if not isinstance(entries, list) or not entries:
        raise ScenarioError("mix.schedules: a list of [[schedules]] tables is needed")
    mix = Mix()
    for i, entry in enumerate(entries):
        where = f"mix.schedules.{i}"
        if not isinstance(entry, dict):
            raise ScenarioError(f"{where}: a table")
        count = entry.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ScenarioError(f"{where}.count: a whole number of schedules, at least 0")
        mix.counts[_shape(entry, where)] += count
    return mix


def _shape(entry: Mapping[str, Any], where: str) -> Shape:
    cron, every = entry.get("cron"), entry.get("every_s")
    if (cron is None) == (every is None):
        raise ScenarioError(f"{where}: exactly one of cron and every_s")
    if cron is not None and not isinstance(cron, str):
        raise ScenarioError(f"{where}.cron: a cron expression")
    if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
        raise ScenarioError(f"{where}.every_s: a whole number of seconds, at least 1")
    jitter = entry.get("jitter_s", 0)
    if not isinstance(jitter, int) or isinstance(jitter, bool) or not 0 <= jitter <= 3600:
        raise ScenarioError(f"{where}.jitter_s: from 0 to 3600")
    zone = entry.get("timezone") or "UTC"
    anchor = entry.get("anchor")
    if not isinstance(zone, str) or (anchor is not None and not isinstance(anchor, str)):
        raise ScenarioError(f"{where}: timezone and anchor are strings")
    return Shape(cron, zone, every, anchor if every is not None else None, jitter)


def _pages(text: str, p: Path) -> Iterable[Any]:
    try:
        yield json.loads(text)
        return
    except json.JSONDecodeError:
        pass
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ScenarioError(f"mix: {p} line {n}: not JSON: {exc.msg}") from None


def _jobs(doc: Any) -> Iterable[Mapping[str, Any]]:
    if isinstance(doc, list):
        for item in doc:
            yield from _jobs(item)
    elif isinstance(doc, dict) and isinstance(doc.get("jobs"), list):
        yield from doc["jobs"]
    elif isinstance(doc, dict) and "schedule" in doc:
        yield doc
    else:
        raise ScenarioError('mix: expected GET /v1/jobs pages ({"jobs": [...]}) or jobs')


def _jobs_mix(text: str, p: Path) -> Mix:
    mix = Mix()
    for doc in _pages(text, p):
        for job in _jobs(doc):
            where = f"mix: job {job.get('job_id', job.get('name', '?'))}"
            schedule = job.get("schedule")
            if not isinstance(schedule, dict):
                raise ScenarioError(f"{where}: no schedule")
            if job.get("paused"):
                mix.left_out["paused"] += 1
                continue
            if "at" in schedule:
                mix.left_out["one-off (at)"] += 1
                continue
            entry = {**schedule, "jitter_s": job.get("jitter_s", 0) or 0}
            mix.counts[_shape(entry, where)] += 1
    return mix


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def cron_population(mix: Mix) -> dict[str, Any]:
    """The scenario's `workload` table for the mix: one class per (schedule, jitter), its
    share of all schedules, spread over its own zones."""
    groups: dict[tuple[str | None, int | None, str | None, int], Counter[str]] = {}
    for shape, n in mix.counts.items():
        if n:
            key = (shape.cron, shape.every_s, shape.anchor, shape.jitter_s)
            groups.setdefault(key, Counter())[shape.timezone] += n
    total = mix.schedules
    classes = []
    for i, ((cron, every, anchor, jitter), zones) in enumerate(sorted(groups.items(), key=str)):
        n = sum(zones.values())
        name = f"c{i}-{_slug(cron or f'every {every} s')}"
        entry: dict[str, Any] = {
            "name": name,
            "share": n / total,
            "jitter_s": jitter,
            "zones": {z: c / n for z, c in sorted(zones.items())},
        }
        if cron is not None:
            entry["cron"] = cron
        else:
            entry["every_s"] = every
            if anchor:
                entry["anchor"] = anchor
        classes.append(entry)
    return {"arrivals": "cron", "schedules": total, "cron": classes, "zones": {}}


def mix_scenario_text(mix: Mix, source: str, base: str = "day") -> str:
    """A scenario file: the base scenario (a whole day) with the mix as its population."""
    raw = read_scenario_file(base)
    workload = {**raw.get("workload", {}), **cron_population(mix)}
    lines = [
        f'name = "{base}-mix"',
        f"description = {json.dumps(f'The {base} scenario with the schedule mix of {source}.')}",
    ]
    for key, value in raw.items():
        if key not in ("name", "description", "workload") and not isinstance(value, dict):
            lines.append(f"{key} = {_toml(value)}")
    lines += ["", "[workload]"]
    for key, value in workload.items():
        if key not in ("cron", "zones"):
            lines.append(f"{key} = {_toml(value)}")
    lines.append(f"zones = {_toml(workload['zones'])}")
    for c in workload["cron"]:
        lines += ["", "[[workload.cron]]"]
        lines += [f"{k} = {_toml(v)}" for k, v in c.items()]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise ScenarioError(f"mix: cannot write {value!r}")
