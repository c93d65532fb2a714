"""The ledger's HTTP target: what an http task's run does to the world, recorded in the
same files and line format as chaos.ledger's command task (so the same auditor judges
both). A request to /effect with its run id as Idempotency-Key appends a `start` line;
the first for its key makes the effect (an `effect` line), any later one finds it made
(a `dedup` line): a target that honours the key, as the kit asks. /ok answers and
records nothing (traffic not audited).

The target is `chaos/ledgerd` (Go, standard library only), a process of its own that
this module starts and stops. It was a Python server (a thread per connection) in the
soak's own process, sharing its interpreter lock with the soak's sampler and side
traffic; the audit's start lag is read at the target (a request's arrival), so that
server's own queueing counted as the kit's lag.

A command task forks a shell per run (a few ms of CPU each); at hundreds of runs a
second the soak's bulk is http tasks to this target instead."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from kit.stack.process import progress

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "chaos" / "ledgerd" / "bin" / "ledgerd"
BUILD = ROOT / "scripts" / "build_ledger.sh"
READY_S = 10.0


def ledgerd_binary() -> Path:
    """The built target, built first when missing (the script installs Go if needed)."""
    if not BINARY.is_file():
        progress(f"chaos: building the HTTP target ({BUILD.relative_to(ROOT)})")
        subprocess.run(["bash", str(BUILD)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return BINARY


class LedgerServer:
    """`chaos/ledgerd` on a free loopback port, recording into `ledger`."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self._proc: subprocess.Popen[bytes] | None = None
        self._port = 0

    @property
    def server_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> LedgerServer:
        binary = ledgerd_binary()
        with tempfile.TemporaryDirectory(prefix="ledgerd-") as tmp:
            port_file = Path(tmp) / "port"
            self._proc = subprocess.Popen(
                [str(binary), "-dir", str(self.ledger), "-port-file", str(port_file)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + READY_S
            while not port_file.exists():
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{binary}: the HTTP target did not start")
                time.sleep(0.01)
            self._port = int(port_file.read_text())
        return self

    def stop(self) -> None:
        """SIGTERM: the target closes its files and exits; SIGKILL past 10 s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
