"""Failover of ``workgroup run`` daemons on the embedded coordinator.

Three measurements, on real daemon processes (``benchmarks/apps/failover_app.py``)
and a real ``workgroup coordinator`` on loopback, session timeout 6 s:

* **graceful handover**: two daemons; SIGTERM to the one whose leader is
  active; time until the other's leader handler starts (its first action,
  wall clock written by the handler).  A replacement daemon is started after
  each trial and given a second to join.
* **crash failover**: the same with SIGKILL (the session must expire first).
* **crash failover to a ready standby**: the same with
  ``@app.leader(..., standbys=1)``: the other daemon's standby warms up
  (0.5 s), reports ready, and its handler goes on as the leader once the
  session expired.  Each replacement daemon is a standby that reports ready
  before the next trial.  Target: session timeout + 0.5 s.
* **10,000 idle resources**: one daemon owning ``--items`` resources whose
  handlers wait for revocation: time until every lease is taken (its token
  committed), then RSS and CPU over ``--rest-s`` seconds at rest, and heartbeat
  punctuality: the gaps between the heartbeats each member sent (its
  ``member.heartbeat`` debug events, timestamped when the request was made), and
  any ``member.starved`` or ``member.session_lost`` warning.  Then ``--add``
  resources are added to its catalog: the time from the change until every new
  handler runs (including the wait for the next catalog read, every 5 s).

The rolling-bounce share (dynamic cooperative vs eager) is
``benchmarks/rolling_bounce.py``'s.  Usage::

    .venv/bin/python benchmarks/failover.py                  # 20 trials each (≈ 7 min)
    .venv/bin/python benchmarks/failover.py --trials 3 --items 1000 --rest-s 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from workgroup.testing import run_coordinator
from workgroup.testing.signals import interrupt_on_termination

ROOT = Path(__file__).resolve().parents[1]
SESSION_S = 6.0


class Daemons:
    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        items: int = 0,
        log_level: str = "warning",
        standbys: int = 0,
    ) -> None:
        self.bootstrap = bootstrap
        self.log_level = log_level
        self.out = workdir / "active.jsonl"
        self.events = workdir / "events.jsonl"
        self.workdir = workdir
        self.items = items
        self.standbys = standbys
        self.items_file = workdir / "items"
        self.items_file.write_text(str(items))
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        env.update(FAILOVER_OUT=str(self.out), FAILOVER_ITEMS=str(self.items), PYTHONUNBUFFERED="1")
        env["FAILOVER_STANDBYS"] = str(self.standbys)
        if self.items:
            env["FAILOVER_ITEMS_FILE"] = str(self.items_file)
        argv = [sys.executable, "-m", "workgroup", "run", "benchmarks.apps.failover_app:app"]
        argv += ["--bootstrap", self.bootstrap, "--log-level", self.log_level]
        argv += ["--log-format", "json"]
        argv += ["--event-log", str(self.events)]
        with (self.workdir / f"daemon-{len(self.processes)}.log").open("wb") as log:
            process = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self.processes.append(process)
        return process

    def records(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def actives(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if "time" in r]

    def wait_ready(self, pid: int, timeout_s: float = 30.0) -> None:
        """Until the standby of ``pid`` reported ready."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(r.get("pid") == pid and "ready" in r for r in self.records()):
                return
            time.sleep(0.01)
        raise RuntimeError(f"the standby of {pid} did not get ready")

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


def failover(bootstrap: str, trials: int, signum: int, standbys: int = 0) -> list[float]:
    """Seconds from the signal to the next leader's first action, per trial
    (``standbys``: the successor is a standby that reported ready first)."""
    with tempfile.TemporaryDirectory() as tmp:
        daemons = Daemons(bootstrap, Path(tmp), standbys=standbys)
        try:
            first = daemons.start()
            daemons.wait_active(after=0)
            by_pid = {first.pid: first}
            second = daemons.start()
            by_pid[second.pid] = second
            if standbys:
                daemons.wait_ready(second.pid)
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
                if standbys:  # the next trial's successor is ready, and the group knows
                    daemons.wait_ready(replacement.pid)
                # It joins the group; a random extra wait so that the signal falls
                # at any point of the members' heartbeat cycles.
                time.sleep(1.5 + random.uniform(0, 0.5))
            return results
        finally:
            daemons.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def held(path: Path) -> int:
    """How many resources the event log shows held now (a lease lost and taken
    again, as under load, counts once)."""
    if not path.exists():
        return 0
    holding: set[tuple[str, str, Any]] = set()
    with path.open() as lines:
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            resource = (entry["group"], entry["kind"], entry["key"])
            if entry["event"] == "acquired":
                holding.add(resource)
            else:
                holding.discard(resource)
    return len(holding)


