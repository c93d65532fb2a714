"""How long a broker kill stops the kit's Kafka clients: from the SIGKILL of the stack's
broker to (a) the restarted broker answering (`cronfleet stack up` returning, what a
drill's heal waits for), (b) the first run a long-lived `RunPublisher` gets confirmed
after the kill, (c) the first run published after the kill that a long-lived
`TieredConsumer` (a static member, as a worker's) reads. Every round printed.

    python benchmarks/broker_restart.py --rounds 3 --json OUT.json [--before TREE]

With `--before TREE` each round runs twice, TREE's kit first, then this one's, each in a
child process with that kit on its path: the broker's settings (`kit.stack`) and the
clients' (`kit.transport`) both come from the kit imported, so the pair compares them.
The broker runs in a stack home of its own (`--home`, default
$CRONFLEET_HOME/bench-broker), never the development stack's; it is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from series_report import every_run, write_rows

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "bench-restart"
STEADY_S = 3.0  # clients reading before the kill
DOWN_S = 1.0  # broker dead before its restart, as the soak's nemesis (0.5-3 s)
AFTER_S = 60.0  # how long the clients are given to come back


def _stack(home: Path, *args: str) -> None:
    """`cronfleet stack ARGS` of the kit this process imported (its tree first on the path)."""
    import kit

    tree = Path(kit.__file__).resolve().parent.parent
    env = os.environ | {"CRONFLEET_HOME": str(home), "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-m", "kit.cli", "stack", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree)  # fmt: skip


def one_round(home: Path) -> dict[str, float | None]:
    """Start the broker, run the clients, kill it, start it again; seconds from the kill."""
    os.environ["CRONFLEET_HOME"] = str(home)
    from kit.stack.kafka.broker import Broker
    from kit.transport import RunMessage
    from kit.transport.consumer import TieredConsumer
    from kit.transport.publisher import RunPublisher
    from kit.transport.topics import ensure_topics

    _stack(home, "up", "--only", "kafka")
    broker = Broker(home / "kafka")
    bootstrap = broker.bootstrap()
    ensure_topics(bootstrap, 3, prefix=PREFIX, tiers=["critical"])
    publisher = RunPublisher(bootstrap, topic_prefix=PREFIX)
    consumer = TieredConsumer(bootstrap, f"{PREFIX}-group", ["critical"], topic_prefix=PREFIX,
                              instance_id="bench")  # fmt: skip
    confirmed: list[float] = []  # monotonic instants of confirmed publishes
    read: list[tuple[float, int]] = []  # (monotonic instant, wall ms it was published)
    stop = threading.Event()

    def publish() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            message = RunMessage(
                str(uuid.uuid4()),
                str(uuid.UUID(int=n % 97)),
                1,
                int(time.time() * 1000),
                "critical",
            )
            try:
                publisher.publish([message], timeout_s=10.0)
                confirmed.append(time.monotonic())
            except Exception:
                pass
            stop.wait(0.02)

    def consume() -> None:
        while not stop.is_set():
            batch = consumer.poll_batch(500, 0.2)
            at = time.monotonic()
            read.extend((at, m.scheduled_at_ms) for m in batch)
            if batch:
                with contextlib.suppress(Exception):
                    consumer.commit()

    threads = [threading.Thread(target=f, daemon=True) for f in (publish, consume)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while not read and time.monotonic() < deadline:  # the group's first join
        time.sleep(0.1)
    time.sleep(STEADY_S)
    steady = len(read)
    if not steady or not confirmed:
        raise RuntimeError(f"no traffic before the kill: {len(confirmed)} confirmed, {steady} read")
    pid = broker.pid()
    assert pid is not None, "the broker is not running"
    killed, killed_wall_ms = time.monotonic(), int(time.time() * 1000)
    os.killpg(pid, signal.SIGKILL)
    while broker.pid() is not None:
        time.sleep(0.05)
    time.sleep(DOWN_S)
    _stack(home, "up", "--only", "kafka")
    answered = time.monotonic() - killed
    deadline = time.monotonic() + AFTER_S
    while time.monotonic() < deadline:
        if any(t > killed for t in confirmed) and any(w > killed_wall_ms for _, w in read):
            break
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(15)
    consumer.close()
    _stack(home, "down", "--only", "kafka")
    first_confirm = next((t - killed for t in confirmed if t > killed), None)
    first_read = next((t - killed for t, w in read if w > killed_wall_ms), None)
    return {
        "read_before_kill": steady,
        "answers_s": round(answered, 2),
        "first_confirm_s": None if first_confirm is None else round(first_confirm, 2),
        "first_read_s": None if first_read is None else round(first_read, 2),
    }


def _child(tree: Path, home: Path) -> dict[str, float | None]:
    env = os.environ | {"PYTHONPATH": str(tree)}
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "import broker_restart as b; from pathlib import Path; "
        "print(json.dumps(b.one_round(Path(sys.argv[2]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(home)],
        env=env, capture_output=True, text=True, cwd=tree, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"round failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a tree of the kit to compare against")
    parser.add_argument("--home", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    home = (
        args.home
        or Path(os.environ.get("CRONFLEET_HOME", Path.home() / ".cronfleet")).expanduser()
        / "bench-broker"
    )
    kits = [("before", args.before.resolve()), ("after", ROOT)] if args.before else [("this", ROOT)]
    rows = []
    print(f"# python benchmarks/broker_restart.py --rounds {args.rounds}"
          + (" --before TREE" if args.before else ""))  # fmt: skip
    print("round  kit     answers s  first confirmed s  first read s")
    for n in range(1, args.rounds + 1):
        for label, tree in kits:
            row = {"round": n, "kit": label, **_child(tree, home)}
            rows.append(row)
            print(f"{n:>5}  {label:<6}  {row['answers_s']:>9}  {row['first_confirm_s']!s:>17}"
                  f"  {row['first_read_s']!s:>12}", flush=True)  # fmt: skip
    for label, _ in kits:
        mine = [r for r in rows if r["kit"] == label]
        for key in ("answers_s", "first_confirm_s", "first_read_s"):
            values = [r[key] for r in mine if r[key] is not None]
            if values:
                print(every_run(f"{label} {key}", values))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
