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
    assert lines[0] == "2025-03-08T02:30:00-05:00  2025-03-08T07:30:00Z"
    # in the gap: shifted forward, and said so
    assert lines[1].startswith("2025-03-09T03:30:00-04:00  2025-03-09T07:30:00Z  # ")
    assert lines[2] == "2025-03-10T02:30:00-04:00  2025-03-10T06:30:00Z"


def test_next_fires_json_and_defaults(capsys):
    assert main(["next-fires", "0 0 * * *", "--after", "2025-01-01T00:00:00+00:00", "--json"]) == 0
    fires = json.loads(capsys.readouterr().out)
    assert len(fires) == 5
    assert fires[0] == {
        "local": "2025-01-02T00:00:00+00:00",
        "utc": "2025-01-02T00:00:00Z",
        "dst": None,
    }


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


def test_a_fire_the_dst_rule_moved_says_so_as_the_api_does(capsys):
    argv = ["next-fires", "30 2 * * *", "--tz", "America/New_York"]
    assert main([*argv, "--after", "2025-03-08T00:00:00Z", "--count", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2025-03-08T02:30:00-05:00  2025-03-08T07:30:00Z"
    assert lines[1].startswith("2025-03-09T03:30:00-04:00  2025-03-09T07:30:00Z  # ")
    assert "clocks sprang forward" in lines[1]  # the API's words (kit.core.owed.dst_note)
    assert main([*argv, "--after", "2025-03-08T00:00:00Z", "--count", "2", "--json"]) == 0
    fires = json.loads(capsys.readouterr().out)
    assert fires[0]["dst"] is None and "clocks sprang forward" in fires[1]["dst"]


def test_a_fall_back_fire_is_noted_too(capsys):
    argv = ["next-fires", "30 2 * * *", "--tz", "Europe/Paris", "--after", "2025-10-25T12:00:00Z"]
    assert main([*argv, "--count", "1"]) == 0
    assert "clocks fell back" in capsys.readouterr().out


def test_a_bad_cron_and_an_unknown_zone_are_both_reported(capsys):
    assert main(["next-fires", "61 * * * *", "--tz", "Mars/Olympus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expr: " in err and "tz: unknown time zone" in err
