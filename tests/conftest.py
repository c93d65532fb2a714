"""Hypothesis on a shared, noisy 2-core machine: no per-example deadline (a property test
says what is true, not how fast; speed is claimed by benchmarks), and the derandomised
database so a CI run is repeatable. `HYPOTHESIS_PROFILE=dev` restores hypothesis' own
defaults when hunting for new counterexamples."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "cronfleet",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", settings.default)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "cronfleet"))

# Mutation runs (scripts/mutation.sh sets CRONFLEET_HYPOTHESIS_MAX_EXAMPLES): thousands of
# mutants each re-run the property tests that reach them, so every property is capped at
# that many examples there (docs/mutation.md says so). Never set in CI.
_cap = int(os.environ.get("CRONFLEET_HYPOTHESIS_MAX_EXAMPLES", "0"))
if _cap > 0:
    _settings_init = settings.__init__

    def _capped_init(self, parent=None, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(kwargs.get("max_examples"), int):
            kwargs["max_examples"] = min(kwargs["max_examples"], _cap)
        _settings_init(self, parent, **kwargs)

    settings.__init__ = _capped_init  # type: ignore[method-assign]
    settings.register_profile("mutation", settings.get_profile("cronfleet"), max_examples=_cap)
    settings.load_profile("mutation")


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """In a mutmut run (`MUTANT_UNDER_TEST` set), run a mutant's tests fastest first.

    mutmut hands each mutant the tests that reach it as an unordered set and stops at the
    first failure (`-x`), so a mutant a 0.01 s unit test kills may otherwise first wait
    for an 11 s property. The order comes from the durations mutmut recorded in its stats
    run (`mutmut-stats.json` in the cwd, which is `mutants/`); without them, unit tests
    before property tests. Which tests run is unchanged, only their order."""
    if not os.environ.get("MUTANT_UNDER_TEST"):
        return
    import json

    try:
        with open("mutmut-stats.json") as f:
            durations = json.load(f).get("duration_by_test", {})
    except (OSError, ValueError):
        durations = {}
    items.sort(
        key=lambda item: (
            durations.get(item.nodeid, float("inf")),
            "/property/" in item.nodeid,
        )
    )


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any user may write (mode 0777), for the files a test's command leaves
    behind when it runs as a `run_as` user: pytest's tmp_path is its own user's alone."""
    path = Path(tempfile.mkdtemp(prefix="cronfleet-test-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
