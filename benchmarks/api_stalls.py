"""What a mix's slowest calls wait for (issue 16, third round): one `cronfleet api`
process of this code under one of api_speed's mixes, while PostgreSQL's sessions are
sampled every 10 ms (`pg_stat_activity`: what each active backend of the API's database
waits on) and, with `--fsync-probe`, a file in /tmp is written and fdatasync'ed every
2 ms (the disk PostgreSQL's WAL is on).

    python benchmarks/api_stalls.py --mix 'jobs mix' --fsync-probe

Prints the mix's per-route figures, the wait events seen (samples of active backends:
`IO:WALSync` and `LWLock:WALWrite` are commits waiting for the WAL to reach the disk)
and the fdatasync latencies. The probe writes too, so it adds to the disk's load: the
mix's own figures are api_speed.py's, not these.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
import api_speed

WAITS_SQL = """
SELECT coalesce(wait_event_type || ':' || wait_event, state) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
    AND backend_type = 'client backend' AND state <> 'idle'"""


def sample_waits(stop: threading.Event, seen: collections.Counter[str]) -> None:
    import psycopg

    from kit.settings import load_settings
    from kit.store.pg_async import conninfo_of

    with psycopg.connect(conninfo_of(load_settings().database_url), autocommit=True) as conn:
        while not stop.is_set():
            for (event,) in conn.execute(WAITS_SQL):
                seen[event] += 1
            time.sleep(0.01)


def probe_fsync(stop: threading.Event, out: list[tuple[float, float]]) -> None:
    fd, path = tempfile.mkstemp(prefix="cf-fsync-")
    try:
        while not stop.is_set():
            os.write(fd, b"x" * 8192)
            began = time.perf_counter()
            os.fdatasync(fd)
            out.append((time.time(), time.perf_counter() - began))
            time.sleep(0.002)
    finally:
        os.close(fd)
        os.unlink(path)


def sample_writeback(stop: threading.Event, out: list[tuple[float, int, int, int]]) -> None:
    """The page cache's dirty and under-writeback KiB, and the disk's writes in flight
    (/proc/diskstats of the root's device), every 10 ms: does a stalled fdatasync meet
    the kernel writing back what other processes dirtied?"""
    dev = os.path.basename(os.path.realpath(_root_device()))
    while not stop.is_set():
        mem = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        in_flight = 0
        for line in Path("/proc/diskstats").read_text().splitlines():
            f = line.split()
            if f[2] == dev:
                in_flight = int(f[11])
        out.append(
            (
                time.time(),
                int(mem["Dirty"].split()[0]),
                int(mem["Writeback"].split()[0]),
                in_flight,
            )
        )
        time.sleep(0.01)


def _root_device() -> str:
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mount = line.split()[:2]
        if mount == "/":
            return dev
    return "vda"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mix", default="jobs mix", choices=list(api_speed.MIXES))
    parser.add_argument("--duration", type=int, default=12)
    parser.add_argument("--fsync-probe", action="store_true")
    parser.add_argument(
        "--writeback",
        action="store_true",
        help="sample the page cache's dirty and writeback KiB and the disk's writes in flight",
    )
    args = parser.parse_args()
    api_speed.migrate_stack()
    stop = threading.Event()
    waits: collections.Counter[str] = collections.Counter()
    fsyncs: list[tuple[float, float]] = []
    threads = [threading.Thread(target=sample_waits, args=(stop, waits))]
    if args.fsync_probe:
        threads.append(threading.Thread(target=probe_fsync, args=(stop, fsyncs)))
    writeback: list[tuple[float, int, int, int]] = []
    if args.writeback:
        threads.append(threading.Thread(target=sample_writeback, args=(stop, writeback)))
    idle: list[tuple[float, float]] = []
    if args.fsync_probe:  # the same probe for 5 s before the mix: the disk alone
        idle_stop = threading.Event()
        idle_probe = threading.Thread(target=probe_fsync, args=(idle_stop, idle))
        idle_probe.start()
        time.sleep(5)
        idle_stop.set()
        idle_probe.join()
    with tempfile.TemporaryDirectory(prefix="cf-api-stalls-") as tmp:
        port = api_speed.free_port()
        proc = api_speed.serve(None, 1, port, Path(tmp) / "api.log")
        try:
            for thread in threads:
                thread.start()
            summary: dict[str, Any] = api_speed.run_mix(
                args.mix, port, args.duration, Path(tmp) / "out"
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            api_speed.stop(proc)
    row = api_speed.figures(args.mix, summary)
    print(
        f"{args.mix}: {row['calls_per_s']:,.0f} calls/s, p50 {row['p50_ms']:.0f} ms, "
        f"p99 worst route {row['p99_ms']:.0f} ms, all calls {row.get('p99_all_calls_ms')} ms"
    )
    for route in summary["routes"]:
        print(
            f"    {route['name']}: {route['requests']} calls, p50 {route['p50_ms']} ms, "
            f"p99 {route['p99_ms']} ms, max {route['max_ms']} ms"
        )
    total = sum(waits.values())
    print(f"active backends sampled every 10 ms ({total:,} samples): what each waited on")
    for event, n in waits.most_common(10):
        print(f"    {event}: {n:,} ({n / max(1, total):.0%})")
    for label, probe in (("before the mix", idle), ("during the mix", fsyncs)):
        if not probe:
            continue
        lat = sorted(d for _, d in probe)
        t0 = probe[0][0]
        spikes = [(round(t - t0, 1), round(1000 * d)) for t, d in probe if d > 0.05]
        print(
            f"fdatasync of 8 KiB in /tmp {label}: {len(lat):,}, "
            f"p50 {1000 * lat[len(lat) // 2]:.2f} ms, "
            f"p99 {1000 * lat[int(0.99 * (len(lat) - 1))]:.2f} ms, max {1000 * lat[-1]:.0f} ms; "
            f"over 50 ms at (s, ms): {spikes}"
        )

    if writeback:
        report_writeback(writeback, fsyncs)


def report_writeback(
    samples: list[tuple[float, int, int, int]], fsyncs: list[tuple[float, float]]
) -> None:
    dirty = sorted(d for _, d, _, _ in samples)
    wb = sorted(w for _, _, w, _ in samples)
    print(
        f"page cache every 10 ms ({len(samples):,} samples): dirty KiB p50 "
        f"{dirty[len(dirty) // 2]:,} max {dirty[-1]:,}; writeback KiB p50 "
        f"{wb[len(wb) // 2]:,} max {wb[-1]:,}"
    )
    slow = [(t, d) for t, d in fsyncs if d > 0.05]
    if not slow or not samples:
        return
    print("each fdatasync over 50 ms, with the most under writeback and in flight in the")
    print("100 ms before it ended (KiB, requests):")
    for t, d in slow:
        near = [s for s in samples if t - d - 0.1 <= s[0] <= t]
        print(
            f"    {1000 * d:.0f} ms: writeback max {max((s[2] for s in near), default=0):,}, "
            f"dirty max {max((s[1] for s in near), default=0):,}, "
            f"in flight max {max((s[3] for s in near), default=0)}"
        )
    calm = [s for s in samples if all(abs(s[0] - t) > 0.2 for t, _ in slow)]
    if calm:
        print(
            f"    elsewhere: writeback max {max(s[2] for s in calm):,}, "
            f"in flight max {max(s[3] for s in calm)}"
        )


if __name__ == "__main__":
    main()
