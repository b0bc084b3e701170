"""Failover of ``workgroup run`` daemons on the embedded coordinator.

Three measurements, on real daemon processes (``benchmarks/apps/failover_app.py``)
and a real ``workgroup coordinator`` on loopback, session timeout 6 s:

* **graceful handover**: two daemons; SIGTERM to the one whose leader is
  active; time until the other's leader handler starts (its first action,
  wall clock written by the handler).  A replacement daemon is started after
  each trial and given a second to join.
* **crash failover**: the same with SIGKILL (the session must expire first).
* **10,000 idle resources**: one daemon owning ``--items`` resources whose
  handlers wait for revocation: time until every lease is taken (its token
  committed), then RSS and CPU over ``--rest-s`` seconds at rest, and heartbeat
  punctuality measured on the wire — the daemon talks to the coordinator
  through a proxy in this script that timestamps every Heartbeat request (API
  key 12), so the gaps are what the coordinator sees.

The rolling-bounce share (dynamic cooperative vs eager) is
``benchmarks/rolling_bounce.py``'s.  Usage::

    .venv/bin/python benchmarks/failover.py                  # 20 trials each (≈ 4 min)
    .venv/bin/python benchmarks/failover.py --trials 3 --items 1000 --rest-s 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workgroup.testing import run_coordinator
from workgroup.testing.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
SESSION_S = 6.0
HEARTBEAT_API_KEY = 12


class Daemons:
    def __init__(self, bootstrap: str, workdir: Path, items: int = 0) -> None:
        self.bootstrap = bootstrap
        self.out = workdir / "active.jsonl"
        self.events = workdir / "events.jsonl"
        self.workdir = workdir
        self.items = items
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        env.update(
            FAILOVER_OUT=str(self.out), FAILOVER_ITEMS=str(self.items), PYTHONUNBUFFERED="1"
        )
        argv = [sys.executable, "-m", "workgroup", "run", "benchmarks.apps.failover_app:app"]
        argv += ["--bootstrap", self.bootstrap, "--log-level", "warning"]
        argv += ["--event-log", str(self.events)]
        with (self.workdir / f"daemon-{len(self.processes)}.log").open("wb") as log:
            process = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self.processes.append(process)
        return process

    def actives(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def wait_active(self, *, after: float, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [a for a in self.actives() if a["time"] > after]
            if found:
                return found[0]
            time.sleep(0.005)
        raise RuntimeError("no leader became active")

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def failover(bootstrap: str, trials: int, signum: int) -> list[float]:
    """Seconds from the signal to the next leader's first action, per trial."""
    with tempfile.TemporaryDirectory() as tmp:
        daemons = Daemons(bootstrap, Path(tmp))
        try:
            first = daemons.start()
            daemons.wait_active(after=0)
            by_pid = {first.pid: first}
            second = daemons.start()
            by_pid[second.pid] = second
            time.sleep(1.5)
            results = []
            for _ in range(trials):
                active = daemons.actives()[-1]
                victim = by_pid.pop(active["pid"])
                signalled = time.time()
                os.kill(victim.pid, signum)
                successor = daemons.wait_active(after=signalled)
                results.append(successor["time"] - signalled)
                victim.wait(30)
                replacement = daemons.start()
                by_pid[replacement.pid] = replacement
                time.sleep(1.5)  # it joins the group
            return results
        finally:
            daemons.close()


