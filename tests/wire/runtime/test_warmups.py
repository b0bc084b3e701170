"""Planned moves with warm-ups, end to end in-process: a process that joins warms its
shards up while their owners keep working, then takes them over with a short gap and
no overlap."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

import workgroup
from tests.wire.member.backends import Backend, run_backend
from workgroup.runtime.app import Settings
from workgroup.runtime.runner import AppRunner
from workgroup.testing import capture_logs

SHARDS = [f"shard-{i}" for i in range(6)]
TIMEOUT_S = 40
PREPARE_S = 1.0
STEP_S = 0.05


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


@dataclass
class Timeline:
    """When each process was active on each shard, and its warm-ups."""

    active: dict[str, list[tuple[str, float, float | None]]] = field(default_factory=dict)
    warmed: dict[str, list[str]] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)
    #: When each process, warmed up, said it was ready.
    ready: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def open(self, key: str, who: str) -> int:
        spans = self.active.setdefault(key, [])
        spans.append((who, time.monotonic(), None))
        return len(spans) - 1

    def close(self, key: str, index: int) -> None:
        who, start, _ = self.active[key][index]
        self.active[key][index] = (who, start, time.monotonic())

    def check_exclusive(self) -> None:
        for key, spans in self.active.items():
            ordered = sorted(spans, key=lambda s: s[1])
            for (_, _, end), (_, start, _) in itertools.pairwise(ordered):
                assert end is not None, f"{key}: two active holders {spans}"
                assert end <= start, f"{key}: two active holders {spans}"

    def check_warm_cut_overs(self, moved: list[str], to: str) -> None:
        """Each hand-over of a ``moved`` shard to ``to`` was warm: ``to`` had
        prepared and said it was ready before the previous holder stopped (a
        plain move prepares after).  What the gap then costs is one round, which
        a loaded machine can stretch past any fixed bound; the benchmarks
        measure it (benchmarks/planned_moves.py)."""
        for key in moved:
            spans = sorted(self.active[key], key=lambda s: s[1])
            handed = [(a, b) for a, b in itertools.pairwise(spans) if b[0] == to]
            assert handed, (key, spans)
            for (_, _, end), (who, start, _) in handed:
                said = [t for w, t in self.ready.get(key, []) if w == who and t <= start]
                assert end is not None, (key, spans)
                assert said, (key, spans)
                assert said[-1] <= end, (key, spans, said)

    def gaps(self) -> list[float]:
        out = []
        for spans in self.active.values():
            ordered = sorted(spans, key=lambda s: s[1])
            for (_, _, end), (_, start, _) in itertools.pairwise(ordered):
                assert end is not None
                out.append(start - end)
        return out


def make_app(
    name: str,
    who: str,
    timeline: Timeline,
    *,
    shards_now: list[str] | None = None,
    prepare_s: float = PREPARE_S,
    warmup_timeout_ms: int = 60_000,
) -> workgroup.App:
    app = workgroup.App(name, grace_ms=500)
    listed = shards_now if shards_now is not None else SHARDS

    @app.resources("shard")
    def shards() -> list[str]:
        return list(listed)

    @app.worker("shard", warm_up=True, warmup_timeout_ms=warmup_timeout_ms)
    async def work(lease: workgroup.Lease) -> None:
        key = str(lease.key)
        if lease.role == "warming":
            timeline.warmed.setdefault(key, []).append(who)
            await asyncio.sleep(prepare_s)  # load state, open connections
            if lease.warming:  # not cut over yet (a fall-back may cut over before it is ready)
                with pytest.raises(workgroup.WorkgroupError, match="warming"):
                    await lease.commit("not yet")
            timeline.ready.setdefault(key, []).append((who, time.monotonic()))
            if not await lease.ready():
                return  # the move was called off
        else:
            await asyncio.sleep(PREPARE_S)  # a cold start prepares as well
        assert lease.role == "active"
        assert lease.token > 0
        timeline.tokens.setdefault(key, []).append(lease.token)
        index = timeline.open(key, who)
        try:
            while not lease.revoked:
                await lease.commit(f"{who}:{lease.token}")
                await asyncio.sleep(STEP_S)
        finally:
            timeline.close(key, index)

    return app


@asynccontextmanager
async def running(
    app: workgroup.App, backend: Backend, **settings: Any
) -> AsyncIterator[AppRunner]:
    runner = AppRunner(
        app,
        Settings(
            bootstrap=backend.bootstrap,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
            grace_ms=500,
            resource_poll_interval_ms=200,
            **settings,
        ),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        yield runner
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


async def wait_until(condition: Any, what: str) -> None:
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not condition():  # noqa: ASYNC110 (polls test state)
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def holders(timeline: Timeline) -> dict[str, str]:
    return {
        key: spans[-1][0]
        for key, spans in timeline.active.items()
        if spans and spans[-1][2] is None
    }


async def test_a_joining_process_warms_up_before_it_takes_over(backend: Backend) -> None:
    name = f"warm-{uuid.uuid4().hex[:8]}"
    timeline = Timeline()
    with capture_logs() as logs:
        async with running(make_app(name, "a", timeline), backend, max_warmups=2):
            await wait_until(lambda: len(holders(timeline)) == len(SHARDS), "a holds every shard")
            async with running(make_app(name, "b", timeline), backend, max_warmups=2):
                await wait_until(
                    lambda: sorted(holders(timeline).values()).count("b") == len(SHARDS) // 2,
                    "b active on half the shards",
                )
                await asyncio.sleep(0.5)
                moved = [k for k, who in holders(timeline).items() if who == "b"]
                # What was warmed up by then: when b stops, it drains first
                # (leave_on_stop where workers warm up), and a warms its shards back up.
                warmed = {key: list(who) for key, who in timeline.warmed.items()}
                logged = len(logs)
    # b warmed up every shard it took, and took none cold
    for key in moved:
        assert warmed.get(key) == ["b"], warmed
    timeline.check_exclusive()
    cut_over_gaps = [
        spans[1][1] - spans[0][2]  # type: ignore[operator]
        for key, spans in timeline.active.items()
        if key in moved
    ]
    # A cut-over costs the old holder's last step and one round, not a cold start.
    timeline.check_warm_cut_overs(moved, to="b")
    print("cut-over gaps (s):", sorted(round(g, 3) for g in cut_over_gaps))
    staged = [e for e in logs if e["event"] == "member.warmups_staged"]
    assert staged
    assert max(e["started"] + e["continuing"] for e in staged) <= 2
    assert all(tokens == sorted(set(tokens)) for tokens in timeline.tokens.values())
    # The leader counted each move once, when its warm-up began, as b's join.
    moves = [e for e in logs[:logged] if e["event"] == "member.moves"]
    assert sum(e.get("join", 0) for e in moves) == len(moved), moves
    assert sum(e["warmup"] for e in moves) == len(moved), moves


async def test_a_warm_up_that_is_not_ready_in_time_falls_back_to_a_plain_move(
    backend: Backend,
) -> None:
    name = f"warm-{uuid.uuid4().hex[:8]}"
    timeline = Timeline()
    with capture_logs() as logs:
        async with running(make_app(name, "a", timeline), backend):
            await wait_until(lambda: len(holders(timeline)) == len(SHARDS), "a holds every shard")
            slow = make_app(name, "b", timeline, prepare_s=3.0, warmup_timeout_ms=500)
            async with running(slow, backend):
                await wait_until(
                    lambda: sorted(holders(timeline).values()).count("b") == len(SHARDS) // 2,
                    "b active on half the shards",
                )
    timeline.check_exclusive()
    fallbacks = [e for e in logs if e["event"] == "lease.warmup_fallback"]
    moved = {k for k, spans in timeline.active.items() if any(who == "b" for who, _, _ in spans)}
    assert sorted(str(e["key"]) for e in fallbacks) == sorted(moved)  # once per move
    assert all("warmup_timeout_ms" in e["why"] for e in fallbacks)


async def test_a_resource_removed_while_it_warms_up_calls_the_warm_up_off(
    backend: Backend,
) -> None:
    name = f"warm-{uuid.uuid4().hex[:8]}"
    timeline = Timeline()
    listed = list(SHARDS)
    with capture_logs() as logs:
        async with running(make_app(name, "a", timeline, shards_now=listed), backend):
            await wait_until(lambda: len(holders(timeline)) == len(SHARDS), "a holds every shard")
            slow = make_app(name, "b", timeline, shards_now=listed, prepare_s=4.0)
            async with running(slow, backend):
                await wait_until(lambda: bool(timeline.warmed), "b warms something up")
                gone = sorted(timeline.warmed)[0]
                listed.remove(gone)  # both processes read the same list
                await wait_until(
                    lambda: any(e["event"] == "member.warmup_ended" for e in logs),
                    "the warm-up of the removed shard ends",
                )
                await wait_until(
                    lambda: (
                        gone not in holders(timeline)
                        and sorted(holders(timeline).values()).count("b") >= 2
                    ),
                    "b takes the others",
                )
    timeline.check_exclusive()
    assert gone not in holders(timeline)
    assert not any(who == "b" for who, _, _ in timeline.active.get(gone, []))
