"""A network namespace of the drill's own, joined to the host by a veth pair, through
which one service reaches the stack's PostgreSQL and Kafka on the host's loopback; and
nftables rules that cut that link (packets dropped, both ways: a dead network, not a
refused connection) and heal it.

Only what the drill creates is touched: the namespace `cfchaos-<tag>`, the veth pair
`cfc<tag>a`/`cfc<tag>b` on 10.231.N.0/30, an nftables table `cfchaos_<tag>` on each
side, and `route_localnet` on the host's end of the veth (needed to forward to
127.0.0.1). Inside the namespace the service still dials 127.0.0.1:<port>: the
namespace's nftables rewrite that to the host end of the veth, and the host's rewrite it
on to its loopback (and its source to 127.0.0.1, so PostgreSQL's pg_hba rules for
127.0.0.1 apply unchanged).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class NamespaceError(RuntimeError):
    """The namespace, the veth or the rules could not be made: the drill cannot cut."""


def _run(argv: Sequence[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NamespaceError(f"{argv[0]} not found (Debian packages iproute2, nftables)") from None
    if done.returncode != 0:
        raise NamespaceError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def tools_missing() -> list[str]:
    return [tool for tool in ("ip", "nft") if shutil.which(tool) is None]


@dataclass
class Namespace:
    tag: str  # short, unique per drill run (letters and digits, at most 10)
    ports: tuple[int, ...]  # host loopback ports the namespace may reach
    subnet: int = 0  # N in 10.231.N.0/30; 0 = chosen from the tag

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]{1,10}", self.tag):
            raise ValueError(f"namespace tag {self.tag!r}: 1-10 lowercase letters or digits")
        if not self.subnet:
            self.subnet = 1 + int.from_bytes(self.tag.encode(), "big") % 250

    @property
    def name(self) -> str:
        return f"cfchaos-{self.tag}"

    @property
    def host_if(self) -> str:
        return f"cfc{self.tag}a"

    @property
    def inner_if(self) -> str:
        return f"cfc{self.tag}b"

    @property
    def table(self) -> str:
        return f"cfchaos_{self.tag}"

    @property
    def host_ip(self) -> str:
        return f"10.231.{self.subnet}.1"

    @property
    def inner_ip(self) -> str:
        return f"10.231.{self.subnet}.2"

    def exec_prefix(self) -> list[str]:
        """Prefix an argv with this to run it inside the namespace (`ip netns exec` execs,
        so the child's pid is the service's own)."""
        return ["ip", "netns", "exec", self.name]

    # -- life ---------------------------------------------------------------------------

    def create(self) -> None:
        if os.geteuid() != 0:
            raise NamespaceError("network namespaces need root (CAP_NET_ADMIN); run as root")
        missing = tools_missing()
        if missing:
            raise NamespaceError(
                f"missing {', '.join(missing)} (apt-get install iproute2 nftables)"
            )
        self.destroy()  # a leftover of an earlier run with this tag
        self.subnet = _free_subnet(self.subnet)
        ports = ", ".join(str(p) for p in self.ports)
        try:
            _run(["ip", "netns", "add", self.name])
            _run(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.inner_if])
            _run(["ip", "link", "set", self.inner_if, "netns", self.name])
            _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if])
            _run(["ip", "link", "set", self.host_if, "up"])
            inside = self.exec_prefix()
            _run([*inside, "ip", "addr", "add", f"{self.inner_ip}/30", "dev", self.inner_if])
            _run([*inside, "ip", "link", "set", self.inner_if, "up"])
            _run([*inside, "ip", "link", "set", "lo", "up"])
            Path(f"/proc/sys/net/ipv4/conf/{self.host_if}/route_localnet").write_text("1\n")
            _run([*inside, "sysctl", "-qw", f"net.ipv4.conf.{self.inner_if}.route_localnet=1"])
            _run([*inside, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1"])
            _run(
                ["nft", "-f", "-"],
                stdin=f"""
table ip {self.table} {{
  chain pre {{ type nat hook prerouting priority -100;
    iifname "{self.host_if}" ip daddr {self.host_ip} tcp dport {{ {ports} }} dnat to 127.0.0.1; }}
  chain in {{ type nat hook input priority 100;
    ip saddr {self.inner_ip} snat to 127.0.0.1; }}
  chain cut_in {{ type filter hook prerouting priority -300; }}
  chain cut_out {{ type filter hook output priority 0; }}
}}
""",
            )
            _run(
                [*inside, "nft", "-f", "-"],
                stdin=f"""
table ip {self.table} {{
  chain out {{ type nat hook output priority -100;
    ip daddr 127.0.0.1 tcp dport {{ {ports} }} dnat to {self.host_ip}; }}
  chain post {{ type nat hook postrouting priority 100;
    oifname "{self.inner_if}" masquerade; }}
}}
""",
            )
        except (NamespaceError, OSError) as exc:
            self.destroy()
            raise NamespaceError(f"cannot build namespace {self.name}: {exc}") from None

    def destroy(self) -> None:
        """Remove the namespace (its end of the veth goes with it, and so does ours) and
        the host's table; quiet when they are already gone."""
        for argv in (
            ["ip", "netns", "del", self.name],
            ["ip", "link", "del", self.host_if],
            ["nft", "delete", "table", "ip", self.table],
        ):
            with contextlib.suppress(NamespaceError):
                if shutil.which(argv[0]):
                    _run(argv) if _exists(argv) else None

    # -- the fault ----------------------------------------------------------------------

    def cut(self, port: int) -> None:
        """Drop every packet of `port` between the namespace and the host, both ways."""
        _run(
            [
                "nft",
                f"add rule ip {self.table} cut_in iifname {self.host_if} tcp dport {port} drop; "
                f"add rule ip {self.table} cut_out oifname {self.host_if} tcp sport {port} drop",
            ]
        )

    def heal(self) -> None:
        _run(["nft", f"flush chain ip {self.table} cut_in; flush chain ip {self.table} cut_out"])


def _free_subnet(wanted: int) -> int:
    """`wanted`, or the next 10.231.N.0/30 no interface of the host has: two namespaces on
    one subnet (another drill's, running or left behind) would take each other's replies,
    and the namespace's connections would time out."""
    taken = set(re.findall(r"\b10\.231\.(\d+)\.1/30\b", _run(["ip", "-o", "-4", "addr"])))
    for step in range(250):
        n = 1 + (wanted - 1 + step) % 250
        if str(n) not in taken:
            return n
    raise NamespaceError("every 10.231.N.0/30 subnet is taken by a namespace left behind")


def _exists(argv: Sequence[str]) -> bool:
    """Whether the object `argv` would delete is there (so destroy() stays quiet)."""
    if argv[:2] == ["ip", "netns"]:
        return argv[3] in _run(["ip", "netns", "list"]).split()
    if argv[:2] == ["ip", "link"]:
        return subprocess.run(["ip", "link", "show", argv[3]], capture_output=True).returncode == 0
    tables = _run(["nft", "list", "tables"])
    return f"table ip {argv[-1]}" in tables
