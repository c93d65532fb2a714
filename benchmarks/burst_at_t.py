"""Where each worker thread's time goes in the burst's first second (issue 8: why the
kit's starts come in clumps the model does not have; docs/sim-storm.md).

Runs the life-of-a-run burst; 3 s before T it names every worker thread (`py-spy dump`
gives the OS thread id of each Python thread); from T - 0.2 s to T + 0.6 s it reads each
thread's /proc schedstat every 5 ms: time on a core, and time runnable but waiting for a
core (the run queue). A thread that neither runs nor waits for a core is asleep or
blocked: on a lock, on I/O, or on the interpreter lock (a GIL wait is a futex sleep).
Per worker it prints 20 ms slots: the hold thread's time on a core, its run-queue wait,
and the other threads' time on a core (which of them), then the totals from T to T + 0.3 s.

Every other task on the machine is sampled the same way from T - 1 s to T + 1 s (--before,
--after): the scheduler, the reaper, each PostgreSQL backend named by the client it serves
(its process title gives the client's port, the port's socket its owner), the broker's
threads, the benchmark, this sampler, PostgreSQL's own processes and everything else. It
prints each category's time on a core and in the run queue before T, in the first 300 ms
and after, per 20 ms slot, and the busiest tasks; all_at_t.json in --out keeps them.
The sampler's own CPU (about a fifth of a core at 5 ms) is printed as `sampler`.

A calibration run of the storm model (docs/sim-storm.md) samples every 100 ms from the
scan-ahead's start (T - 11 s) to past the last finish (T + 6 s), so the sampler hardly
loads the machine it measures and every step is seen thread by thread (the `ahead` and
`after` windows, a 250 ms timeline), and feeds both files to the calibration:

    python benchmarks/burst_at_t.py --before 11 --after 6 --period-ms 100 \
        --out /tmp/cal
    cronfleet calibrate --only-worker-starts --storm-cpu /tmp/cal/burst-1node.json \
        --storm-at-t /tmp/cal/all_at_t.json --out sim/profiles/default.toml

    python benchmarks/burst_at_t.py --out /tmp/burst-at-t

Reading /proc costs the sampler, not the workers (no ptrace, no pause).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DUE = re.compile(r"due (\S+ \S+) \(")
THREAD = re.compile(r'Thread (\d+) \([^)]*\): "([^"]+)"')
SLOT_S = 0.02


def worker_pids() -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", "worker --topic-prefix cf_bench_life"], capture_output=True
    )
    return sorted(int(p) for p in out.stdout.split())


def scheduler_pids() -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", "scheduler --topic-prefix cf_bench_life"], capture_output=True
    )
    return sorted(int(p) for p in out.stdout.split())


def thread_names(pid: int) -> dict[int, str]:
    out = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True)
    return {int(tid): name for tid, name in THREAD.findall(out.stdout)}


def schedstat(pid: int, tid: int) -> tuple[int, int] | None:
    """(ns on a core, ns runnable waiting for one) so far."""
    try:
        on, wait, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return int(on), int(wait)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument(
        "--lead-s", type=int, default=40, help="the burst's second T = now + this (life_of_a_run)"
    )
    ap.add_argument("--before", type=float, default=1.0, help="sample from T - this (s)")
    ap.add_argument("--after", type=float, default=1.0, help="sample until T + this (s)")
    ap.add_argument(
        "--fine-ms",
        type=float,
        default=0.0,
        help="between sweeps from T - 0.2 s to T + 0.6 s, each with the CPU every task ran "
        "on (who shared each hold thread's core); 0: --period-ms throughout",
    )
    ap.add_argument(
        "--period-ms",
        type=float,
        default=5.0,
        help="between sweeps; 100 for a calibration run (the window totals only, the "
        "sampler's own CPU then negligible: cronfleet calibrate --storm-at-t)",
    )
    args = ap.parse_args()
    if shutil.which("py-spy") is None:
        # found otherwise only 3 s before T, with the burst's 50,000 jobs made for nothing
        sys.exit("burst_at_t: py-spy is missing (pip install -e '.[bench]')")
    args.out.mkdir(parents=True, exist_ok=True)
    bench = subprocess.Popen(
        [
            *(sys.executable, "-u", "benchmarks/life_of_a_run.py", "--mode", "burst"),
            *("--jobs", str(args.jobs), "--workers", "2", "--concurrency", "1024"),
            *("--lead-s", str(args.lead_s)),
            *("--out", str(args.out)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert bench.stdout is not None
    log = (args.out / "benchmark.log").open("w")
    due: datetime | None = None
    for line in bench.stdout:
        log.write(line)
        print(line, end="")
        if (m := DUE.search(line)) is not None:
            due = datetime.fromisoformat(m.group(1))
            break
    if due is None:
        sys.exit("the benchmark did not say when T is")
    t = due.timestamp()
    # name the threads once the fleet is warm (its threads exist), before sampling starts
    time.sleep(max(0.0, min(t - 3, t - args.before - 2) - time.time()))
    names = {pid: thread_names(pid) for pid in worker_pids()}
    sched = {pid: thread_names(pid) for pid in scheduler_pids()}
    owners = socket_owners([*names, *sched, *fleet_pids(), bench.pid])
    sampler = Sampler(names, bench.pid, owners, sched)
    # every task of the machine opened and named now (on a busy machine, a second or more),
    # so the first sweep falls at T - before, not after it
    sampler.refresh()
    time.sleep(max(0.0, t - args.before - time.time()))
    fine = (-0.2, 0.6, args.fine_ms / 1000) if args.fine_ms > 0 else None
    sampler.run(t, t - args.before, t + args.after, args.period_ms / 1000, fine)
    for line in bench.stdout:
        log.write(line)
        print(line, end="")
    bench.wait()
    samples = [(at, pid, tid, on, wait) for at, pid, tid, on, wait in sampler.samples if at >= -0.2]
    for pid, threads in names.items():
        report(pid, threads, [s for s in samples if s[1] == pid])
    report_all(sampler, args.out / "all_at_t.json", args.after)
    if sampler.placed:
        report_cores(sampler, args.out / "cores_at_t.json")


def report(
    pid: int, threads: dict[int, str], samples: list[tuple[float, int, int, int, int]]
) -> None:
    """Per 20 ms slot: ms on a core and ms waiting for one, per thread."""
    by_tid: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    for at, _, tid, on, wait in samples:
        by_tid[tid].append((at, on, wait))
    slots: dict[int, dict[int, tuple[float, float]]] = defaultdict(dict)
    totals: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for tid, rows in by_tid.items():
        for (a0, on0, w0), (_, on1, w1) in pairwise(rows):
            slot = int((a0 + 0.2) / SLOT_S)
            on_ms, wait_ms = (on1 - on0) / 1e6, (w1 - w0) / 1e6
            prev = slots[slot].get(tid, (0.0, 0.0))
            slots[slot][tid] = (prev[0] + on_ms, prev[1] + wait_ms)
            if 0 <= a0 < 0.3:
                totals[tid][0] += on_ms
                totals[tid][1] += wait_ms
    hold = next((tid for tid, n in threads.items() if n == "hold"), None)
    print(f"\nworker {pid}: threads {sorted(set(threads.values()))}")
    print("  slot      hold on-core / run-queue ms   others on-core ms (busiest)")
    for slot in sorted(slots):
        at = slot * SLOT_S - 0.2
        row = slots[slot]
        h_on, h_wait = row.get(hold, (0.0, 0.0)) if hold is not None else (0.0, 0.0)
        others = {tid: v[0] for tid, v in row.items() if tid != hold}
        busiest = max(others, key=lambda k: others[k]) if others else None
        name = threads.get(busiest, "?") if busiest is not None else "-"
        print(
            f"  T{at:+.2f}   {h_on:5.1f} / {h_wait:5.1f}             {sum(others.values()):5.1f}"
            f" ({name} {others.get(busiest, 0.0):.1f})"
        )
    print("  T..T+0.3 s, ms on a core / waiting for one, per thread:")
    for tid, (on, wait) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        if on + wait >= 0.5:
            print(f"    {threads.get(tid, tid)!s:>24}  {on:6.1f} / {wait:6.1f}")


# -- every process on the machine ---------------------------------------------------------

PG_PORT = re.compile(r"\((\d+)\)")
FLEET = re.compile(r"kit\.cli (\w+) --topic-prefix cf_bench_life")


def fleet_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "--topic-prefix cf_bench_life"], capture_output=True)
    return sorted(int(p) for p in out.stdout.split())


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def comm(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def socket_owners(pids: list[int]) -> dict[int, int]:
    """Local TCP port -> pid, for these processes' sockets (which client a PostgreSQL
    backend serves: its process title names the client's port)."""
    inode_pid: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inode_pid[link[8:-1]] = pid
        except OSError:
            continue
    out: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[9] in inode_pid:
                out[int(f[1].rsplit(":", 1)[1], 16)] = inode_pid[f[9]]
    return out


