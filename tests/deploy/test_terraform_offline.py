"""What can be checked of terraform/ without a provider (none can be downloaded here):
formatting, variables typed, described and validated, READMEs equal to the HCL, the model's
tfvars equal to the top-of-hour example's sizing variables, checkov with no failed check and
every skip reasoned, the alerting rules parsed and naming only metrics the kit exposes."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hcl2
import promql_parser
import pytest
import yaml

from scripts.terraform_docs import BEGIN, END, _default, tables
from tests.deploy.terraform_files import (
    EXAMPLES,
    MODULES,
    ROOT,
    TERRAFORM,
    blocks,
    example_dirs,
    module_dirs,
    render,
    template_variables,
    unquote,
    variable_type,
)

# sim/tfvars.py loaded by path: importing the `sim` package here, at collection, would
# shadow tests/sim (whose conftest pytest imports as `sim.conftest`).
_spec = importlib.util.spec_from_file_location("cronfleet_sim_tfvars", ROOT / "sim" / "tfvars.py")
_tfvars = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tfvars)
SIZING_VARIABLES = _tfvars.SIZING_VARIABLES

ALL_DIRS = [*module_dirs(), *example_dirs()]
IDS = [str(d.relative_to(TERRAFORM)) for d in ALL_DIRS]


def _tofu() -> str:
    """OpenTofu: scripts/test.sh builds it (scripts/build_tofu.sh) and sets CRONFLEET_TOFU."""
    tool = os.environ.get("CRONFLEET_TOFU") or shutil.which("tofu")
    if not tool:
        pytest.fail(
            "OpenTofu is missing: `bash scripts/test.sh` builds it (scripts/build_tofu.sh) "
            "and sets CRONFLEET_TOFU"
        )
    return tool


def _tofu_env() -> dict[str, str]:
    """No user CLI configuration (a missing one is only a warning, but noise)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CLI_CONFIG_FILE"}
    return {**env, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}


