"""CRONFLEET_SHARD_URLS: the shards beyond the home one, parsed strictly (a bad pair is
named with its reason) and their passwords kept out of what runs record."""

from __future__ import annotations

import re

import pytest

from kit.core.errors import FieldError
from kit.settings import HOME_SHARD, Settings, load_settings, parse_shard_urls

HOME = "postgresql+psycopg://cronfleet:home-pw-123@127.0.0.1:55432/cronfleet"
ONE = "postgresql+psycopg://cronfleet:one-pw-456@10.0.0.2:5432/cronfleet?sslmode=require"


def test_pairs_parse_in_order_with_spaces_and_query_strings() -> None:
    got = parse_shard_urls(f" s1={ONE} , s_2=postgresql://h/d,")
    assert got == {"s1": ONE, "s_2": "postgresql://h/d"}
    assert list(got) == ["s1", "s_2"]
    assert parse_shard_urls("") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s1", "shard_urls: pair 1 ('s1'): not NAME=URL"),
        ("s1=", "shard_urls: pair 1 ('s1'): not NAME=URL"),
        ("s1=u,=v", "shard_urls: pair 2 ('=v'): a shard's name must be a plain identifier"),
        ("1s=u", "shard_urls: pair 1 ('1s'): a shard's name must be a plain identifier"),
        ("s-1=u", "shard_urls: pair 1 ('s-1'): a shard's name must be a plain identifier"),
        (f"{HOME_SHARD}=u", "`home` is the database_url's shard"),
        ("a=u,b=v,a=w", "shard_urls: pair 3 ('a'): named twice"),
    ],
)
def test_a_bad_pair_is_named_with_its_reason(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_shard_urls(text)


def test_the_home_shard_comes_first_and_every_password_is_a_secret() -> None:
    settings = Settings(database_url=HOME, shard_urls=f"s1={ONE}")
    assert settings.shards() == {HOME_SHARD: HOME, "s1": ONE}
    secrets = settings.secret_values()
    assert {HOME, "home-pw-123", ONE, "one-pw-456"} <= set(secrets)


def test_load_settings_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONFLEET_SHARD_URLS", "s1=u,s1=v")
    with pytest.raises(FieldError, match=r"CRONFLEET_SHARD_URLS.*pair 2 .*named twice"):
        load_settings()
