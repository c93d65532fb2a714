"""`cronfleet chaos soak`'s options refused before anything starts, each naming itself."""

from __future__ import annotations

import pytest

from kit.cli import main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--hours", "0", "--rate", "10"], "--hours"),
        (["--hours", "1", "--rate", "0"], "--rate"),
        (["--hours", "1", "--rate", "10", "--fault-every", "10"], "--fault-every"),
        # a soak of 3 minutes with a fault an hour: it ran the hour, waiting for the fault
        (["--hours", "0.05", "--rate", "10", "--fault-every", "3600"], "--fault-every"),
    ],
)
def test_a_soak_refuses_options_that_cannot_be_run(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    assert main(["chaos", "soak", *argv, "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cronfleet chaos: {named}: "), err
