"""chaos.trend: a resource's slope with its interval, and the verdict 'flat'."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chaos.trend import t_quantile_975, trend


def test_the_t_quantile_matches_the_table() -> None:
    for df, table in ((5, 2.5706), (10, 2.2281), (30, 2.0423), (1000, 1.9623)):
        assert abs(t_quantile_975(df) - table) < 3e-3


def test_a_level_with_noise_is_flat_and_a_leak_is_not() -> None:
    rng = np.random.default_rng(7)
    t = np.arange(0, 7200, 10.0)  # two hours, a sample every 10 s
    level = 200 + rng.normal(0, 5, len(t))
    flat = trend(t, level)
    assert flat is not None and flat.flat and flat.ci_low_per_h <= 0 <= flat.ci_high_per_h
    leak = trend(t, level + t / 3600 * 20)  # 20 MB an hour: 20 % over the soak
    assert leak is not None and not leak.flat
    assert leak.ci_low_per_h < 20 < leak.ci_high_per_h
    assert 15 < (leak.growth_pct or 0) < 25


def test_autocorrelated_samples_widen_the_interval() -> None:
    """A heap that climbs for minutes and drops is not a leak, and its samples are not
    independent: the interval accounts for it (effective sample size below n)."""
    rng = np.random.default_rng(3)
    t = np.arange(0, 7200, 10.0)
    walk = np.zeros(len(t))
    for i in range(1, len(t)):
        walk[i] = 0.95 * walk[i - 1] + rng.normal(0, 2)
    found = trend(t, 100 + walk)
    assert found is not None and found.n_effective < found.n / 5
    assert found.flat


def test_too_few_samples_say_nothing() -> None:
    assert trend([0, 1, 2], [1, 2, 3]) is None


def test_a_soak_judges_the_database_by_what_a_run_costs_not_by_its_history(
    tmp_path: Path,
) -> None:
    """The run history grows by design (kept for days): the database's size is reported,
    not judged; a worker's memory growing as fast fails the soak."""
    import json

    from chaos.soak import write_soak_report

    rng = np.random.default_rng(11)
    with (tmp_path / "samples.jsonl").open("w") as f:
        for i, t in enumerate(np.arange(0, 3600, 10.0)):
            values = {
                "db_size_mb": 100 + i * 2.0,
                "bytes_per_run": 400 + rng.normal(0, 4),
                "rss_mb:w1": 110 + rng.normal(0, 1),
            }
            f.write(json.dumps({"t": t, "v": values}) + "\n")
    summary = write_soak_report(tmp_path, None, 1.0, 500, "cronfleet chaos soak ...")
    assert summary["not_flat"] == []
    assert summary["trends"]["db_size_mb"]["flat"] is False
    assert "| db_size_mb |" in (tmp_path / "soak.md").read_text()
    assert "grows with the history kept" in (tmp_path / "soak.md").read_text()

    with (tmp_path / "samples.jsonl").open("w") as f:
        for i, t in enumerate(np.arange(0, 3600, 10.0)):
            f.write(json.dumps({"t": t, "v": {"rss_mb:w1": 110 + i * 0.2}}) + "\n")
    assert write_soak_report(tmp_path, None, 1.0, 500, "...")["not_flat"] == ["rss_mb:w1"]
