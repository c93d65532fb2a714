"""`cronfleet calibrate`'s run-history measurement on the real PostgreSQL: the kit's own
runs table, written through a run's life, gives the bytes per row the model's retention
size uses."""

from __future__ import annotations

import tomllib

from sim.calibrate import measure_run_rows, write_profile


def test_run_row_bytes_measured_on_the_kits_runs_table(db_url, tmp_path):
    url = db_url.replace("postgresql+psycopg://", "postgresql://")
    m = measure_run_rows(url, 3_000)
    # a finished run carries two uuids, times, a token history and five indexes: more than
    # 100 bytes packed; its updates' old versions make the table as written larger still
    assert 100 < m["run_row_compact_bytes"] < m["run_row_bytes"] < 5_000
    assert m["run_row_heap_bytes"] < m["run_row_bytes"]
    profile = tmp_path / "p.toml"
    write_profile(profile, {"claim_s": 0.001}, {"history": "a note"}, m)
    read = tomllib.loads(profile.read_text())  # sim.scenario.load_profile reads [history]
    assert read["history"]["run_row_bytes"] == round(m["run_row_bytes"], 1)
    assert read["service_times"]["claim_s"] == 0.001
    assert read["measured"]["history"] == "a note"
