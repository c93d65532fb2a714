from __future__ import annotations

import time
from typing import Any

import pytest

from sim.metrics import summarise
from sim.model import Model
from sim.scenario import load_profile, load_scenario


def simulate(
    name: str, *overrides: str, seed: int = 1, keep_samples: bool = False
) -> tuple[Model, dict[str, Any]]:
    s = load_scenario(name, list(overrides))
    m = Model(s, load_profile(None, s["profile"]), seed, keep_samples=keep_samples)
    t0 = time.perf_counter()
    m.run()
    return m, summarise(m, time.perf_counter() - t0)


# a short top of the hour: 20 s of lead-in, the peak, then 60 s
PEAK = ("duration_s=80", "peak_at_s=20")


@pytest.fixture
def sim():
    return simulate