class HeartbeatProxy:
    """A TCP proxy that timestamps every Heartbeat request passing through."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.heartbeats: list[float] = []
        self.port = free_port()

    async def serve(self, stop: asyncio.Event) -> None:
        server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
        async with server:
            await stop.wait()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def requests() -> None:
            while True:
                header = await reader.readexactly(4)
                (size,) = struct.unpack(">i", header)
                body = await reader.readexactly(size)
                (api_key,) = struct.unpack(">h", body[:2])
                if api_key == HEARTBEAT_API_KEY:
                    self.heartbeats.append(time.monotonic())
                up_writer.write(header + body)

        async def responses() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)

        tasks = [asyncio.create_task(requests()), asyncio.create_task(responses())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        writer.close()
        up_writer.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_resources(upstream: tuple[str, int], items: int, rest_s: float) -> dict[str, Any]:
    proxy = HeartbeatProxy(upstream)
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    import threading

    thread = threading.Thread(target=loop.run_until_complete, args=(proxy.serve(stop),))
    thread.start()
    time.sleep(0.2)
    result: dict[str, Any] = {"items": items}
    with tempfile.TemporaryDirectory() as tmp:
        daemons = Daemons(f"127.0.0.1:{proxy.port}", Path(tmp), items=items)
        try:
            started = time.monotonic()
            daemon = daemons.start()
            while True:
                if daemons.events.exists():
                    acquired = sum(1 for _ in daemons.events.open())
                    if acquired >= items + 1:
                        break
                if time.monotonic() - started > 300:
                    raise RuntimeError(f"only {acquired} of {items + 1} leases taken")
                time.sleep(0.1)
            result["all_started_s"] = time.monotonic() - started
            time.sleep(2.0)
            cpu_before, rest_started = cpu_s(daemon.pid), time.monotonic()
            first_beat = len(proxy.heartbeats)
            time.sleep(rest_s)
            rested = time.monotonic() - rest_started
            result["cpu_percent_at_rest"] = 100 * (cpu_s(daemon.pid) - cpu_before) / rested
            result["rss_mb"] = rss_mb(daemon.pid)
            beats = proxy.heartbeats[first_beat:]
            gaps = [b - a for a, b in zip(beats, beats[1:], strict=False)]
            result["heartbeats"] = len(beats)
            result["heartbeat_gap_max_s"] = max(gaps) if gaps else float("nan")
            result["heartbeat_gap_median_s"] = statistics.median(gaps) if gaps else float("nan")
            log_text = "".join(p.read_text() for p in Path(tmp).glob("daemon-*.log"))
            result["session_lost"] = log_text.count("member.session_lost")
        finally:
            daemons.close()
            loop.call_soon_threadsafe(stop.set)
            thread.join()
    return result


@contextmanager
def coordinator() -> Iterator[Any]:
    with run_coordinator("--min-session-timeout-ms", "1000") as server:
        yield server


def row(name: str, values: list[float], target: str) -> str:
    return (
        f"{name:<34} │ {statistics.median(values):7.3f} s │ {max(values):7.3f} s │ "
        f"{len(values):>3} │ {target}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rest-s", type=float, default=30.0)
    parser.add_argument("--skip", default="", help="comma-separated: term,kill,idle")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    report: dict[str, Any] = {}
    with coordinator() as server:
        if "term" not in skip:
            report["sigterm_s"] = failover(server.bootstrap, args.trials, signal.SIGTERM)
        if "kill" not in skip:
            report["sigkill_s"] = failover(server.bootstrap, args.trials, signal.SIGKILL)
        if "idle" not in skip:
            report["idle"] = idle_resources(
                (server.host, server.port), args.items, args.rest_s
            )
    print("failover (session timeout 6 s, heartbeat 500 ms, embedded coordinator)")
    print(f"{'measure':<34} │  median   │   max     │  n  │ target")
    if "sigterm_s" in report:
        print(row("SIGTERM → next leader acts", report["sigterm_s"], "median < 0.5 s, max < 1 s"))
    if "sigkill_s" in report:
        print(row("SIGKILL → next leader acts", report["sigkill_s"], f"≤ {SESSION_S + 1:.0f} s"))
    if "idle" in report:
        idle = report["idle"]
        print(f"\none daemon, {idle['items']:,} idle resources + 1 leader")
        print(f"  all leases taken in    {idle['all_started_s']:.2f} s")
        print(f"  RSS                    {idle['rss_mb']:.0f} MB (target < 300 MB)")
        print(f"  CPU at rest            {idle['cpu_percent_at_rest']:.1f} % of a core")
        print(
            f"  heartbeats on the wire {idle['heartbeats']} over {args.rest_s:.0f} s, gap "
            f"median {idle['heartbeat_gap_median_s'] * 1000:.0f} ms, max "
            f"{idle['heartbeat_gap_max_s'] * 1000:.0f} ms (interval 500 ms, 2 groups)"
        )
        print(f"  sessions lost          {idle['session_lost']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
