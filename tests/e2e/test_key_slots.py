"""A lease's slot follows its key: two ``workgroup run`` daemons whose keys come from
a file, while keys are removed from the middle, reordered, inserted, restored,
and one daemon is SIGKILLed; on the embedded coordinator and on Tansu."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.members import backend as run_backend
from workgroup.kafka.messages import CommitPartition, CommitTopic
from workgroup.runtime.events import read_events
from workgroup.runtime.legacy import AdminOffsets
from workgroup.runtime.slots import legacy_lease_topic, slot_of

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = {"embedded": 3_000, "tansu": 3_000}
TIMEOUT_S = 40.0
KEYS = [f"k{i:02d}" for i in range(12)]
GROUP = "slots.shard"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class Daemons:
    """``workgroup run tests.e2e.apps.keyed_slots:app`` processes of one test."""

    def __init__(self, backend: str, bootstrap: str, tmp: Path) -> None:
        self.backend = backend
        self.bootstrap = bootstrap
        self.tmp = tmp
        self.keys_file = tmp / "keys.json"
        self.out = tmp / "records.jsonl"
        self.processes: list[subprocess.Popen[bytes]] = []

    def set_keys(self, keys: list[str]) -> float:
        staged = self.keys_file.with_suffix(".tmp")
        staged.write_text(json.dumps(keys))
        staged.replace(self.keys_file)  # a reader never sees half a list
        return time.time()

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.keyed_slots:app",
            "--bootstrap", self.bootstrap, "--log-format", "json", *extra,
        ]  # fmt: skip
        env = {
            **os.environ,
            "SLOTS_KEYS": str(self.keys_file),
            "SLOTS_OUT": str(self.out),
            "SLOTS_SESSION_MS": str(SESSION_MS[self.backend]),
            "PYTHONUNBUFFERED": "1",
        }
        with (self.tmp / f"daemon-{len(self.processes)}.log").open("wb") as log:
            process = subprocess.Popen(
                argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=log, env=env,
            )  # fmt: skip
        self.processes.append(process)
        return process

    def records(self) -> list[dict[str, Any]]:
        return read_events(self.out) if self.out.exists() else []

    def wait_for(self, what: str, condition: Callable[[list[dict[str, Any]]], bool]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if condition(self.records()):
                return
            time.sleep(0.1)
        logs = "\n".join(p.read_text()[-3000:] for p in sorted(self.tmp.glob("daemon-*.log")))
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for path in sorted(self.tmp.glob("daemon-*.log")):
            for line in path.read_text().splitlines():
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return events

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture(params=["embedded", pytest.param("tansu", marks=pytest.mark.tansu)])
def daemons(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemons]:
    with run_backend(request.param) as bootstrap:
        group = Daemons(request.param, bootstrap, tmp_path)
        try:
            yield group
        finally:
            group.close()


def running_since(keys: list[str], since: float) -> Callable[[list[dict[str, Any]]], bool]:
    """Every key in ``keys`` committed after ``since`` and only those did."""

    def check(records: list[dict[str, Any]]) -> bool:
        recent = [r for r in records if r["event"] == "committed" and r["sent"] > since]
        committed = {r["key"] for r in recent}
        return set(keys) <= committed

    return check


def settle(daemons: Daemons, keys: list[str], changed_at: float) -> float:
    """Wait until every key of ``keys`` runs and commits after a change, then a
    little more so that removed keys' handlers are seen stopped."""
    daemons.wait_for(f"{len(keys)} keys committing", running_since(keys, changed_at))
    time.sleep(1.0)
    quiet_from = time.time()
    daemons.wait_for("a second round of commits", running_since(keys, quiet_from))
    return quiet_from


