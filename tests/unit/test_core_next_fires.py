import json

from kit.cli import main


def test_next_fires_prints_local_and_utc(capsys):
    rc = main(
        [
            "next-fires",
            "30 2 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2025-03-08T00:00:00Z",
            "--count",
            "3",
        ]
    )
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "2025-03-08T02:30:00-05:00  2025-03-08T07:30:00Z",
        "2025-03-09T03:30:00-04:00  2025-03-09T07:30:00Z",  # in the gap: shifted forward
        "2025-03-10T02:30:00-04:00  2025-03-10T06:30:00Z",
    ]


def test_next_fires_json_and_defaults(capsys):
    assert main(["next-fires", "0 0 * * *", "--after", "2025-01-01T00:00:00+00:00", "--json"]) == 0
    fires = json.loads(capsys.readouterr().out)
    assert len(fires) == 5
    assert fires[0] == {"local": "2025-01-02T00:00:00+00:00", "utc": "2025-01-02T00:00:00Z"}


def test_next_fires_without_after_uses_now(capsys):
    assert main(["next-fires", "* * * * *", "--count", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_bad_input_is_one_line_exit_2(capsys):
    for argv, field in [
        (["next-fires", "61 * * * *"], "expr"),
        (["next-fires", "* * * * *", "--tz", "Mars/Olympus"], "tz"),
        (["next-fires", "* * * * *", "--after", "2025-01-01T00:00"], "after"),
        (["next-fires", "* * * * *", "--after", "yesterday"], "after"),
        (["next-fires", "* * * * *", "--count", "0"], "count"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"cronfleet next-fires: {field}: ") and err.count("\n") == 1
