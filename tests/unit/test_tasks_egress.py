"""The http task's SSRF guard: which addresses are refused, and the allow-list."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from kit.core.errors import FieldError
from kit.tasks import RunContext, execute
from kit.tasks.egress import (
    AllowList,
    EgressRefused,
    checked_address,
    checked_address_async,
    refusal,
)
from tests.resolver import Resolver


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-global"),  # shared address space (CGNAT)
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("::ffff:127.0.0.1", "loopback (embedded 127.0.0.1)"),
        ("::ffff:10.0.0.1", "private (embedded 10.0.0.1)"),
        ("::ffff:169.254.169.254", "link-local (embedded 169.254.169.254)"),
        ("2002:a00:1::1", "private (embedded 10.0.0.1)"),  # 6to4
    ],
)
def test_non_public_addresses_are_refused(address: str, reason: str) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2001:4860:4860::8888", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_ip_literal_hosts_are_checked_without_dns() -> None:
    with pytest.raises(EgressRefused, match=r"127\.0\.0\.1 is a loopback address"):
        checked_address("127.0.0.1", 80, AllowList())
    with pytest.raises(EgressRefused, match="link-local"):
        checked_address("[fe80::1]", 80, AllowList())
    assert checked_address("8.8.8.8", 443, AllowList()) == ipaddress.ip_address("8.8.8.8")


def test_localhost_by_name_is_refused_unless_allow_listed() -> None:
    with pytest.raises(EgressRefused, match="does not resolve to a public address"):
        checked_address("localhost", 80, AllowList())
    assert checked_address("localhost", 80, AllowList.parse("LOCALHOST.")).is_loopback


def test_allow_list_by_cidr_and_single_address() -> None:
    allow = AllowList.parse(" 10.0.0.0/8 , 127.0.0.1, fd00::/8, internal.example ")
    assert allow.hosts == frozenset({"internal.example"})
    assert checked_address("10.200.3.4", 80, allow) == ipaddress.ip_address("10.200.3.4")
    assert checked_address("127.0.0.1", 80, allow).is_loopback
    assert checked_address("fd00::5", 80, allow).is_private
    with pytest.raises(EgressRefused):
        checked_address("127.0.0.2", 80, allow)  # only 127.0.0.1 was allowed
    with pytest.raises(EgressRefused):
        checked_address("192.168.0.1", 80, allow)
    assert allow.permits("Internal.Example", ipaddress.ip_address("10.0.0.1"))
    assert not allow.permits("other.example", ipaddress.ip_address("192.168.0.1"))


def test_bad_allow_list_entry_names_the_setting() -> None:
    with pytest.raises(FieldError, match="http_allow_hosts"):
        AllowList.parse("10.0.0.0/33")
    with pytest.raises(FieldError, match="http_allow_hosts"):
        AllowList.parse("bad host")


def test_unresolvable_host_is_refused() -> None:
    with pytest.raises(EgressRefused, match="does not resolve to a public address"):
        checked_address("no-such-host.invalid", 80, AllowList())


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "https://localhost/",
        "http://0.0.0.0:9/",
    ],
)
def test_http_task_refuses_before_connecting(url: str) -> None:
    result = execute({"type": "http", "url": url, "method": "GET"}, RunContext("r1", 1, 5.0))
    assert not result.ok
    assert "egress allow-list (http_allow_hosts)" in (result.error or "")


# --- a refusal names no resolved address (issue 7, item 2) -------------------------------


@pytest.fixture
def internal_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver that knows internal names, as a split-horizon DNS would."""
    table = {"db.internal": ["10.20.30.40"], "meta.internal": ["169.254.169.254"]}
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> list:
        if host in table:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in table[host]]
        if host.endswith(".internal"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr("kit.tasks.egress.socket.getaddrinfo", getaddrinfo)


@pytest.mark.usefixtures("internal_dns")
@pytest.mark.parametrize(
    ("host", "address"),
    [("db.internal", "10.20.30.40"), ("meta.internal", "169.254.169.254"), ("localhost", "127.")],
)
def test_a_refused_host_name_does_not_say_what_it_resolves_to(host: str, address: str) -> None:
    with pytest.raises(EgressRefused) as refused:
        checked_address(host, 80, AllowList())
    message = str(refused.value)
    assert address not in message and "::1" not in message
    assert host in message
    result = execute(
        {"type": "http", "url": f"http://{host}/", "method": "GET"}, RunContext("r1", 1, 5.0)
    )
    assert not result.ok and address not in (result.error or "")


@pytest.mark.usefixtures("internal_dns")
def test_an_internal_name_and_a_missing_one_are_refused_alike() -> None:
    """No oracle: a tenant cannot tell which internal names exist."""
    messages = []
    for host in ("db.internal", "nothing-here.internal"):
        with pytest.raises(EgressRefused) as refused:
            checked_address(host, 80, AllowList())
        messages.append(str(refused.value).replace(host, "HOST"))
    assert messages[0] == messages[1]


# --- a name of several addresses: every one is checked --------------------------------


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    """The resolver stub (tests/resolver.py) in place of the system's, for the guard's
    lookup and asyncio's alike."""
    stub = Resolver(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", stub)
    return stub


PUBLIC4, PUBLIC6 = "93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"


@pytest.mark.parametrize(
    "addresses",
    [
        [PUBLIC4, "10.0.0.5"],  # the private one second: a guard of the first alone passes
        ["10.0.0.5", PUBLIC4],
        [PUBLIC4, PUBLIC6, "169.254.169.254"],
        [PUBLIC6, "fd00::1"],  # IPv6 public, then IPv6 private
        [PUBLIC4, "::1"],  # IPv4 public, IPv6 loopback
        [PUBLIC6, "::ffff:127.0.0.1"],  # an IPv4-mapped loopback among IPv6
        [PUBLIC4, "100.64.0.1"],  # shared address space (CGNAT)
    ],
)
def test_a_name_is_refused_if_any_of_its_addresses_is(dns: Resolver, addresses: list[str]) -> None:
    dns.answer("mixed.example", addresses)
    with pytest.raises(EgressRefused, match="does not resolve to a public address"):
        checked_address("mixed.example", 443, AllowList())
    with pytest.raises(EgressRefused, match="does not resolve to a public address"):
        asyncio.run(checked_address_async("mixed.example", 443, AllowList()))
    result = execute(
        {"type": "http", "url": "https://mixed.example/", "method": "GET"}, RunContext("r1", 1, 5.0)
    )
    assert not result.ok and "egress allow-list" in (result.error or "")
    assert dns.lookups["mixed.example"] == 3  # the guard's lookups: nothing was dialled


@pytest.mark.parametrize(
    ("addresses", "allow"),
    [
        ([PUBLIC4, PUBLIC6], ""),
        ([PUBLIC6, PUBLIC4], ""),
        ([PUBLIC4, "10.1.2.3"], "10.0.0.0/8"),  # the operator opened the private one
        (["10.1.2.3", "fd00::7"], "mixed.example"),  # the name itself is allowed
    ],
)
def test_a_name_whose_every_address_passes_is_reached_at_its_first(
    dns: Resolver, addresses: list[str], allow: str
) -> None:
    dns.answer("mixed.example", addresses)
    first = ipaddress.ip_address(addresses[0])
    assert checked_address("mixed.example", 443, AllowList.parse(allow)) == first
    got = asyncio.run(checked_address_async("mixed.example", 443, AllowList.parse(allow)))
    assert got == first


def test_a_name_with_no_address_is_refused(dns: Resolver) -> None:
    dns.answer("empty.example", [])
    with pytest.raises(EgressRefused, match="does not resolve to a public address"):
        checked_address("empty.example", 80, AllowList())