def _run_tofu(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_tofu(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=_tofu_env(),
    )


def test_the_modules_and_examples_are_there() -> None:
    names = {d.name for d in module_dirs()}
    assert {"database", "kafka", "fleet", "observability"} <= names
    assert {d.name for d in example_dirs()} == {"small", "top-of-hour"}
    for d in module_dirs():  # HashiCorp's standard module structure
        for f in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
            assert (d / f).exists(), f"{d.name}/{f}"


def test_tofu_is_at_least_what_the_modules_require() -> None:
    out = _run_tofu("version", "-json")
    version = tuple(int(p) for p in json.loads(out.stdout)["terraform_version"].split(".")[:3])
    for d in ALL_DIRS:
        required = re.search(r'required_version = ">= ([0-9.]+)"', (d / "versions.tf").read_text())
        assert required, f"{d}: no required_version"
        assert version >= tuple(int(p) for p in required.group(1).split(".")), d


def test_terraform_fmt() -> None:
    out = _run_tofu("fmt", "-check", "-recursive", "-diff", str(TERRAFORM))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("example", example_dirs(), ids=lambda d: d.name)
def test_tofu_init_loads_every_module_up_to_the_providers(example: Path, tmp_path: Path) -> None:
    """`tofu init -backend=false` in a copy of terraform/: every module it calls is found
    and loaded (HCL, variables, validations: what Terraform 1.0.3 stopped at). The AWS
    provider cannot be downloaded here, so init ends there; where it can (a provider
    mirror), `tofu validate` must pass too."""
    copy = tmp_path / "terraform"
    shutil.copytree(TERRAFORM, copy, ignore=shutil.ignore_patterns(".terraform*"))
    where = copy / "examples" / example.name
    init = _run_tofu("init", "-backend=false", "-input=false", "-no-color", cwd=where, timeout=300)
    called = set(re.findall(r'^module "([a-z_]+)"', (example / "main.tf").read_text(), re.M))
    loaded = set(re.findall(r"^- ([a-z_]+) in \.\./\.\./modules/", init.stdout, re.M))
    assert loaded == called, init.stdout + init.stderr
    if init.returncode != 0:
        errors = re.findall(r"Error: (.+)", init.stderr)
        assert errors == ["Failed to resolve provider packages"], init.stderr
        assert "hashicorp/aws" in init.stderr
        return
    validate = _run_tofu("validate", "-no-color", cwd=where, timeout=300)
    assert validate.returncode == 0, validate.stdout + validate.stderr


@pytest.mark.parametrize("directory", ALL_DIRS, ids=IDS)
def test_every_variable_typed_described_and_validated(directory: Path) -> None:
    variables = blocks(directory, "variable")
    assert variables
    for name, body in variables.items():
        assert variable_type(body), f"{name}: no type"
        assert len(unquote(body.get("description", ""))) > 10, f"{name}: no description"
        # a bad value is possible for anything but a bool
        if variable_type(body) != "bool":
            checks = body.get("validation", [])
            assert checks, f"{name}: no validation block"
            for check in checks:
                assert "var." + name in check["condition"], f"{name}: validation ignores it"
                assert unquote(check["error_message"]).startswith(name), (
                    f"{name}: the error message should name the variable"
                )


@pytest.mark.parametrize("directory", ALL_DIRS, ids=IDS)
def test_readme_lists_exactly_the_variables_and_outputs(directory: Path) -> None:
    text = (directory / "README.md").read_text()
    documented = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert documented == tables(directory), "run `python scripts/terraform_docs.py`"
    inputs = set(re.findall(r"^\| `([a-z0-9_]+)` \| `", documented.split("## Outputs")[0], re.M))
    outputs = set(re.findall(r"^\| `([a-z0-9_]+)` \|", documented.split("## Outputs")[1], re.M))
    assert inputs == set(blocks(directory, "variable"))
    assert outputs == set(blocks(directory, "output"))
    for name, body in blocks(directory, "output").items():
        assert len(unquote(body.get("description", ""))) > 10, f"output {name}: no description"


def test_readme_defaults_render_as_hcl_wrote_them() -> None:
    """python-hcl2 keeps a string's quotes; the tables must not show them twice."""
    assert _default({"default": ['"10.0.0.0/8"']}) == '`["10.0.0.0/8"]`'
    assert _default({"default": {'"a"': '"b"'}}) == '`{"a": "b"}`'
    assert _default({"default": '"x"'}) == "`x`" and _default({"default": '""'}) == '`""`'
    assert _default({"default": [1, True]}) == "`[1, true]`" and _default({}) == "required"
    for d in ALL_DIRS:
        assert '""' not in (d / "README.md").read_text().replace('`""`', ""), d


def _sizing_variables() -> dict[str, str]:
    sizing = blocks(EXAMPLES / "top-of-hour", "variable")
    return {n: variable_type(b) for n, b in sizing.items() if b["__file__"] == "sizing.tf"}


def _check_tfvars(path: Path) -> None:
    values = {k: v for k, v in hcl2.load(path.open()).items() if not k.startswith("__")}
    sizing = _sizing_variables()
    assert set(values) == set(sizing), "emitted variables != the example's sizing.tf"
    for name, value in values.items():
        assert sizing[name] == "number" and isinstance(value, int) and value >= 0, name
    out = _run_tofu("fmt", "-check", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_sizing_variables_are_exactly_what_the_model_writes() -> None:
    assert _sizing_variables() == SIZING_VARIABLES
    _check_tfvars(EXAMPLES / "top-of-hour" / "sizing.auto.tfvars")
    # every other variable of the example is the deploying team's (no sizing hides there)
    others = set(blocks(EXAMPLES / "top-of-hour", "variable")) - set(SIZING_VARIABLES)
    assert others and not others & set(SIZING_VARIABLES)


@pytest.mark.slow
def test_sim_size_emit_tfvars_writes_the_examples_variables(tmp_path: Path) -> None:
    """The real command, on a small workload so that it takes seconds."""
    out = tmp_path / "sizing.auto.tfvars"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.cli",
            "sim",
            "size",
            "--target-p99-start",
            "2s",
            "top-of-hour",
            "--set",
            "workload.schedules=200000",
            "--set",
            "workload.runs_per_s=40",
            "--set",
            "workload.peak_runs_per_s=1000",
            "--set",
            "workload.frequent_jobs=400",
            "--set",
            "fleet.workers=10",
            "--window-s",
            "30",
            "--quiet",
            "--emit-tfvars",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    _check_tfvars(out)


def _checkov() -> str:
    tool = os.environ.get("CRONFLEET_CHECKOV") or shutil.which("checkov")
    if not tool:
        pytest.fail(
            "checkov is missing: `bash scripts/test.sh` installs it (terraform/"
            "checkov-requirements.txt) and sets CRONFLEET_CHECKOV"
        )
    return tool


@pytest.mark.slow
def test_checkov_finds_no_failed_check_and_every_skip_has_a_reason() -> None:
    out = subprocess.run(
        [
            _checkov(),
            "-d",
            str(TERRAFORM),
            "--framework",
            "terraform",
            "--skip-download",
            "--compact",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(out.stdout)
    summary = report["summary"]
    assert summary["parsing_errors"] == 0, out.stdout[-2000:]
    assert summary["resource_count"] > 50 and summary["passed"] > 100
    failed = [
        (c["check_id"], c["resource"], c["file_path"]) for c in report["results"]["failed_checks"]
    ]
    assert summary["failed"] == 0 and not failed, failed
    skips = report["results"].get("skipped_checks", [])
    assert skips, "the skips below are inline and reasoned; none found means none were read"
    for skipped in skips:
        reason = (skipped.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason) > 20, f"{skipped['check_id']} on {skipped['resource']}: no reason"


# -- alarms and scraping -------------------------------------------------------------------


def _templatefile_keys(module: Path, template: str) -> set[str]:
    """Keys of the map passed to templatefile(".../templates/<template>", {...})."""
    text = (module / "main.tf").read_text()
    start = text.index(f'/templates/{template}", {{')
    body = text[start : text.index("})", start)]
    return set(re.findall(r"^\s*([a-z0-9_]+)\s*=", body, re.M))


@pytest.mark.parametrize(
    "template", ["alerts.yml.tftpl", "prometheus.yml.tftpl", "collector.sh.tftpl"]
)
def test_observability_templates_get_every_variable(template: str) -> None:
    module = MODULES / "observability"
    text = (module / "templates" / template).read_text()
    assert template_variables(text) == _templatefile_keys(module, template)


def exposed_metric_names() -> set[str]:
    """Every sample name the kit's services expose, from their own registries (the api's
    and the scheduler's module-level ones, the worker's, reaper's and maintenance's)."""
    from prometheus_client import REGISTRY

    import kit.api.metrics
    import kit.scheduler.metrics  # noqa: F401
    from kit.maintenance.service import MaintenanceMetrics
    from kit.reaper.reaper import ReaperMetrics
    from kit.worker.worker import WorkerMetrics

    names = {"up"}  # Prometheus adds it to every target
    registries = (
        REGISTRY,
        WorkerMetrics().registry,
        ReaperMetrics().registry,
        MaintenanceMetrics().registry,
    )
    for registry in registries:
        for family in registry.collect():
            suffixes = {
                "counter": ["_total"],
                "histogram": ["_bucket", "_sum", "_count"],
                "gauge": [""],
            }.get(family.type, [""])
            names |= {family.name + s for s in suffixes}
    return names


def test_alerts_parse_and_name_only_metrics_the_kit_exposes() -> None:
    module = MODULES / "observability"
    rules = yaml.safe_load(
        render(
            (module / "templates/alerts.yml.tftpl").read_text(),
            {
                "fleet": "cronfleet-test",
                "partitions": 1024,
                "start_lag_p99_s": 2,
                "consumer_lag_max": 50000,
                "dead_letters_max": 100,
                "runbooks": "docs/runbooks.md",
            },
        )
    )
    exposed = exposed_metric_names()
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    for name, rule in alerts.items():
        promql_parser.parse(rule["expr"])  # raises on a syntax error
        used = set(re.findall(r"\b(cronfleet_[a-z_]+|up)\b(?=\s*[{\[])", rule["expr"]))
        assert used, f"{name}: names no metric"
        assert used <= exposed, f"{name}: {used - exposed} not exposed by the kit"
        assert 'fleet="cronfleet-test"' in rule["expr"], f"{name}: not limited to the fleet"
    # what the issue asks alarms on: p99 start lag, unowned partitions, dead letters, lag
    wanted = {
        "cronfleet_worker_start_lag_seconds_bucket",
        "cronfleet_partitions_unowned",
        "cronfleet_dead_letters_waiting",
        "cronfleet_worker_consumer_lag",
    }
    assert wanted <= {
        m for r in alerts.values() for m in re.findall(r"cronfleet_[a-z_]+", r["expr"])
    }


def test_collector_finds_the_fleet_by_the_tags_the_fleet_sets() -> None:
    module = MODULES / "observability"
    config = yaml.safe_load(
        render(
            (module / "templates/prometheus.yml.tftpl").read_text(),
            {
                "fleet": "cronfleet-test",
                "region": "eu-west-1",
                "metrics_port": 9100,
                "api_port": 8080,
                "remote_write_url": "https://aps.example/api/v1/remote_write",
            },
        )
    )
    (job,) = config["scrape_configs"]
    sd = job["ec2_sd_configs"][0]
    assert sd["port"] == 9100
    assert {"name": "tag:cronfleet:fleet", "values": ["cronfleet-test"]} in sd["filters"]
    relabels = {tuple(r["source_labels"]): r for r in job["relabel_configs"]}
    assert relabels[("__meta_ec2_tag_cronfleet_role",)]["target_label"] == "role"
    api = relabels[("__meta_ec2_tag_cronfleet_role", "__meta_ec2_private_ip")]
    assert api["regex"] == "api;(.+)" and api["replacement"] == "$1:8080"
    fleet_main = (MODULES / "fleet" / "main.tf").read_text()
    assert '"cronfleet:fleet" = var.name' in fleet_main
    assert '"cronfleet:role" = each.key' in fleet_main
    assert config["global"]["external_labels"]["fleet"] == "cronfleet-test"


def test_the_kit_tiers_are_the_modules_tiers() -> None:
    from kit.core.dispatch import PRIORITY_TIERS

    for module in ("kafka", "fleet"):
        default = blocks(MODULES / module, "variable")["tiers"]["default"]
        assert [unquote(t) for t in default] == list(PRIORITY_TIERS)


@pytest.mark.parametrize("example", example_dirs(), ids=lambda d: d.name)
def test_each_example_says_how_to_reach_its_internal_api(example: Path) -> None:
    """The way in: an internal load balancer open to the VPC and the networks the team
    lists (never the internet), a Session Manager tunnel for everyone else, documented."""
    (fleet,) = [m['"fleet"'] for m in hcl2.load((example / "main.tf").open())["module"]
                if '"fleet"' in m]  # fmt: skip
    assert fleet["api_internal"] is True
    assert "module.network.vpc_cidr_block" in fleet["api_ingress_cidrs"]
    cidrs = blocks(example, "variable")["api_ingress_cidrs"]
    assert cidrs["default"] == []
    assert '"0.0.0.0/0"' in cidrs["validation"][0]["condition"]
    tunnel = blocks(example, "output")["api_tunnel"]["value"]
    assert "AWS-StartPortForwardingSessionToRemoteHost" in tunnel
    assert 'module.fleet.autoscaling_group_names["api"]' in tunnel
    assert "## Reaching the API" in (example / "README.md").read_text()


def test_the_examples_sizing_is_the_models_answer_for_its_mix_at_every_peak() -> None:
    """sizing.auto.tfvars is what `sim size --mix schedules.toml` wrote, and model/size.txt
    (that run's every candidate) shows the recommended fleet meeting the target at the
    day's midnight and at its top of the hour; model/deployed-fleet.txt shows the fleet
    with its headroom under the target through both kinds of peak."""
    example = EXAMPLES / "top-of-hour"
    tfvars = (example / "sizing.auto.tfvars").read_text()
    header = tfvars.splitlines()[0]
    assert "--mix terraform/examples/top-of-hour/schedules.toml" in header
    assert "--target-p99-start 2s" in header
    size = hcl2.loads(tfvars)
    fleet = (size["scheduler_nodes"], size["workers"], size["partitions"])
    line = re.compile(
        r"nodes=\s*(\d+) workers=\s*(\d+) partitions=\s*(\d+)\s+(.+?)\s+"
        r"p99 start\s+([\d.]+) s\s+(meets|misses)"
    )
    runs = [m.groups() for m in line.finditer((example / "model" / "size.txt").read_text())]
    final = {w: (float(p99), verdict) for n, wk, p, w, p99, verdict in runs
             if (int(n), int(wk), int(p)) == fleet}  # fmt: skip
    assert any(w.endswith("00:00:00 UTC") for w in final), final  # midnight
    assert any(w.endswith("(top of hour)") for w in final), final
    assert all(verdict == "meets" and p99 <= 2.0 for p99, verdict in final.values()), final
    deployed = (example / "model" / "deployed-fleet.txt").read_text()
    assert f"fleet.nodes={fleet[0] + size['scheduler_nodes_headroom']}" in deployed
    assert f"fleet.workers={fleet[1] + size['workers_headroom']}" in deployed
    p99s = [float(v) for v in re.findall(r"p99 start lag, peak window[^\n]*?([\d.]+) s", deployed)]
    assert len(p99s) == 3 and max(p99s) <= 2.0, p99s
