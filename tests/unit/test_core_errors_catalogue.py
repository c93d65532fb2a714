"""Every refusal of bad input in kit/core, with the field it names and the reason it
gives: these are the API's 422 bodies and the CLI's one-line errors, so their words are
part of the contract (and a mutant that changes a field name or a reason is caught)."""

from datetime import UTC, datetime, timedelta

import pytest

from kit.core.dispatch import next_scan_at_ms, scan_window, tier_rank
from kit.core.errors import FieldError
from kit.core.owed import ScheduleEra, check_instant, plan_backfill
from kit.core.policies import MisfirePolicy, OverlapPolicy
from kit.core.retry import RetryPolicy
from kit.core.schedule import (
    IntervalSchedule,
    check_instant_range,
    parse_cron,
    parse_instant,
    parse_schedule,
    parse_timezone,
)
from kit.core.task_policy import TaskPolicy

NOW = datetime(2030, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)
EARLIER = NOW - timedelta(minutes=10)
JOB = "7b9d3c1e-0000-4000-8000-000000000000"
ERA = ScheduleEra(IntervalSchedule(60, NOW - timedelta(days=1)), None, 0, 1)

CASES = [
    ("retry.parse list", lambda: RetryPolicy.parse([1]), "retry", "must be an object"),
    (
        "retry.parse extra",
        lambda: RetryPolicy.parse({"colour": 1, "base_s": 1}),
        "retry.colour",
        "unknown field",
    ),
    (
        "retry.parse attempts text",
        lambda: RetryPolicy.parse({"max_attempts": "3"}),
        "retry.max_attempts",
        "must be a whole number",
    ),
    (
        "retry.parse attempts bool",
        lambda: RetryPolicy.parse({"max_attempts": True}),
        "retry.max_attempts",
        "must be a whole number",
    ),
    (
        "retry.parse base text",
        lambda: RetryPolicy.parse({"base_s": "1"}),
        "retry.base_s",
        "must be a number of seconds",
    ),
    (
        "retry.parse cap bool",
        lambda: RetryPolicy.parse({"cap_s": True}),
        "retry.cap_s",
        "must be a number of seconds",
    ),
    (
        "retry.parse jitter",
        lambda: RetryPolicy.parse({"jitter": "equal"}),
        "retry.jitter",
        "must be one of full, none",
    ),
    ("retry attempts 0", lambda: RetryPolicy(0), "retry.max_attempts", "must be between 1 and 100"),
    (
        "retry attempts 101",
        lambda: RetryPolicy(101),
        "retry.max_attempts",
        "must be between 1 and 100",
    ),
    ("retry base 0", lambda: RetryPolicy(3, 0.0), "retry.base_s", "must be greater than 0"),
    (
        "retry cap below base",
        lambda: RetryPolicy(3, 10.0, 5.0),
        "retry.cap_s",
        "must be at least base_s",
    ),
    (
        "retry cap too long",
        lambda: RetryPolicy(3, 1.0, 86_401.0),
        "retry.cap_s",
        "must be at most 86400 seconds",
    ),
    (
        "retry jitter",
        lambda: RetryPolicy(3, 1.0, 2.0, "equal"),
        "retry.jitter",
        "must be one of full, none",
    ),
    (
        "misfire kind",
        lambda: MisfirePolicy("later"),
        "misfire.kind",
        "must be one of run_all, run_once, skip_late",
    ),
    (
        "misfire deadline text",
        lambda: MisfirePolicy("skip_late", "1"),
        "misfire.deadline_s",
        "must be a whole number between 0 and 604800",
    ),
    (
        "misfire deadline bool",
        lambda: MisfirePolicy("skip_late", True),
        "misfire.deadline_s",
        "must be a whole number between 0 and 604800",
    ),
    (
        "misfire deadline negative",
        lambda: MisfirePolicy("skip_late", -1),
        "misfire.deadline_s",
        "must be a whole number between 0 and 604800",
    ),
    (
        "misfire deadline huge",
        lambda: MisfirePolicy("skip_late", 10**9),
        "misfire.deadline_s",
        "must be a whole number between 0 and 604800",
    ),
    (
        "misfire.parse list",
        lambda: MisfirePolicy.parse([1]),
        "misfire",
        "must be an object with 'kind'",
    ),
    (
        "misfire.parse extra",
        lambda: MisfirePolicy.parse({"kind": "run_all", "when": 1}),
        "misfire.when",
        "unknown field",
    ),
    (
        "overlap",
        lambda: OverlapPolicy.parse("sometimes"),
        "overlap",
        "must be one of allow, forbid, queue, replace",
    ),
    (
        "overlap field",
        lambda: OverlapPolicy.parse(3, "jobs[2].overlap"),
        "jobs[2].overlap",
        "must be one of allow, forbid, queue, replace",
    ),
    (
        "priority",
        lambda: tier_rank("urgent"),
        "priority",
        "must be one of critical, high, normal, low",
    ),
    ("scan ahead", lambda: scan_window(0, -1), "scan_ahead_ms", "must not be negative"),
    ("scan period", lambda: next_scan_at_ms(0, 0), "scan_period_ms", "must be positive"),
    (
        "timezone empty",
        lambda: parse_timezone(""),
        "timezone",
        "must be an IANA time zone name such as 'Europe/Paris'",
    ),
    (
        "timezone not text",
        lambda: parse_timezone(5),
        "timezone",
        "must be an IANA time zone name such as 'Europe/Paris'",
    ),
    (
        "timezone long",
        lambda: parse_timezone("A" * 65),
        "timezone",
        "has 65 characters; at most 64",
    ),
    (
        "timezone nul",
        lambda: parse_timezone("Europe/Par\x00is"),
        "timezone",
        "must not contain NUL",
    ),
    (
        "timezone unknown",
        lambda: parse_timezone("Mars/Olympus"),
        "timezone",
        "unknown time zone 'Mars/Olympus'",
    ),
    (
        "timezone field",
        lambda: parse_timezone("Mars/Olympus", "schedule.timezone"),
        "schedule.timezone",
        "unknown time zone 'Mars/Olympus'",
    ),
    (
        "cron empty",
        lambda: parse_cron("  "),
        "cron",
        "must be a cron expression such as '0 * * * *'",
    ),
    (
        "cron not text",
        lambda: parse_cron(5),
        "cron",
        "must be a cron expression such as '0 * * * *'",
    ),
    ("cron long", lambda: parse_cron("* " * 130), "cron", "has 260 characters; at most 256"),
    (
        "timezone of the longest length, unknown",
        lambda: parse_timezone("Europe/" + "x" * 57),
        "timezone",
        "unknown time zone 'Europe/" + "x" * 57 + "'",
    ),
    (
        "cron fields",
        lambda: parse_cron("* * * *"),
        "cron",
        "'* * * *' must have 5 fields: minute hour day month weekday",
    ),
    (
        "cron invalid",
        lambda: parse_cron("61 * * * *"),
        "cron",
        "'61 * * * *' is not a valid cron expression",
    ),
    (
        "cron never",
        lambda: parse_cron("0 0 31 2 *"),
        "cron",
        "'0 0 31 2 *' never fires (no such day)",
    ),
    (
        "instant long",
        lambda: parse_instant("2030-01-01T00:00:00" + "0" * 60, "at"),
        "at",
        "has 79 characters; at most 64",
    ),
    (
        "instant text",
        lambda: parse_instant("tomorrow", "at"),
        "at",
        "'tomorrow' is not an ISO 8601 time",
    ),
    (
        "instant type",
        lambda: parse_instant(5, "at"),
        "at",
        "must be an ISO 8601 time with an offset",
    ),
    (
        "instant lowercase z",  # ISO 8601 names UTC by a capital Z only
        lambda: parse_instant("2030-01-01T00:00:00z", "at"),
        "at",
        "'2030-01-01T00:00:00z' is not an ISO 8601 time",
    ),
    (
        "instant naive",
        lambda: parse_instant("2030-01-01T00:00:00", "at"),
        "at",
        "needs a UTC offset or 'Z' (naive times are ambiguous)",
    ),
    (
        "instant naive datetime",
        lambda: parse_instant(datetime(2030, 1, 1), "at"),
        "at",
        "needs a UTC offset or 'Z' (naive times are ambiguous)",
    ),
    (
        "instant range",
        lambda: parse_instant("0001-01-01T00:00:00+01:00", "at"),
        "at",
        "must be between 1970-01-01T00:00:00+00:00 and 9999-01-01T00:00:00+00:00 (exclusive)",
    ),
    (
        "instant range naive datetime",
        lambda: check_instant_range(datetime(2030, 1, 1), "window.from"),
        "window.from",
        "needs a UTC offset or 'Z' (naive times are ambiguous)",
    ),
    (
        "instant range the upper bound itself",
        lambda: check_instant_range(datetime(9999, 1, 1, tzinfo=UTC), "at"),
        "at",
        "must be between 1970-01-01T00:00:00+00:00 and 9999-01-01T00:00:00+00:00 (exclusive)",
    ),
    (
        "instant range high",
        lambda: check_instant_range(datetime(9999, 6, 1, tzinfo=UTC), "at"),
        "at",
        "must be between 1970-01-01T00:00:00+00:00 and 9999-01-01T00:00:00+00:00 (exclusive)",
    ),
    (
        "schedule type",
        lambda: parse_schedule([1], NOW),
        "schedule",
        "must be an object with 'cron', 'every_s' or 'at'",
    ),
    (
        "schedule none",
        lambda: parse_schedule({}, NOW),
        "schedule",
        "give exactly one of 'cron', 'every_s' or 'at'",
    ),
    (
        "schedule two",
        lambda: parse_schedule({"cron": "* * * * *", "every_s": 5}, NOW),
        "schedule",
        "give exactly one of 'cron', 'every_s' or 'at'",
    ),
    (
        "schedule extra",
        lambda: parse_schedule({"every_s": 5, "timezone": "UTC"}, NOW),
        "schedule.timezone",
        "not allowed with 'every_s'",
    ),
    (
        "schedule cron bad",
        lambda: parse_schedule({"cron": "* *"}, NOW),
        "schedule.cron",
        "'* *' must have 5 fields: minute hour day month weekday",
    ),
    (
        "schedule tz bad",
        lambda: parse_schedule({"cron": "* * * * *", "timezone": "Nowhere"}, NOW),
        "schedule.timezone",
        "unknown time zone 'Nowhere'",
    ),
    (
        "schedule every text",
        lambda: parse_schedule({"every_s": "5"}, NOW),
        "schedule.every_s",
        "must be a whole number of seconds",
    ),
    (
        "schedule every bool",
        lambda: parse_schedule({"every_s": True}, NOW),
        "schedule.every_s",
        "must be a whole number of seconds",
    ),
    (
        "schedule every 0",
        lambda: parse_schedule({"every_s": 0}, NOW),
        "schedule.every_s",
        "must be between 1 and 31622400",
    ),
    (
        "schedule every huge",
        lambda: parse_schedule({"every_s": 366 * 86_400 + 1}, NOW),
        "schedule.every_s",
        "must be between 1 and 31622400",
    ),
    (
        "schedule anchor",
        lambda: parse_schedule({"every_s": 5, "anchor": "soon"}, NOW),
        "schedule.anchor",
        "'soon' is not an ISO 8601 time",
    ),
    (
        "schedule at",
        lambda: parse_schedule({"at": "2030-01-01T00:00:00"}, NOW),
        "schedule.at",
        "needs a UTC offset or 'Z' (naive times are ambiguous)",
    ),
    (
        "policy extra",
        lambda: TaskPolicy.parse({"users": {}}),
        "users",
        "unknown setting (expected [tenants.<name>] tables)",
    ),
    (
        "policy tenants",
        lambda: TaskPolicy.parse({"tenants": []}),
        "tenants",
        "must be a table of tenants",
    ),
    (
        "policy tenant",
        lambda: TaskPolicy.parse({"tenants": {"acme": 1}}),
        "tenants.acme",
        "must be a table",
    ),
    (
        "policy tenant extra",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"shell": 1}}}),
        "tenants.acme.shell",
        "unknown setting; one of ['commands', 'cwd', 'env', 'http_allow_hosts', 'run_as']",
    ),
    (
        "policy run_as bad",
        lambda: TaskPolicy.parse(
            {"tenants": {"acme": {"commands": ["/bin/true"], "run_as": "Bad User"}}}
        ),
        "tenants.acme.run_as",
        "must be a system user name",
    ),
    (
        "policy run_as root",
        lambda: TaskPolicy.parse(
            {"tenants": {"acme": {"commands": ["/bin/true"], "run_as": "root"}}}
        ),
        "tenants.acme.run_as",
        "must not be root",
    ),
    (
        "policy commands",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": "/bin/true"}}}),
        "tenants.acme.commands",
        "must be a list of non-empty strings",
    ),
    (
        "policy commands empty string",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": [""]}}}),
        "tenants.acme.commands",
        "must be a list of non-empty strings",
    ),
    (
        "policy relative",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": ["/bin/true", "true"]}}}),
        "tenants.acme.commands[1]",
        "must be an absolute path",
    ),
    (
        "policy nul",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": ["/bin/\x00"]}}}),
        "tenants.acme.commands[0]",
        "must be an absolute path",
    ),
    (
        "policy run_as alone",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"run_as": "svc"}}}),
        "tenants.acme.run_as",
        "is only meaningful with commands",
    ),
    (
        "policy cwd alone",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"cwd": ["/srv/acme"]}}}),
        "tenants.acme.cwd",
        "is only meaningful with commands",
    ),
    (
        "policy env alone",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"env": ["APP_*"]}}}),
        "tenants.acme.env",
        "is only meaningful with commands",
    ),
    (
        "policy cwd relative",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": [], "cwd": ["srv"]}}}),
        "tenants.acme.cwd[0]",
        "must be an absolute path in normal form (no '.', '..', '//' or trailing '/')",
    ),
    (
        "policy cwd dot-dot",
        lambda: TaskPolicy.parse(
            {"tenants": {"acme": {"commands": [], "cwd": ["/srv", "/srv/acme/../x"]}}}
        ),
        "tenants.acme.cwd[1]",
        "must be an absolute path in normal form (no '.', '..', '//' or trailing '/')",
    ),
    (
        "policy cwd not a list",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": [], "cwd": "/srv"}}}),
        "tenants.acme.cwd",
        "must be a list of non-empty strings",
    ),
    (
        "policy env bare star",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": [], "env": ["*"]}}}),
        "tenants.acme.env[0]",
        "must be an environment name, or a prefix ending in '*' (e.g. APP_*)",
    ),
    (
        "policy env inner star",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": [], "env": ["A*B"]}}}),
        "tenants.acme.env[0]",
        "must be an environment name, or a prefix ending in '*' (e.g. APP_*)",
    ),
    (
        "policy env always refused",
        lambda: TaskPolicy.parse(
            {"tenants": {"acme": {"commands": [], "env": ["APP_*", "BASH_ENV"]}}}
        ),
        "tenants.acme.env[1]",
        "BASH_ENV is always refused (a shell runs code from it); remove it",
    ),
    (
        "policy env prefix always refused",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"commands": [], "env": ["PYTHON*"]}}}),
        "tenants.acme.env[0]",
        "PYTHON* is always refused (an interpreter loads or runs code from it); remove it",
    ),
    (
        "policy hosts",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"http_allow_hosts": ["a,b"]}}}),
        "tenants.acme.http_allow_hosts[0]",
        "must be one host or CIDR",
    ),
    (
        "policy hosts blank",
        lambda: TaskPolicy.parse({"tenants": {"acme": {"http_allow_hosts": ["ok", " "]}}}),
        "tenants.acme.http_allow_hosts[1]",
        "must be one host or CIDR",
    ),
    (
        "backfill order",
        lambda: plan_backfill(JOB, [], NOW, NOW, NOW, 10),
        "to",
        "must be after from",
    ),
    (
        "backfill future",
        lambda: plan_backfill(JOB, [], NOW, LATER, NOW, 10),
        "to",
        "is in the future; a backfill ends at most now (2030-01-01T00:00:00Z)",
    ),
    (
        "backfill too many",
        lambda: plan_backfill(JOB, [ERA], EARLIER, NOW, NOW, 3),
        "to",
        "the range owes more than 3 fires (the most one backfill may ask for);"
        " backfill a shorter range",
    ),
    (
        "backfill past the run retention",
        lambda: plan_backfill(JOB, [ERA], NOW - timedelta(days=3), NOW, NOW, 10_000, 0, 86_400),
        "from",
        "is before 2029-12-31T00:00:00Z: run history is kept 1 day (CRONFLEET_RUN_RETENTION_S),"
        " so runs scheduled earlier would be expired by the next maintenance pass; backfill"
        " from 2029-12-31T00:00:00Z or later",
    ),
    (
        "instant out of range",
        lambda: check_instant(datetime(1900, 1, 1, tzinfo=UTC), "from"),
        "from",
        "must be between 1970-01-01T00:00:00Z and 2200-01-01T00:00:00Z",
    ),
]


