"""What on-call gets with a deployed fleet: a runbook section per alert (docs/runbooks.md,
linked from every alert and alarm) and a Grafana dashboard whose every query parses and
names only metrics the kit exposes, each limited to the chosen fleet."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import promql_parser
import pytest
import yaml

from tests.deploy.terraform_files import MODULES, ROOT, blocks, parse, render, unquote

OBSERVABILITY = MODULES / "observability"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
DASHBOARD = OBSERVABILITY / "dashboards" / "cronfleet.json"
PARTS = ("**What it means.**", "**What to look at.**", "**What to do.**")


def slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub makes it: lower case, punctuation but dashes
    dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections() -> dict[str, str]:
    """docs/runbooks.md's `## ` sections by anchor."""
    text = RUNBOOKS.read_text()
    out = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        out[slug(heading)] = body
    return out


def alerts() -> dict[str, dict[str, Any]]:
    rules = yaml.safe_load(
        render(
            (OBSERVABILITY / "templates/alerts.yml.tftpl").read_text(),
            {
                "fleet": "cronfleet-test",
                "partitions": 1024,
                "start_lag_p99_s": 2,
                "consumer_lag_max": 50000,
                "dead_letters_max": 100,
                "runbooks": "https://git.example/cronfleet/blob/v1/docs/runbooks.md",
            },
        )
    )
    return {r["alert"]: r for g in rules["groups"] for r in g["rules"]}


def cloudwatch_alarms() -> dict[str, str]:
    """Each aws_cloudwatch_metric_alarm of the module: its alarm_description."""
    found = {}
    for resource in parse(OBSERVABILITY / "main.tf").get("resource", []):
        for kind, named in resource.items():
            if unquote(kind) == "aws_cloudwatch_metric_alarm":
                for name, body in named.items():
                    found[unquote(name)] = unquote(body["alarm_description"])
    return found


def test_every_alert_links_to_a_runbook_section_with_its_three_parts() -> None:
    found = sections()
    linked = set()
    for name, rule in alerts().items():
        url = rule["annotations"].get("runbook_url", "")
        base, _, anchor = url.partition("#")
        assert base == "https://git.example/cronfleet/blob/v1/docs/runbooks.md", name
        assert anchor == slug(name), f"{name}: runbook_url names #{anchor}"
        assert anchor in found, f"{name}: no `## {name}` in docs/runbooks.md"
        linked.add(anchor)
    alarms = cloudwatch_alarms()
    assert len(alarms) >= 3, alarms
    for name, description in alarms.items():
        anchor = re.search(r"Runbook: \$\{var\.runbooks_url\}#([\w-]+)", description)
        assert anchor, f"alarm {name}: no runbook link in its description"
        assert anchor.group(1) in found, f"alarm {name}: #{anchor.group(1)} is no section"
        linked.add(anchor.group(1))
    assert linked == set(found), f"sections no alert links to: {set(found) - linked}"
    for anchor, body in found.items():
        for part in PARTS:
            assert part in body, f"#{anchor}: no {part}"
    assert blocks(OBSERVABILITY, "variable")["runbooks_url"]


def _selectors(expr: Any) -> Iterator[Any]:
    """Every vector selector of a parsed PromQL expression."""
    if isinstance(expr, promql_parser.VectorSelector):
        yield expr
    elif isinstance(expr, promql_parser.MatrixSelector):
        yield expr.vector_selector
    elif isinstance(expr, promql_parser.BinaryExpr):
        yield from _selectors(expr.lhs)
        yield from _selectors(expr.rhs)
    elif isinstance(expr, promql_parser.Call):
        for arg in expr.args:
            yield from _selectors(arg)
    elif isinstance(
        expr,
        promql_parser.AggregateExpr
        | promql_parser.ParenExpr
        | promql_parser.UnaryExpr
        | promql_parser.SubqueryExpr,
    ):
        yield from _selectors(expr.expr)


def _panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["templating"]["list"][1]["name"] == "fleet"
    return [p for p in dashboard["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("panel", _panels(), ids=lambda p: p["title"])
def test_dashboard_panel_queries_parse_and_name_only_exposed_metrics(panel, exposed) -> None:
    assert panel["targets"], "a panel with no query"
    for target in panel["targets"]:
        parsed = promql_parser.parse(target["expr"])  # raises on a syntax error
        selectors = list(_selectors(parsed))
        assert selectors, f"{target['expr']}: names no metric"
        for sel in selectors:
            assert sel.name in exposed, f"{sel.name}: not a metric the kit exposes"
            fleet = [m for m in sel.matchers.matchers if m.name == "fleet"]
            assert [m.value for m in fleet] == ["$fleet"], f"{sel.name}: not limited to $fleet"


def test_dashboard_shows_what_on_call_needs(exposed) -> None:
    used = {
        sel.name
        for panel in _panels()
        for target in panel["targets"]
        for sel in _selectors(promql_parser.parse(target["expr"]))
    }
    wanted = {
        "cronfleet_worker_start_lag_seconds_bucket",  # start lag
        "cronfleet_worker_consumer_lag",  # backlog per tier
        "cronfleet_partitions_owned",  # partitions owned
        "cronfleet_partitions_unowned",
        "cronfleet_dead_letters_waiting",  # dead letters
        "cronfleet_api_requests_total",  # API errors
        "cronfleet_scan_duration_seconds_bucket",  # the database as the scan sees it
        "cronfleet_publish_failed_total",  # the broker as the publisher sees it
        "up",
    }
    assert wanted <= used, wanted - used
    assert used <= exposed
    output = blocks(OBSERVABILITY, "output")["grafana_dashboard"]
    assert "dashboards/cronfleet.json" in output["value"]


@pytest.fixture(scope="module")
def exposed() -> set[str]:
    from tests.deploy.test_terraform_offline import exposed_metric_names

    return exposed_metric_names()
