"""The drills' stack keeps its ports out of the kernel's ephemeral range: a client
reconnecting to a killed broker's port can otherwise connect to itself and hold it, and
the broker cannot restart (the kafka-kill drill's stack stayed down that way)."""

from __future__ import annotations

import pytest

from chaos.stack import SAFE_PORTS, StackFailure, ports_outside_ephemeral

EPHEMERAL = (32768, 60999)


def test_ports_inside_the_ephemeral_range_move_below_it() -> None:
    state = {"postgres_port": 55439, "kafka_port": 59106, "kafka_controller_port": 59107}
    chosen = ports_outside_ephemeral(state, EPHEMERAL, lambda port: True)
    assert chosen == SAFE_PORTS
    assert all(port < EPHEMERAL[0] for port in chosen.values())


def test_ports_already_outside_are_kept_and_taken_ones_skipped() -> None:
    state = {"postgres_port": 25000, "kafka_port": 59106}
    taken = {29092, 29093, 29094}
    chosen = ports_outside_ephemeral(state, EPHEMERAL, lambda port: port not in taken)
    assert chosen == {"postgres_port": 25000, "kafka_port": 29095, "kafka_controller_port": 29096}


def test_no_free_port_below_the_range_is_an_error() -> None:
    with pytest.raises(StackFailure, match="below the ephemeral range"):
        ports_outside_ephemeral({}, EPHEMERAL, lambda port: False)