@pytest.mark.parametrize(
    ("call", "field", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_names_the_field_and_the_reason(call, field, reason):
    with pytest.raises(FieldError) as exc:
        call()
    assert (exc.value.field, exc.value.reason) == (field, reason)
    assert str(exc.value) == f"{field}: {reason}"


def test_a_nested_error_keeps_the_reason_under_the_enclosing_field():
    err = FieldError("cron", "is not valid").nested("jobs[3].schedule")
    assert (err.field, err.reason, str(err)) == (
        "jobs[3].schedule.cron",
        "is not valid",
        "jobs[3].schedule.cron: is not valid",
    )


def test_command_refusals_say_who_and_what():
    policy = TaskPolicy.parse(
        {
            "tenants": {
                "acme": {
                    "commands": ["/bin/true", "/bin/sh"],
                    "cwd": ["/srv/acme", "/"],
                    "env": ["APP_*", "MODE"],
                }
            }
        }
    )

    def refusal(tenant, argv, **task):
        return policy.command_refusal(tenant, {"argv": argv, **task})

    assert refusal("other", ["/bin/true"]) == (
        "task.type",
        "the operator has not allowed command tasks for tenant 'other'",
    )
    assert refusal("acme", ["/bin/ls"]) == (
        "task.argv[0]",
        "'/bin/ls' is not an executable the operator allowed for tenant 'acme'"
        " (allowed: /bin/sh, /bin/true)",
    )
    assert refusal("acme", []) == ("task.argv[0]", "must name an executable")
    assert refusal("acme", "/bin/sh") == ("task.argv", "must be a list of strings")
    assert (
        refusal("acme", ["/bin/sh", "-c", "x"], cwd="/x", env={"APP_A": "1", "MODE": "2"}) is None
    )
    assert refusal("acme", ["/bin/sh"], env={"APP_A": "1", "MODES": "2"}) == (
        "task.env.MODES",
        "is not a name the operator allowed tenant 'acme' to set (allowed: APP_*, MODE)",
    )
    assert refusal("acme", ["/bin/sh"], env={"APP_A": "1", "PS4": "2"}) == (
        "task.env.PS4",
        "is never a name a job may set: a shell runs code from it",
    )
    assert refusal("acme", ["/bin/sh"], env=["A"]) == (
        "task.env",
        "must be an object of names and values",
    )
    assert refusal("acme", ["/bin/sh"], cwd="/x/../y") == (
        "task.cwd",
        "must be an absolute path in normal form (no '.', '..', '//' or trailing '/')",
    )
    none = TaskPolicy.parse({"tenants": {"acme": {"commands": []}}})
    assert none.command_refusal("acme", {"argv": ["/bin/sh"]})[1].endswith("(allowed: none)")
    assert none.command_refusal("acme", {"argv": [], "cwd": "/"}) == (
        "task.argv[0]",
        "must name an executable",
    )


@pytest.mark.parametrize(
    ("cwd", "allowed"),
    [
        ("/srv/acme", True),
        ("/srv/acme/reports/2030", True),
        ("/srv/acme2", False),
        ("/srv/acmex/y", False),
        ("/srv", False),
        ("/srv/acme/", False),
        ("/srv/acme/./x", False),
        ("/srv/acme/../beta", False),
        ("//srv/acme", False),
        ("srv/acme", False),
        ("/srv/acme/\x00", False),
        ("", False),
        (3, False),
    ],
)
def test_a_cwd_is_the_operators_directory_or_below_it_by_its_text(cwd, allowed):
    permit = (
        TaskPolicy.parse({"tenants": {"acme": {"commands": ["/bin/sh"], "cwd": ["/srv/acme"]}}})
        .tenants["acme"]
        .commands
    )
    assert (permit.cwd_refusal(cwd, "acme") is None) is allowed


def test_a_root_worker_refuses_a_permit_without_run_as_only():
    policy = TaskPolicy.parse(
        {"tenants": {"a": {"commands": ["/bin/sh"]}, "b": {"commands": [], "run_as": "svc"}}}
    )
    a, b = policy.tenants["a"].commands, policy.tenants["b"].commands
    assert a.identity_refusal(True, "a") == (
        "tenant 'a' has no run_as user and this worker runs as root, so it runs none of its "
        "commands (give it a run_as user)"
    )
    assert a.identity_refusal(False, "a") is None
    assert b.identity_refusal(True, "b") is None
