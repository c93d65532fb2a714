"""The README is the newcomer's contract: its two commands are what CI runs, and every
setting the kit reads is documented there."""

from __future__ import annotations

from pathlib import Path

from kit.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    block = README.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_readme_opens_with_two_commands_and_ci_runs_the_second() -> None:
    main, test = _commands()
    assert main == "bash scripts/main.sh"
    assert test == "bash scripts/test.sh"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


def test_every_setting_is_documented() -> None:
    missing = [
        f"CRONFLEET_{name.upper()}"
        for name in Settings.model_fields
        if f"CRONFLEET_{name.upper()}" not in README
    ]
    assert not missing, f"README's configuration table lacks {missing}"
