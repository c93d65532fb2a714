"""`python -m kit.cli` behaves as the `cronfleet` entry point: bad input is one line on
stderr and exit code 2, never a traceback (issue 7, item 22)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "argv",
    [
        ["next-fires", "H * * * *"],
        ["next-fires", "0 * * * *", "--tz", "Mars/Olympus"],
        ["next-fires", "0 * * * *", "--count", "0"],
    ],
)
def test_python_dash_m_bad_input_is_one_line_exit_2(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("cronfleet next-fires: ")
    assert "Traceback" not in done.stderr