class Sampler:
    """Every task's schedstat (ns on a core, ns waiting in the run queue) every 5 ms, each
    task named by what it is: a worker's thread, the scheduler, a PostgreSQL backend and
    the client it serves, the broker, the benchmark, this sampler, the rest."""

    def __init__(
        self,
        workers: dict[int, dict[int, str]],
        bench: int,
        owners: dict[int, int],
        schedulers: dict[int, dict[int, str]] | None = None,
    ):
        self.workers = workers
        self.schedulers = schedulers or {}
        self.bench = bench
        self.owners = owners
        self.fds: dict[tuple[int, int], int] = {}
        self.label: dict[tuple[int, int], tuple[str, str]] = {}  # (category, thread)
        self.samples: list[tuple[float, int, int, int, int]] = []
        self.stat_fds: dict[tuple[int, int], int] = {}
        self.placed: list[tuple[float, int, int, int]] = []  # (s from T, pid, tid, its CPU)
        self.provisional: set[tuple[int, int]] = set()
        self.machine: list[tuple[float, int]] = []  # (s from T, busy ticks of all cores)
        self.stat = os.open("/proc/stat", os.O_RDONLY)
        self.worker_no = {pid: i + 1 for i, pid in enumerate(sorted(workers))}
        self.tick_s = 1 / os.sysconf("SC_CLK_TCK")

    def name(self, pid: int, tid: int) -> tuple[str, str]:
        thread = comm(pid, tid)
        if pid == os.getpid():
            return "sampler", thread
        if pid == self.bench:
            return "benchmark", thread
        if pid in self.workers:
            return f"worker-{self.worker_no[pid]}", self.workers[pid].get(tid, thread)
        if pid in self.schedulers:
            return "scheduler", self.schedulers[pid].get(tid, thread)
        cmd = cmdline(pid)
        if (m := FLEET.search(cmd)) is not None:
            return m.group(1), thread
        if cmd.startswith("postgres") and not cmd.startswith("postgres: "):
            self.provisional.add((pid, tid))  # a backend just forked, its title not set yet
            return "postgres, starting", str(pid)
        if cmd.startswith("postgres: "):
            if "cf_bench_life_" in cmd and (port := PG_PORT.search(cmd)) is not None:
                owner = self.owners.get(int(port.group(1)))
                if owner is None:  # a connection opened since: look its client up again
                    self.owners.update(
                        socket_owners([*self.workers, *self.schedulers, *fleet_pids(), self.bench])
                    )
                    owner = self.owners.get(int(port.group(1)))
                if owner in self.worker_no:
                    return f"postgres for worker-{self.worker_no[owner]}", str(pid)
                if owner == self.bench:
                    return "postgres for the benchmark", str(pid)
                if owner is not None and (m := FLEET.search(cmdline(owner))) is not None:
                    return f"postgres for {m.group(1)}", str(pid)
                return "postgres for ?", str(pid)
            return "postgres, other", cmd[10:40]
        if "java" in cmd and "kafka" in cmd:
            return "broker", thread
        if not cmd:
            return "kernel", thread
        return "other processes", f"{pid} {thread}"

    def refresh(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                if (pid, tid) in self.fds:
                    continue
                try:
                    self.fds[pid, tid] = os.open(f"/proc/{pid}/task/{tid}/schedstat", os.O_RDONLY)
                    self.stat_fds[pid, tid] = os.open(f"/proc/{pid}/task/{tid}/stat", os.O_RDONLY)
                except OSError:
                    continue
                self.label[pid, tid] = self.name(pid, tid)
        for key in list(self.provisional):  # name again what had no title yet
            self.provisional.discard(key)
            self.label[key] = self.name(*key)

    def sweep(self, at: float, placement: bool = False) -> None:
        """Every task's schedstat; with `placement`, also the CPU each task last ran on
        (/proc/.../stat, field 39)."""
        for (pid, tid), fd in list(self.fds.items()):
            try:
                on, wait, _ = os.pread(fd, 128, 0).split()
            except (OSError, ValueError):
                os.close(fd)
                del self.fds[pid, tid]
                continue
            self.samples.append((at, pid, tid, int(on), int(wait)))
            if placement and (sfd := self.stat_fds.get((pid, tid))) is not None:
                try:
                    cpu_of_task = int(os.pread(sfd, 1024, 0).rsplit(b")", 1)[1].split()[36])
                except (OSError, ValueError, IndexError):
                    continue
                self.placed.append((at, pid, tid, cpu_of_task))
        cpu = os.pread(self.stat, 256, 0).split(b"\n", 1)[0].split()
        self.machine.append((at, sum(int(v) for v in (cpu[1], cpu[2], cpu[3], cpu[6], cpu[7]))))

    def run(
        self,
        t: float,
        since: float,
        until: float,
        period_s: float,
        fine: tuple[float, float, float] | None = None,
    ) -> None:
        """A sweep every period_s from `since` until `until` (so at T itself and T + 0.3 s
        when they fall on the grid); in `fine` = (from, to, period), seconds from T, every
        fine period, with each task's CPU."""
        self.refresh()
        refreshed = time.time()
        step_ms = round(period_s * 1000)
        fine_ms = None if fine is None else (round(fine[0] * 1000), round(fine[1] * 1000))
        target_ms = round((since - t) * 1000)  # ms from T of the next sweep
        while (now := time.time()) < until:
            if now - refreshed > 0.25:
                self.refresh()
                refreshed = now
            in_fine = fine_ms is not None and fine_ms[0] <= target_ms < fine_ms[1]
            self.sweep(time.time() - t, placement=in_fine)
            if fine is not None and in_fine:
                target_ms += round(fine[2] * 1000)
            else:
                target_ms += step_ms
                if fine_ms is not None and target_ms - step_ms < fine_ms[0] < target_ms:
                    target_ms = fine_ms[0]
            time.sleep(max(0.0, t + target_ms / 1000 - time.time()))


# the scan-ahead phase as benchmarks/life_of_a_run.py's cpu_by_phase_s counts it (from the
# scan-ahead + 0.5 s before T), and after T
AHEAD_S = 10.5
TIMELINE_SLOT_S = 0.25


def role(cat: str, thread: str) -> str:
    """A worker's or the scheduler's thread by what it does: the worker's hold, finisher,
    fence and heartbeat threads, its main thread (consume, claim, into the wheel: the claim
    path), librdkafka's own threads (`rdk:*`, no interpreter lock) and the rest (clock,
    link, task loop); the scheduler's scan and publish threads, librdkafka's, the rest."""
    if cat.startswith("worker-"):
        if thread in ("hold", "finisher", "fence", "heartbeat"):
            return f"{cat} {thread}"
        if thread == "MainThread":
            return f"{cat} main"
        return f"{cat} native" if thread.startswith("rdk:") else f"{cat} other"
    if cat == "scheduler":
        for part in ("scan", "publish"):
            if thread.endswith(f"-{part}"):
                return f"scheduler {part}"
        return "scheduler native" if thread.startswith("rdk:") else "scheduler other"
    return cat


def report_all(s: Sampler, out: Path, after_s: float = 1.0) -> None:
    """Per category: ms on a core and ms in the run queue, T-0.3..T, T..T+0.3, T+0.3..T+1
    (and, when sampled that long, the scan-ahead phase and after T), per 20 ms slot from
    T-0.1, per 250 ms slot over the whole sampled time, and the busiest tasks from T to
    T+0.3 s."""
    rows: dict[tuple[int, int], list[tuple[float, int, int]]] = defaultdict(list)
    for at, pid, tid, on, wait in s.samples:
        rows[pid, tid].append((at, on, wait))
    windows = {"T-0.3..T": (-0.3, 0.0), "T..T+0.3": (0.0, 0.3), "T+0.3..T+1": (0.3, 1.0)}
    first = s.machine[0][0] if s.machine else 0.0
    if first <= -AHEAD_S + 0.05:  # sampled from the scan-ahead phase's start
        windows["ahead"] = (-AHEAD_S, 0.0)
        windows["after"] = (0.0, after_s)
    by_cat: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    by_task: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    slots: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hold_wait: dict[int, float] = defaultdict(float)
    timeline: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for key, r in rows.items():
        cat = role(*s.label[key])
        for (a0, on0, w0), (_, on1, w1) in pairwise(r):
            on_ms, wait_ms = (on1 - on0) / 1e6, (w1 - w0) / 1e6
            timeline[cat][math.floor(a0 / TIMELINE_SLOT_S)] += on_ms
            for w, (lo, hi) in windows.items():
                if lo <= a0 < hi:
                    by_cat[cat][w][0] += on_ms
                    by_cat[cat][w][1] += wait_ms
            if 0 <= a0 < 0.3:
                by_task[key][0] += on_ms
                by_task[key][1] += wait_ms
            if -0.1 <= a0 < 0.5:
                slots[cat][int((a0 + 0.1) / SLOT_S)] += on_ms
                if cat.endswith(" hold"):
                    hold_wait[int((a0 + 0.1) / SLOT_S)] += wait_ms
    machine: dict[str, float] = defaultdict(float)
    mslots: dict[int, float] = defaultdict(float)
    for (a0, b0), (_, b1) in pairwise(s.machine):
        ms = (b1 - b0) * s.tick_s * 1000
        timeline["machine busy (/proc/stat)"][math.floor(a0 / TIMELINE_SLOT_S)] += ms
        for w, (lo, hi) in windows.items():
            if lo <= a0 < hi:
                machine[w] += ms
        if -0.1 <= a0 < 0.5:
            mslots[int((a0 + 0.1) / SLOT_S)] += ms
    cats = sorted(by_cat, key=lambda c: -by_cat[c]["T..T+0.3"][0])
    print("\nevery process, ms on a core / ms waiting for one (schedstat):")
    print(f"  {'':<30}" + "".join(f"{w:>20}" for w in windows))
    for c in cats:
        cells = "".join(f"{by_cat[c][w][0]:11.1f} /{by_cat[c][w][1]:7.1f}" for w in windows)
        print(f"  {c:<30}{cells}")
    total = {w: sum(by_cat[c][w][0] for c in cats) for w in windows}
    print(f"  {'sum of the tasks':<30}" + "".join(f"{total[w]:11.1f}        " for w in windows))
    print(
        f"  {'machine busy (/proc/stat)':<30}"
        + "".join(f"{machine[w]:11.1f}        " for w in windows)
    )
    print("\nper 20 ms slot, ms on a core (hold wait: both hold threads' run-queue ms):")
    cols = [c for c in cats if sum(slots[c].values()) >= 1.0]
    print("  slot    " + "".join(f"{c[:14]:>15}" for c in cols) + "      hold wait   machine")
    for k in range(int(0.6 / SLOT_S)):
        cells = "".join(f"{slots[c].get(k, 0.0):15.1f}" for c in cols)
        print(
            f"  T{k * SLOT_S - 0.1:+.2f}  {cells}  {hold_wait.get(k, 0.0):13.1f}"
            f"  {mslots.get(k, 0.0):8.0f}"
        )
    print("\nbusiest tasks, T..T+0.3 s (ms on a core / waiting):")
    for key, (on, wait) in sorted(by_task.items(), key=lambda kv: -kv[1][0])[:20]:
        cat, thread = s.label[key]
        print(f"  {role(cat, thread):<28} {thread:<26} {on:7.1f} / {wait:6.1f}")
    if "ahead" in windows:
        print(f"\nper {TIMELINE_SLOT_S * 1000:.0f} ms slot, ms on a core:")
        tcols = [c for c in cats if sum(timeline[c].values()) >= 20.0]
        tcols.append("machine busy (/proc/stat)")
        print("  slot    " + "".join(f"{c[:14]:>15}" for c in tcols))
        for k in sorted({k for c in tcols for k in timeline[c]}):
            cells = "".join(f"{timeline[c].get(k, 0.0):15.1f}" for c in tcols)
            print(f"  T{k * TIMELINE_SLOT_S:+6.2f}{cells}")
    out.write_text(
        json.dumps(
            {
                "windows": windows,
                "period_ms": round(
                    1000 * (s.machine[-1][0] - s.machine[0][0]) / max(1, len(s.machine) - 1), 2
                ),
                "by_category_ms": {c: dict(by_cat[c]) for c in cats},
                "machine_busy_ms": machine,
                "sampler_cpu_ms": sum(
                    (r[-1][1] - r[0][1]) / 1e6
                    for k, r in rows.items()
                    if s.label[k][0] == "sampler"
                ),
                "sampled_s": [s.machine[0][0], s.machine[-1][0]] if s.machine else [],
                "slots_ms": {
                    c: {f"{k * SLOT_S - 0.1:+.2f}": v for k, v in slots[c].items()} for c in cols
                },
                "timeline_slot_s": TIMELINE_SLOT_S,
                "timeline_ms": {
                    c: {f"{k * TIMELINE_SLOT_S:+.2f}": round(v, 3) for k, v in sorted(t.items())}
                    for c, t in timeline.items()
                },
                "tasks_t_to_t03_ms": [
                    [*s.label[k], on, wait]
                    for k, (on, wait) in sorted(by_task.items(), key=lambda kv: -kv[1][0])
                    if on + wait > 0.1
                ],
            },
            indent=1,
        )
    )


def report_cores(s: Sampler, out: Path) -> None:
    """Who shared each core at the second: per fine slot, each CPU's ms on a core by
    category (a task's time in a slot counted on the CPU it was seen on at its end)."""
    where = {(at, pid, tid): c for at, pid, tid, c in s.placed}
    fine_at = sorted({at for at, _, _, _ in s.placed})
    rows: dict[tuple[int, int], list[tuple[float, int]]] = defaultdict(list)
    for at, pid, tid, on, _ in s.samples:
        if fine_at and fine_at[0] <= at <= fine_at[-1]:
            rows[pid, tid].append((at, on))
    cells: dict[tuple[float, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key, r in rows.items():
        cat = role(*s.label[key])
        for (a0, on0), (a1, on1) in pairwise(r):
            cpu = where.get((a1, *key))
            if cpu is None or on1 == on0:
                continue
            cells[a0, cpu][cat] += (on1 - on0) / 1e6
    cpus = sorted({c for _, c in cells})
    print("\nper fine slot, each CPU: ms on it (hold threads apart, the rest by category):")
    for a0 in fine_at[:-1]:
        parts = []
        for c in cpus:
            cell = cells.get((a0, c), {})
            holds = " ".join(f"{k[:8]} {v:4.1f}" for k, v in sorted(cell.items()) if "hold" in k)
            rest = sorted(((v, k) for k, v in cell.items() if "hold" not in k), reverse=True)
            top = ", ".join(f"{k} {v:.1f}" for v, k in rest[:3])
            parts.append(f"cpu{c}: {holds or '-':<18} rest {sum(v for v, _ in rest):5.1f} ({top})")
        print(f"  T{a0:+.3f}  " + " | ".join(parts))
    out.write_text(
        json.dumps(
            {
                f"{a0:+.3f}": {str(c): dict(cells.get((a0, c), {})) for c in cpus}
                for a0 in fine_at[:-1]
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
