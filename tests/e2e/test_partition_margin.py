"""A ``workgroup run`` daemon cut off by a network partition stops its handlers a
session margin before the coordinator evicts it, so before another daemon can
start them: the fence does not rest on the two clocks (the member's from its
send, the coordinator's from its receipt) happening to end a few milliseconds
apart, nor on the other daemon's heartbeat happening to come a little later.

Two static daemons of the chaos suite's app (6 shards and a leader, a handler
records ``start`` and ``end`` with wall-clock times) reach the coordinator
through a :class:`~workgroup.testing.FaultProxy`; each round black-holes one of
them (its Kafka client id) until the other runs everything, then heals.  The
coordinator's JSON log gives the eviction's time (``member.session_expired``)."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.app import SESSION_TIMEOUT_MS, app
from tests.chaos.harness import Cluster, read_records
from workgroup.member.config import default_session_margin_ms

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MARGIN_MS = default_session_margin_ms(
    session_timeout_ms=SESSION_TIMEOUT_MS,
    rebalance_timeout_ms=app.settings.rebalance_timeout_ms,
    heartbeat_interval_ms=app.settings.heartbeat_ms(),
)
EVERYTHING = {f"shard/s{i}" for i in range(6)} | {"leader/writer"}
ROUNDS = 3


def holdings(records: list[dict[str, Any]]) -> dict[int, set[str]]:
    """What each process holds according to the records (started, not ended)."""
    held: dict[int, set[str]] = {}
    for entry in records:
        if entry["event"] == "start":
            held.setdefault(entry["pid"], set()).add(entry["resource"])
        elif entry["event"] in ("end", "refused"):
            held.get(entry["pid"], set()).discard(entry["resource"])
    return held


def evictions(cluster: Cluster) -> list[tuple[float, str, str]]:
    """``(wall-clock time, group, member id)`` of every session the coordinator expired."""
    found = []
    for line in cluster.coordinator.log.read_text().splitlines():
        if '"member.session_expired"' not in line:
            continue
        entry = json.loads(line)
        if entry["event"] == "member.session_expired":
            when = datetime.fromisoformat(entry["timestamp"]).timestamp()
            found.append((when, entry["group"], entry["member_id"]))
    return found


def group_of(resource: str) -> str:
    """``shard/s3`` -> ``chaos.shard``; ``leader/writer`` -> ``chaos.writer``."""
    kind, key = resource.split("/")
    return f"{app.name}.{key if kind == 'leader' else kind}"


def wait_until(what: str, cluster: Cluster, condition: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition(holdings(read_records(cluster.out))):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_cut_off_daemon_stops_its_handlers_a_margin_before_another_starts_them(
    tmp_path: Path,
) -> None:
    assert MARGIN_MS == 500  # a tenth of the 3 s session is less than 500 ms
    cluster = Cluster(tmp_path, random.Random(14))
    #: Per moved resource: the coordinator's eviction of the cut-off daemon, and
    #: the other daemon's start, each minus the cut-off daemon's stop.
    before_eviction_ms: list[float] = []
    before_start_ms: list[float] = []
    try:
        cluster.coordinator.kill()  # again, with a log this test can read
        cluster.coordinator.argv.append("--log-json")
        cluster.coordinator.start()
        cluster.start("w1")
        cluster.start("w2")
        pids = {slot: cluster.processes[slot].pid for slot in ("w1", "w2")}

        def shared(held: dict[int, set[str]]) -> bool:
            mine, theirs = held.get(pids["w1"], set()), held.get(pids["w2"], set())
            return bool(mine) and bool(theirs) and mine | theirs == EVERYTHING

        wait_until("both daemons at work", cluster, shared)
        for round_ in range(ROUNDS):
            cut, other = ("w1", "w2") if round_ % 2 == 0 else ("w2", "w1")
            cut_at = time.time()
            cluster.network(lambda proxy, slot=cut: proxy.partition(f"workgroup-{slot}"))
            wait_until(
                "the other daemon running everything",
                cluster,
                lambda held, slot=other: held.get(pids[slot], set()) == EVERYTHING,
                timeout_s=SESSION_TIMEOUT_MS / 1000 + 15,
            )
            # What the cut daemon held at the cut, read once the records are complete:
            # the healed daemon's rebalance may still be handing resources over when
            # the round begins, so a read taken before the cut can miss an ``end``.
            everything = read_records(cluster.out)
            moved = holdings([r for r in everything if r["time"] < cut_at])[pids[cut]]
            records = [r for r in everything if r["time"] >= cut_at]
            evicted: dict[str, float] = {}
            for when, group, member in evictions(cluster):
                if when >= cut_at and member.startswith(f"{cut}-"):  # static: its instance id
                    evicted[group] = min(evicted.get(group, when), when)
            for resource in moved:
                stopped = min(
                    r["time"]
                    for r in records
                    if r["pid"] == pids[cut] and r["resource"] == resource and r["event"] == "end"
                )
                started = min(
                    r["time"]
                    for r in records
                    if r["pid"] == pids[other]
                    and r["resource"] == resource
                    and r["event"] == "start"
                )
                before_eviction_ms.append((evicted[group_of(resource)] - stopped) * 1000)
                before_start_ms.append((started - stopped) * 1000)
            cluster.network(lambda proxy, slot=cut: proxy.unpartition(f"workgroup-{slot}"))
            wait_until("the healed daemon at work again", cluster, shared)
    finally:
        cluster.close()
    print(f"stopped before the eviction (ms): {sorted(round(g) for g in before_eviction_ms)}")
    print(f"stopped before the other started (ms): {sorted(round(g) for g in before_start_ms)}")
    assert len(before_start_ms) >= ROUNDS
    assert min(before_start_ms) > 0  # never both at once
    # The margin, not luck, keeps them apart: a daemon running up to half the
    # margin late still stops before the coordinator can hand its work on.
    assert min(before_eviction_ms) >= MARGIN_MS / 2, sorted(before_eviction_ms)
