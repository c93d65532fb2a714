"""A resolver stub for the http task's tests: names it is told answer with the addresses
given (IPv4 and IPv6, public and private mixed, in order), each lookup the next answer
(the last one repeats: a name that resolves differently the second time), and every
lookup is counted. Other names go to the real resolver.

It replaces `socket.getaddrinfo`, which the egress guard's lookup (kit.tasks.egress) and
asyncio's own connect-by-name both call, so a second lookup anywhere is seen."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

Info = tuple[Any, Any, Any, Any, Any]


class Resolver:
    def __init__(self, real: Callable[..., list[Info]]) -> None:
        self.real = real
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: Counter[str] = Counter()

    def answer(self, name: str, *answers: Sequence[str]) -> None:
        """`name` resolves to answers[0] at its first lookup, answers[1] at the second..."""
        self.answers[name.lower()] = [list(a) for a in answers]

    def __call__(
        self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[Info]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        known = self.answers.get(name.lower())
        if known is None:
            return self.real(host, port, family, type, proto, flags)
        self.lookups[name.lower()] += 1
        addresses = known[min(self.lookups[name.lower()], len(known)) - 1]
        port_n = int(port or 0)
        infos: list[Info] = []
        for address in addresses:
            if ":" in address:
                if family in (0, socket.AF_INET6):
                    infos.append(
                        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port_n, 0, 0))
                    )
            elif family in (0, socket.AF_INET):
                infos.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port_n)))
        if not infos:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return infos
