"""A kill switch as the operator names it, and which runs it holds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kit.core.errors import FieldError
from kit.core.switches import Switch, SwitchKind, held_note, holding, parse_switch

TYPES = ("noop", "http", "command", "sleep")


def test_each_kind_holds_its_own_runs() -> None:
    assert Switch(SwitchKind.tenant, "acme").holds("acme", "low", "noop")
    assert not Switch(SwitchKind.tenant, "acme").holds("beta", "low", "noop")
    assert Switch(SwitchKind.tier, "low").holds("beta", "low", "http")
    assert not Switch(SwitchKind.tier, "low").holds("beta", "high", "http")
    assert Switch(SwitchKind.task_type, "http").holds("beta", "high", "http")
    assert not Switch(SwitchKind.task_type, "http").holds("beta", "high", None)


@pytest.mark.parametrize(
    ("kind", "value", "field"),
    [
        ("job", "x", "kind"),
        ("tenant", "", "value"),
        ("tier", "urgent", "value"),
        ("task_type", "ftp", "value"),
        ("tenant", "x" * 201, "value"),
    ],
)
def test_a_bad_switch_is_refused_naming_the_field(kind: str, value: str, field: str) -> None:
    with pytest.raises(FieldError) as exc:
        parse_switch(kind, value, TYPES)
    assert exc.value.field == field


def test_the_note_says_which_switch_and_since_when() -> None:
    since = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
    assert held_note("tenant", "acme", since, "noisy") == (
        "held: switch off for tenant acme since 2026-12-06T01:00:00+00:00 (noisy)"
    )
    assert parse_switch("task_type", "noop", TYPES) == Switch(SwitchKind.task_type, "noop")


def test_holding_names_the_first_switch_that_holds_the_run_and_none_otherwise() -> None:
    tenant = Switch(SwitchKind.tenant, "acme")
    tier = Switch(SwitchKind.tier, "low")
    http = Switch(SwitchKind.task_type, "http")
    assert holding([], "acme", "low", "http") is None
    assert holding([tier, tenant], "acme", "normal", "noop") == tenant
    assert holding([tenant, tier], "beta", "low", "noop") == tier
    assert holding([http], "beta", "normal", "http") == http
    assert holding([http], "beta", "normal", None) is None  # a deleted job's run
    assert holding([tenant, tier, http], "beta", "normal", "command") is None


def test_held_note_names_the_kind_in_words_and_the_reason_only_when_given() -> None:
    since = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
    assert held_note("task_type", "http", since, "") == (
        "held: switch off for task type http since 2026-12-06T01:00:00+00:00"
    )
    assert held_note("tenant", "acme", since, "noisy") == (
        "held: switch off for tenant acme since 2026-12-06T01:00:00+00:00 (noisy)"
    )


@pytest.mark.parametrize(
    ("kind", "value", "field", "reason"),
    [
        ("job", "x", "kind", "must be one of tenant, task_type, tier"),
        ("tenant", "", "value", "must be a text of 1 to 200 characters"),
        ("tenant", 7, "value", "must be a text of 1 to 200 characters"),
        ("tenant", "a" * 201, "value", "must be a text of 1 to 200 characters"),
        ("tier", "urgent", "value", "a tier is one of critical, high, normal, low"),
        ("task_type", "ftp", "value", "a task type is one of noop, http, command, sleep"),
    ],
)
def test_a_bad_switch_is_refused_with_its_field_and_reason_word_for_word(
    kind: object, value: object, field: str, reason: str
) -> None:
    with pytest.raises(FieldError) as refused:
        parse_switch(kind, value, TYPES)
    assert (refused.value.field, refused.value.reason) == (field, reason)


def test_a_value_of_the_longest_length_is_a_switch() -> None:
    from kit.core.switches import MAX_VALUE_CHARS

    longest = "a" * MAX_VALUE_CHARS
    assert parse_switch("tenant", longest, TYPES) == Switch(SwitchKind.tenant, longest)


def test_a_held_run_exactly_at_the_misfire_grace_is_not_late() -> None:
    """Late is strictly before now - grace: a run at that instant runs whatever its job's
    misfire policy, one a millisecond earlier is judged by it (skip_late, deadline 0:
    skipped)."""
    from kit.core.policies import MisfirePolicy
    from kit.core.switches import HeldRun, plan_lift

    now_ms, grace_ms = 1_000_000, 14_000
    at = HeldRun("at", "j", now_ms - grace_ms, "schedule", 1)
    before = HeldRun("before", "j", now_ms - grace_ms - 1, "schedule", 1)
    plan = plan_lift([at, before], {"j": MisfirePolicy("skip_late", 0)}, now_ms, grace_ms)
    assert (plan.kept, plan.skipped) == (["at"], ["before"])


def test_a_switch_reads_as_its_kind_in_words_and_its_value() -> None:
    assert str(Switch(SwitchKind.task_type, "http")) == "task type http"
    assert str(Switch(SwitchKind.tenant, "acme")) == "tenant acme"


def test_a_reason_is_a_text_of_at_most_its_length() -> None:
    from kit.core.switches import MAX_REASON_CHARS, check_reason

    assert check_reason("") == ""
    assert check_reason("r" * MAX_REASON_CHARS) == "r" * MAX_REASON_CHARS
    for bad in ("r" * (MAX_REASON_CHARS + 1), None, 5):
        with pytest.raises(FieldError) as refused:
            check_reason(bad)
        assert (refused.value.field, refused.value.reason) == (
            "reason",
            "must be a text of at most 500 characters",
        )
