"""`crash_point(name)`: where a test may make this process die (kit.core.crash_points).

Armed only by the test setting CRONFLEET_CRASH_AT (read once, when the process imports
this module: a service is started with it); unset, a call is one comparison and
returns. Armed, the process writes one line to stderr and sends itself SIGKILL at the
point: no handler, no `finally`, no flush of a buffer or commit of a transaction runs,
as when the host dies. Any module of the kit may import this one (it imports only
kit.core).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from kit.core.crash_points import SETTING, parse_crash_at

_armed = parse_crash_at(os.environ.get(SETTING, ""))
_passages = 0
_lock = threading.Lock()


def crash_point(name: str, when: object = True) -> None:
    """Die here if this is the armed point's nth passage; otherwise nothing. `when`
    false (a step that wrote nothing this time) is no passage: the point is reached
    when the step it follows did something."""
    if _armed is None or name != _armed[0] or not when:
        return
    _passed(name, _armed[1])


def _passed(name: str, nth: int) -> None:
    global _passages
    with _lock:
        _passages += 1
        if _passages < nth:
            return
        sys.stderr.write(f"crash point {name} reached (passage {nth}): SIGKILL\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
