"""Three ``workgroup run`` daemons under random SIGKILL, SIGSTOP/SIGCONT (shorter
and longer than the session) and restarts (same instance id or new), then the
guarantees checked from what every handler recorded:

(a) each resource's tokens strictly increase with every acquisition;
(b) once a commit of a newer token was accepted, no commit of an older token is
    (a commit is recorded once accepted; its send time bounds its acceptance);
(c) each new holder starts from the last accepted checkpoint (or from one commit
    later: a holder killed between the coordinator's answer and its record);
(d) when the chaos is over, every resource is owned by exactly one member.

``CHAOS_SECONDS`` (default 30) and ``CHAOS_SEED`` (default: random, printed)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workgroup.admin import describe_group
from workgroup.testing import run_coordinator

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = {f"shard/s{i}" for i in range(6)} | {"leader/writer"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


class Cluster:
    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.out = workdir / "records.jsonl"
        self.workdir = workdir
        self.slots: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[str] = set()
        self.started = 0

    def start(self, slot: str, instance: str | None) -> None:
        argv = [sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.chaos_app:app"]
        argv += ["--bootstrap", self.bootstrap, "--log-level", "warning", "--log-format", "json"]
        if instance:
            argv += ["--instance-id", instance]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        env["CHAOS_OUT"] = str(self.out)
        with (self.workdir / f"daemon-{self.started}.log").open("wb") as log:
            self.slots[slot] = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self.started += 1

    def signal(self, slot: str, signum: int) -> None:
        process = self.slots[slot]
        if process.poll() is None:
            os.kill(process.pid, signum)

    def close(self) -> None:
        for process in self.slots.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
            process.wait()


def records(path: Path) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a torn line of a killed process
            continue
    return out


def chaos(cluster: Cluster, rng: random.Random, seconds: float) -> list[str]:
    actions = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.5, 2.0))
        slot = rng.choice(sorted(cluster.slots))
        if slot in cluster.paused:
            cluster.signal(slot, signal.SIGCONT)
            cluster.paused.discard(slot)
            actions.append(f"resume {slot}")
            continue
        action = rng.choice(["kill", "pause", "term", "restart-static", "restart-new"])
        if action == "pause":
            cluster.signal(slot, signal.SIGSTOP)
            cluster.paused.add(slot)
        elif action in ("kill", "term"):
            cluster.signal(slot, signal.SIGKILL if action == "kill" else signal.SIGTERM)
            cluster.slots[slot].wait(30)
            cluster.start(slot, slot if rng.random() < 0.5 else None)
        else:
            cluster.signal(slot, signal.SIGKILL)
            cluster.slots[slot].wait(30)
            cluster.start(slot, slot if action == "restart-static" else None)
        actions.append(f"{action} {slot}")
    for slot in list(cluster.paused):
        cluster.signal(slot, signal.SIGCONT)
    cluster.paused.clear()
    return actions


def test_no_resource_is_worked_on_twice_under_chaos(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED", random.randrange(1 << 30)))
    seconds = float(os.environ.get("CHAOS_SECONDS", "30"))
    print(f"chaos seed {seed}, {seconds:.0f} s")
    rng = random.Random(seed)
    with run_coordinator("--min-session-timeout-ms", "1000") as server:
        cluster = Cluster(server.bootstrap, tmp_path)
        try:
            for slot in ("w1", "w2", "w3"):
                cluster.start(slot, slot)
            time.sleep(3)
            actions = chaos(cluster, rng, seconds)
            print("actions:", ", ".join(actions))
            final = settle(server.bootstrap)
        finally:
            cluster.close()
    check(records(cluster.out), final)


def settle(bootstrap: str) -> dict[str, set[str]]:
    """Wait until every resource has exactly one owner; owner sets per resource."""

    async def owners() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for group, kind in (("chaos.shard", "shard"), ("chaos.writer", "leader")):
            described = await describe_group(bootstrap, group)
            if described.state != "Stable":
                return {}
            for m in described.members:
                for key in (m.assignment or {}).get(kind, []):
                    found.setdefault(f"{kind}/{key}", set()).add(m.member_id)
        return found

    deadline = time.monotonic() + 60
    last: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        try:
            last = asyncio.run(owners())
        except Exception:
            last = {}
        if set(last) == RESOURCES and all(len(o) == 1 for o in last.values()):
            return last
        time.sleep(0.5)
    raise AssertionError(f"the group did not settle after the chaos: {last}")


def check(entries: list[dict], final: dict[str, set[str]]) -> None:  # type: ignore[type-arg]
    assert set(final) == RESOURCES  # (d)
    by_resource: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for entry in entries:
        by_resource.setdefault(entry["resource"], []).append(entry)
    assert set(by_resource) == RESOURCES
    for resource, events in by_resource.items():
        starts = sorted((e for e in events if e["event"] == "start"), key=lambda e: e["time"])
        tokens = [s["token"] for s in starts]
        assert tokens == sorted(set(tokens)), f"(a) {resource}: tokens {tokens}"
        commits = [e for e in events if e["event"] == "commit"]
        first_accepted: dict[int, float] = {}
        for c in commits:
            first_accepted[c["token"]] = min(first_accepted.get(c["token"], c["time"]), c["time"])
        for c in commits:
            newer = [t for t, at in first_accepted.items() if t > c["token"] and at < c["sent"]]
            assert not newer, f"(b) {resource}: {c} sent after token {newer[0]} committed"
        for start in starts[1:]:
            older = [c for c in commits if c["token"] < start["token"]]
            if not older:
                continue
            last = max(older, key=lambda c: (c["token"], c["n"]))
            allowed = {f"{last['token']}:{last['n']}", f"{last['token']}:{last['n'] + 1}"}
            assert start["read"] in allowed, (
                f"(c) {resource}: token {start['token']} read {start['read']}, "
                f"last accepted {sorted(allowed)[0]}"
            )
