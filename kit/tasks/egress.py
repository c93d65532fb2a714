"""Where an http task may connect: the SSRF guard.

A job's URL is chosen by a tenant, but the request leaves from inside our network, so
by default it may only reach globally routable unicast addresses: private, loopback,
link-local, multicast, reserved, shared (CGNAT), documentation and unspecified ranges
are refused, for IPv4 and IPv6 alike, and an IPv6 address that embeds an IPv4 one
(IPv4-mapped, 6to4, Teredo) is judged by the IPv4 address inside. The operator can
open holes with `http_allow_hosts`: host names (exact, case-insensitive) or CIDRs.

The host is resolved once, every address it resolves to must pass, and the caller
connects to the address that was checked: a second lookup could be answered
differently (DNS rebinding).

A refusal of a host name says neither what it resolved to nor whether it resolved at
all: the run's error is the tenant's to read, and internal addresses and names are
not. An IP literal is the tenant's own text, so its refusal names the kind of range.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from kit.core.errors import FieldError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefused(Exception):
    """The destination is not one an http task may reach."""


@dataclass(frozen=True)
class AllowList:
    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """'internal.example, 10.1.0.0/16, 127.0.0.1, ::1' -> AllowList."""
        return _parse_allow_list(text)

    def permits(self, host: str, address: IPAddress) -> bool:
        return _permits(self, host, address)


@functools.lru_cache(maxsize=4096)
def _permits(allow: AllowList, host: str, address: IPAddress) -> bool:
    """Cached: a worker checks the same few targets for every run (CIDR tests in Python
    were a tenth of the http path's CPU)."""
    if _norm_host(host) in allow.hosts:
        return True
    return any(address in net for net in allow.networks if net.version == address.version)


@functools.lru_cache(maxsize=32)
def _parse_allow_list(text: str) -> AllowList:
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        if "/" in entry or any(c.isspace() for c in entry):
            raise FieldError("http_allow_hosts", f"{entry!r} is neither a host name nor a CIDR")
        hosts.add(_norm_host(entry))
    return AllowList(frozenset(hosts), tuple(networks))


def _norm_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def refusal(address: IPAddress) -> str | None:
    """Why this address may not be reached by default, or None if it may."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour or (address.teredo or (None, None))[1]
        if embedded is not None:
            reason = refusal(embedded)
            return f"{reason} (embedded {embedded})" if reason else None
    for name in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if not address.is_global:
        return "non-global"
    return None


@functools.lru_cache(maxsize=4096)
def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _name_refused(host: str) -> EgressRefused:
    return EgressRefused(
        f"{host} does not resolve to a public address; a name that does not resolve, or "
        "resolves to a private, loopback, link-local or reserved address, is reachable only "
        "if the operator's egress allow-list (http_allow_hosts) names it"
    )


_Infos = list[tuple[Any, Any, Any, Any, Any]]


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address of `host` (an IP literal resolves to itself), in resolver order."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise _name_refused(host) from None
    return _addresses(infos)


async def resolve_async(host: str, port: int) -> list[IPAddress]:
    """`resolve` on an event loop: the lookup runs in the loop's executor."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise _name_refused(host) from None
    return _addresses(infos)


def _addresses(infos: _Infos) -> list[IPAddress]:
    seen: dict[IPAddress, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        seen[ipaddress.ip_address(str(sockaddr[0]).split("%")[0])] = None
    return list(seen)


def checked_address(host: str, port: int, allow: AllowList) -> IPAddress:
    """Resolve once and check every address; the one to connect to, or EgressRefused."""
    return checked(host, resolve(host, port), allow)


async def checked_address_async(host: str, port: int, allow: AllowList) -> IPAddress:
    """`checked_address` on an event loop."""
    return checked(host, await resolve_async(host, port), allow)


def checked(host: str, addresses: list[IPAddress], allow: AllowList) -> IPAddress:
    """Every address `host` resolved to must pass; the first is the one to connect to."""
    if not addresses:
        raise _name_refused(host)
    for address in addresses:
        if allow.permits(host, address):
            continue
        reason = refusal(address)
        if reason is None:
            continue
        if _literal(host) is None:
            raise _name_refused(host)
        raise EgressRefused(
            f"{host} is a {reason} address; only the operator's egress allow-list "
            "(http_allow_hosts) opens it"
        )
    return addresses[0]