def idle_resources(bootstrap: str, items: int, rest_s: float, add: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = {"items": items, "added": add}
    with tempfile.TemporaryDirectory() as tmp:
        daemons = Daemons(bootstrap, Path(tmp), items=items, log_level="debug")
        acquired = 0
        try:
            started = time.monotonic()
            daemon = daemons.start()
            while acquired < items + 1:
                acquired = held(daemons.events)
                if time.monotonic() - started > 600:
                    raise RuntimeError(f"only {acquired} of {items + 1} leases taken")
                time.sleep(0.1)
            result["all_started_s"] = time.monotonic() - started
            time.sleep(2.0)
            cpu_before, rest_from = cpu_s(daemon.pid), time.time()
            time.sleep(rest_s)
            rest_to = time.time()
            result["cpu_percent_at_rest"] = 100 * (cpu_s(daemon.pid) - cpu_before) / rest_s
            result["rss_mb"] = rss_mb(daemon.pid)
            if add:
                added_at = time.time()
                daemons.items_file.write_text(str(items + add))
                while held(daemons.events) < items + 1 + add:
                    if time.time() - added_at > 600:
                        raise RuntimeError(f"the {add} added leases were not all taken")
                    time.sleep(0.02)
                done_at = time.time()
                read_at = float(Path(f"{daemons.items_file}.read").read_text())
                result["added_started_s"] = done_at - added_at
                result["added_after_read_s"] = done_at - read_at
        finally:
            daemons.close()
        beats: dict[str, list[float]] = {}
        warnings = {"member.session_lost": [0, 0], "member.starved": [0, 0]}
        for line in (Path(tmp) / "daemon-0.log").read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            event = entry.get("event")
            if event not in warnings and event != "member.heartbeat":
                continue
            at = datetime.fromisoformat(entry["timestamp"]).timestamp()
            at_rest = rest_from <= at <= rest_to
            if event in warnings:
                warnings[event][1 if at_rest else 0] += 1
            elif at_rest:
                beats.setdefault(entry["group"], []).append(at)
        result["session_lost"] = warnings["member.session_lost"]
        result["starved"] = warnings["member.starved"]
        gaps = [b - a for times in beats.values() for a, b in itertools.pairwise(times)]
        result["heartbeats"] = sum(len(times) for times in beats.values())
        result["heartbeat_gap_max_s"] = max(gaps) if gaps else float("nan")
        result["heartbeat_gap_median_s"] = statistics.median(gaps) if gaps else float("nan")
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
    parser.add_argument("--add", type=int, default=1_000, help="resources added after the rest")
    parser.add_argument("--skip", default="", help="comma-separated: term,kill,standby,idle")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    report: dict[str, Any] = {}
    # A coordinator each: a killed daemon's session would hold up the next group.
    if "term" not in skip:
        with coordinator() as server:
            report["sigterm_s"] = failover(server.bootstrap, args.trials, signal.SIGTERM)
    if "kill" not in skip:
        with coordinator() as server:
            report["sigkill_s"] = failover(server.bootstrap, args.trials, signal.SIGKILL)
    if "standby" not in skip:
        with coordinator() as server:
            report["sigkill_standby_s"] = failover(
                server.bootstrap, args.trials, signal.SIGKILL, standbys=1
            )
    if "idle" not in skip:
        with coordinator() as server:
            report["idle"] = idle_resources(server.bootstrap, args.items, args.rest_s, args.add)
    print("failover (session timeout 6 s, heartbeat 500 ms, embedded coordinator)")
    print(f"{'measure':<34} │  median   │   max     │  n  │ target")
    if "sigterm_s" in report:
        print(row("SIGTERM → next leader acts", report["sigterm_s"], "median < 0.5 s, max < 1 s"))
    if "sigkill_s" in report:
        print(row("SIGKILL → next leader acts", report["sigkill_s"], f"≤ {SESSION_S + 1:.0f} s"))
    if "sigkill_standby_s" in report:
        print(
            row(
                "SIGKILL → ready standby leads",
                report["sigkill_standby_s"],
                f"≤ {SESSION_S + 0.5:.1f} s",
            )
        )
    if "idle" in report:
        idle = report["idle"]
        print(f"\none daemon, {idle['items']:,} idle resources + 1 leader")
        print(f"  all leases taken in    {idle['all_started_s']:.2f} s")
        print(f"  RSS                    {idle['rss_mb']:.0f} MB (target < 300 MB)")
        if idle.get("added"):
            print(
                f"  {idle['added']:,} added: all run {idle['added_after_read_s']:.2f} s after "
                f"the catalog read that saw them ({idle['added_started_s']:.2f} s after the "
                "change; the catalog is read every 5 s)"
            )
        print(f"  CPU at rest            {idle['cpu_percent_at_rest']:.1f} % of a core")
        print(
            f"  heartbeats sent        {idle['heartbeats']} over {args.rest_s:.0f} s (2 groups), "
            f"gap median {idle['heartbeat_gap_median_s'] * 1000:.0f} ms, max "
            f"{idle['heartbeat_gap_max_s'] * 1000:.0f} ms (interval 500 ms)"
        )
        print(
            f"  sessions lost          {idle['session_lost'][0]} while starting, "
            f"{idle['session_lost'][1]} at rest"
        )
        print(
            f"  event loop starved     {idle['starved'][0]} while starting, "
            f"{idle['starved'][1]} at rest (a deadline missed by > 500 ms)"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        main()