def test_slots_follow_keys_through_catalog_changes_and_a_kill(daemons: Daemons) -> None:
    changed = daemons.set_keys(KEYS)
    first = daemons.start()
    daemons.start()
    settle(daemons, KEYS, changed)

    # 1. Two keys removed from the middle.
    keys = [k for k in KEYS if k not in ("k03", "k07")]
    removed_at = daemons.set_keys(keys)
    settle(daemons, keys, removed_at)
    # Their handlers stop once the group has rebalanced (a round or two: Tansu
    # holds each JoinGroup for half a session), and never commit again.
    daemons.wait_for(
        "the removed keys' handlers stopped",
        lambda records: not [
            r for r in records
            if r["event"] == "committed" and r["key"] in ("k03", "k07")
            and r["sent"] > time.time() - 1.0
        ],
    )  # fmt: skip
    quiet = time.time()
    time.sleep(1.5)
    assert not [
        r for r in daemons.records()
        if r["event"] == "committed" and r["key"] in ("k03", "k07") and r["sent"] > quiet
    ], "a removed key still commits"  # fmt: skip
    k03_last = max(
        (r for r in daemons.records() if r["event"] == "committed" and r["key"] == "k03"),
        key=lambda r: r["sent"],
    )

    # 2. Reversed, with two new keys in the middle.
    keys = list(reversed(keys))
    keys[5:5] = ["new-a", "new-b"]
    settle(daemons, keys, daemons.set_keys(keys))

    # 3. k03 restored at the end.
    keys = [*keys, "k03"]
    settle(daemons, keys, daemons.set_keys(keys))

    # 4. One daemon killed: the other takes every key.
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    killed_at = time.time()
    settle(daemons, keys, killed_at)

    records = daemons.records()
    starts = sorted((r for r in records if r["event"] == "started"), key=lambda r: r["time"])
    commits = [r for r in records if r["event"] == "committed"]

    # Each key keeps its own slot, and no two keys share one.
    slot_keys: dict[str, set[str]] = {}
    for start in starts:
        slot_keys.setdefault(start["slot"], set()).add(start["key"])
        assert start["slot"] == slot_of(GROUP, start["key"]).topic
    assert all(len(found) == 1 for found in slot_keys.values()), slot_keys

    # Tokens rise per key at every start, whichever daemon, across every change.
    by_key: dict[str, list[int]] = {}
    for start in starts:
        by_key.setdefault(start["key"], []).append(start["token"])
    for key, tokens in by_key.items():
        assert tokens == sorted(set(tokens)), f"{key}: tokens {tokens} do not rise"
    assert by_key["new-a"][0] == 1
    assert by_key["new-b"][0] == 1

    # Each accepted commit came from one holder per token (no two live holders).
    holders: dict[tuple[str, int], set[int]] = {}
    for commit in commits:
        holders.setdefault((commit["key"], commit["token"]), set()).add(commit["pid"])
    assert all(len(pids) == 1 for pids in holders.values()), holders

    # The restored k03 continues above every earlier holder's token.
    k03_starts = [s for s in starts if s["key"] == "k03"]
    restored = next(s for s in k03_starts if s["time"] > k03_last["sent"])
    assert restored["token"] > k03_last["token"]

    # A handler never reads a slot of another key, and nothing is refused.
    events = daemons.log_events()
    assert not [e for e in events if e.get("event") == "lease.slot_mismatch"]
    assert not [e for e in events if e.get("event") == "lease.legacy_layout"]

    if daemons.backend == "tansu":
        pytest.xfail(
            "Tansu: OffsetFetch returns null metadata (commit metadata is not kept), so "
            "checkpoints read back as None; the token checks above passed"
        )
    # Checkpoints stay with their keys: every start reads its own key's value or
    # none (a new key), and the restored k03 reads its own last checkpoint (or
    # the one after, accepted while its holder was being stopped).
    for start in starts:
        checkpoint = start["checkpoint"]
        assert checkpoint is None or checkpoint.startswith(f"{start['key']}:"), start
    last_n = int(k03_last["value"].split(":")[1])
    assert restored["checkpoint"] in (f"k03:{last_n}", f"k03:{last_n + 1}")
    assert next(s for s in starts if s["key"] == "new-a")["checkpoint"] is None
    first_commit: dict[str, float] = {}
    for commit in sorted(commits, key=lambda r: r["sent"]):
        first_commit.setdefault(commit["key"], commit["sent"])
    for start in starts:
        if start["time"] > first_commit[start["key"]]:
            assert start["checkpoint"] is not None, f"{start['key']} lost its checkpoint"


async def commit_legacy(bootstrap: str, tokens: dict[int, tuple[int, str]]) -> None:
    offsets = AdminOffsets(bootstrap, GROUP)
    try:
        partitions = tuple(CommitPartition(i, t, value) for i, (t, value) in tokens.items())
        await offsets.commit([CommitTopic(legacy_lease_topic(GROUP), partitions)])
    finally:
        await offsets.close()


def test_workgroup_run_refuses_legacy_state_then_migrates_it_when_asked(tmp_path: Path) -> None:
    with run_backend("embedded") as bootstrap:
        daemons = Daemons("embedded", bootstrap, tmp_path)
        try:
            daemons.set_keys(KEYS[:3])
            asyncio.run(commit_legacy(bootstrap, {0: (5, "k00:40"), 1: (2, "k01:7")}))
            refused = daemons.start()
            assert refused.wait(30) == 2
            lines = [e for e in daemons.log_events() if e.get("event") == "lease.legacy_layout"]
            assert len(lines) == 1
            assert "--migrate-lease-layout" in lines[0]["fix"]
            assert not daemons.records()  # no handler started

            daemons.start("--migrate-lease-layout")
            daemons.wait_for("every key", running_since(KEYS[:3], 0))
            starts = {r["key"]: r for r in daemons.records() if r["event"] == "started"}
            assert (starts["k00"]["token"], starts["k00"]["checkpoint"]) == (6, "k00:40")
            assert (starts["k01"]["token"], starts["k01"]["checkpoint"]) == (3, "k01:7")
            assert (starts["k02"]["token"], starts["k02"]["checkpoint"]) == (1, None)
        finally:
            daemons.close()
