"""Per-run random draws that depend on (seed, stream, run, attempt) only, not on the
order the model happens to ask for them.

A shared sequential generator hands its n-th number to whichever run asks n-th: a
fault that changes the order of claims (a crash, a stall, a broker outage) then
shifts every later run's duration, outcome and retry jitter, and a run with the fault
is not comparable with the same run without it. Keyed draws make runs with and
without a fault paired (common random numbers): a run's task takes the same time and
fails or succeeds the same way in both, so a difference between them is the fault's.

A draw is splitmix64 of the key (a counter-based generator): vectorised for numpy
arrays of run ids, and a `random.Random` for kit.core.retry's jitter.
"""

from __future__ import annotations

import math
import random

import numpy as np

_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_MASK = (1 << 64) - 1
_U53 = 2.0**-53


def _mix_int(x: int) -> int:
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * _M1) & _MASK
    x = ((x ^ (x >> 27)) * _M2) & _MASK
    return x ^ (x >> 31)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (multiplication wraps, as it should)."""
    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def stream_key(seed: int, stream: int) -> int:
    """The key of one named stream of a seed (distinct streams, distinct keys)."""
    return _mix_int(_mix_int(seed & _MASK) ^ (stream & _MASK))


class RunDraws:
    """Uniform and standard normal numbers keyed by run id, attempt and a slot (the
    k-th number a run's attempt uses: its duration, its failure, ...)."""

    def __init__(self, seed: int, stream: int) -> None:
        self.key = stream_key(seed, stream)

    def _bits(self, run: np.ndarray, attempt: np.ndarray | int, slot: int) -> np.ndarray:
        r = np.asarray(run).astype(np.uint64)
        a = np.asarray(attempt).astype(np.uint64)
        x = _mix(r ^ np.uint64(self.key))
        return _mix(x ^ (a << np.uint64(8)) ^ np.uint64(slot))

    def uniform(self, run: np.ndarray, attempt: np.ndarray | int, slot: int) -> np.ndarray:
        """In (0, 1): never 0, so a logarithm of it is finite."""
        u: np.ndarray = ((self._bits(run, attempt, slot) >> np.uint64(11)) + 0.5) * _U53
        return u

    def normal(self, run: np.ndarray, attempt: np.ndarray | int, slot: int) -> np.ndarray:
        """Standard normal (Box-Muller over the slots `slot` and `slot + 1`)."""
        u1 = self.uniform(run, attempt, slot)
        u2 = self.uniform(run, attempt, slot + 1)
        z: np.ndarray = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
        return z


class KeyedRandom(random.Random):
    """A `random.Random` whose bits come from (seed, stream, key): `at(run, attempt)`
    before handing it to a core function that draws (kit.core.retry's jitter), so the
    draw is the run's own, whatever was drawn before it."""

    def __init__(self, seed: int, stream: int) -> None:
        super().__init__(0)
        self._base = stream_key(seed, stream)
        self._key = self._base
        self._n = 0

    def at(self, run: int, attempt: int) -> KeyedRandom:
        self._key = _mix_int(_mix_int(self._base ^ (run & _MASK)) ^ (attempt << 8))
        self._n = 0
        return self

    def _next64(self) -> int:
        self._n += 1
        return _mix_int(self._key ^ self._n)

    def getrandbits(self, k: int, /) -> int:
        out, have = 0, 0
        while have < k:
            out |= self._next64() << have
            have += 64
        return out & ((1 << k) - 1)

    def random(self) -> float:
        return (self._next64() >> 11) * _U53
