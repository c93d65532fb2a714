"""Hypothesis on a shared, noisy 2-core machine: no per-example deadline (a property test
says what is true, not how fast; speed is claimed by benchmarks), and the derandomised
database so a CI run is repeatable. `HYPOTHESIS_PROFILE=dev` restores hypothesis' own
defaults when hunting for new counterexamples."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "cronfleet",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", settings.default)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "cronfleet"))
