"""An operator's file that a running service follows: read at start (a mistake raises,
so the service stops with one line), and read again when its modification time or size
changes, looked at no more often than every `recheck_s()`. An edit that cannot be read or
is invalid gives the closed policy until the file is fixed: a broken edit never widens
what tenants may do. The task policy and the tenant policy are both read this way."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from kit.core.errors import FieldError

P = TypeVar("P")


class WatchedFile(Generic[P]):
    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        read: Callable[[Path], P],
        empty: P,
        closed: Callable[[], P],
        recheck_s: Callable[[], float],
        log: logging.Logger,
        what: str,
        closed_means: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = Path(path) if path else None
        self._read, self._closed, self._recheck_s = read, closed, recheck_s
        self._log, self._what, self._closed_means = log, what, closed_means
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._checked_at = clock()
        self._policy = empty
        self.failed: str | None = None  # why the edited file was refused, while it is
        if self._path is not None:
            self._policy = read(self._path)  # fail at start
            self._stamp = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self._path.stat()  # type: ignore[union-attr]
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> P:
        if self._path is None or self._clock() - self._checked_at < self._recheck_s():
            return self._policy
        stamp = self._stat()
        with self._lock:
            self._checked_at = self._clock()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._policy = self._read(self._path)
                    self.failed = None
                    self._log.info("%s reloaded from %s", self._what, self._path)
                except FieldError as exc:
                    self._policy = self._closed()
                    self.failed = exc.reason
                    self._log.error("%s: %s; %s", self._what, exc.reason, self._closed_means)
            return self._policy
