"""`pip install cronfleet` leaves out the model's and the drills' libraries; their
commands then say which extra to install instead of failing with a traceback."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from kit import cli


def test_a_command_whose_extra_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "simpy" else real(name, *a)
    )
    assert cli.main(["sim", "top-of-hour", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'cronfleet[sim]'" in err and "simpy" in err
    assert cli.main(["chaos", "list"]) == 2
    assert "pip install 'cronfleet[chaos]'" in capsys.readouterr().err


def test_with_the_extra_the_command_is_the_real_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["chaos", "list"]) == 0
    assert "worker-kill" in capsys.readouterr().out


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def _requirements(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions an extra brings, self-references (`cronfleet[sim]`) followed."""
    found: set[str] = set()
    for requirement in extras[extra]:
        name = _name(requirement)
        if name == "cronfleet":
            for inner in re.findall(r"\[(.*)\]", requirement)[0].split(","):
                found |= _requirements(extras, inner.strip())
        else:
            found.add(name)
    return found


def test_every_library_the_cli_checks_for_is_in_its_extra_and_not_in_the_base() -> None:
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    base = {_name(r) for r in project["project"]["dependencies"]}
    for command, (extra, libraries) in cli.EXTRAS.items():
        brought = _requirements(extras, extra)
        for library in libraries:
            assert library in brought, (command, extra, library)
            assert library not in base, (command, library)
    assert {"simpy", "numpy", "matplotlib", "rich", "locust"}.isdisjoint(base)
