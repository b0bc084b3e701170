"""``@app.leader(name, standbys=N)``, end to end in-process: standby candidates warm
up and report ready; leadership goes only to a ready candidate, after a crash and on
a planned handover, with one active leader at a time and rising tokens."""

from __future__ import annotations

import asyncio
import contextlib
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

TIMEOUT_S = 40
PREPARE_S = 0.3
STEP_S = 0.05
LEADER = "boss"


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


@dataclass
class Timeline:
    """Who led when, who stood by, who reported ready, and the tokens taken."""

    spans: list[tuple[str, float, float | None]] = field(default_factory=list)
    standing_by: set[str] = field(default_factory=set)
    ready: set[str] = field(default_factory=set)
    tokens: list[int] = field(default_factory=list)
    #: Candidates whose handler went on as the leader from its standby call.
    promoted: list[str] = field(default_factory=list)
    #: Handlers started with a warming lease (a standby's process needs none).
    warmed: list[str] = field(default_factory=list)

    def leader(self) -> str | None:
        open_spans = [who for who, _, end in self.spans if end is None]
        assert len(open_spans) <= 1, f"two active leaders: {self.spans}"
        return open_spans[0] if open_spans else None

    def leaders(self) -> list[str]:
        return [who for who, _, _ in self.spans]

    def check_exclusive(self) -> None:
        ordered = sorted(self.spans, key=lambda s: s[1])
        for (_, _, end), (_, start, _) in itertools.pairwise(ordered):
            assert end is not None, f"two active leaders: {self.spans}"
            assert end <= start, f"two active leaders: {self.spans}"
        assert self.tokens == sorted(set(self.tokens)), self.tokens


def make_app(name: str, who: str, timeline: Timeline, gate: asyncio.Event) -> workgroup.App:
    """A process of the app; its standby is ready once ``gate`` is set and it
    has prepared for ``PREPARE_S``."""
    app = workgroup.App(name, grace_ms=500)

    @app.leader(LEADER, standbys=2)
    async def lead(lease: workgroup.Lease) -> None:
        if lease.role == "warming":
            timeline.warmed.append(who)
            if not await lease.ready():
                return
        if lease.role == "standby":
            timeline.standing_by.add(who)
            await gate.wait()
            await asyncio.sleep(PREPARE_S)  # replay state, build caches
            with pytest.raises(workgroup.WorkgroupError, match="standby"):
                await lease.commit("not yet")
            timeline.ready.add(who)
            if not await lease.ready():
                timeline.standing_by.discard(who)
                return  # no longer a candidate
            timeline.promoted.append(who)
        assert lease.role == "active"
        assert lease.token > 0
        timeline.tokens.append(lease.token)
        timeline.spans.append((who, time.monotonic(), None))
        index = len(timeline.spans) - 1
        try:
            while not lease.revoked:
                await lease.commit(f"{who}:{lease.token}")
                await asyncio.sleep(STEP_S)
        finally:
            timeline.spans[index] = (who, timeline.spans[index][1], time.monotonic())

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
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def ready_seen(logs: list[Any]) -> bool:
    """A round was assigned after a standby reported ready."""
    ready = [i for i, e in enumerate(logs) if e["event"] == "member.warmup_ready"]
    return bool(ready) and any(
        e["event"] == "member.assignment_computed" for e in logs[ready[0] + 1 :]
    )


def opened() -> asyncio.Event:
    gate = asyncio.Event()
    gate.set()
    return gate


@pytest.mark.parametrize("how", ["leaves", "crashes"])
async def test_the_ready_standby_takes_over_not_the_one_still_warming(
    backend: Backend, how: str
) -> None:
    """a leads; b is a ready standby; c stands by but never gets ready.  When a
    goes (LeaveGroup, or a static member whose session expires), b leads."""
    name = f"standby-leader-{uuid.uuid4().hex[:8]}"
    timeline = Timeline()
    never = asyncio.Event()
    # A static member sends no LeaveGroup: the group sees a crash, the session expires.
    a_settings: dict[str, Any] = {"instance_id": f"a-{name}"} if how == "crashes" else {}
    with capture_logs() as logs:
        async with contextlib.AsyncExitStack() as others:
            async with running(make_app(name, "a", timeline, opened()), backend, **a_settings):
                await wait_until(lambda: timeline.leader() == "a", "a leads")
                await others.enter_async_context(
                    running(make_app(name, "b", timeline, opened()), backend)
                )
                await others.enter_async_context(
                    running(make_app(name, "c", timeline, never), backend)
                )
                await wait_until(lambda: timeline.standing_by >= {"b", "c"}, "two standbys")
                await wait_until(lambda: "b" in timeline.ready, "b ready")
                # b's ready reached the group's leader: a round ran after it.
                await wait_until(lambda: ready_seen(logs), "a round after b's ready")
                gone_at = time.monotonic()
            await wait_until(lambda: timeline.leader() is not None, "a new leader")
            took_s = time.monotonic() - gone_at
            assert timeline.leader() == "b", timeline.spans
            # b's standby run went on as the leader: its warm state was used.
            assert timeline.promoted == ["b"]
            assert "c" not in timeline.leaders()
            await asyncio.sleep(0.5)
            assert timeline.leader() == "b"
    timeline.check_exclusive()
    print(f"{how}: b led {took_s:.2f} s after a went")
    if how == "crashes":
        assert took_s < 6.0 + 4.0, took_s  # the session (6 s) and a round
    promoted = [e for e in logs if e["event"] == "worker.standby_promoted"]
    assert [e["ready"] for e in promoted] == [True]


async def test_a_drained_leader_waits_for_a_ready_candidate_then_cuts_over(
    backend: Backend,
) -> None:
    """a leads; c stands by, not ready.  a drains: it keeps leading until c is
    ready (c's standby run is the warm-up: no second run), then c takes over at
    once, after a stopped."""
    name = f"standby-drain-{uuid.uuid4().hex[:8]}"
    timeline = Timeline()
    gate = asyncio.Event()
    with capture_logs() as logs:
        async with running(make_app(name, "a", timeline, opened()), backend) as a:
            await wait_until(lambda: timeline.leader() == "a", "a leads")
            async with running(make_app(name, "c", timeline, gate), backend):
                await wait_until(lambda: "c" in timeline.standing_by, "c stands by")
                a.groups[0].member.drain(True)
                await wait_until(
                    lambda: any(
                        e["event"] == "member.warmups_staged" and e["started"] == 1 for e in logs
                    ),
                    "the handover staged, waiting for c",
                )
                await asyncio.sleep(1.0)
                assert timeline.leader() == "a"  # c is not ready: a keeps leading
                assert timeline.leaders() == ["a"]
                ready_at = time.monotonic()
                gate.set()
                await wait_until(lambda: timeline.leader() == "c", "c leads")
                cut_over_s = time.monotonic() - ready_at
                assert timeline.promoted == ["c"]
                assert timeline.warmed == []  # its standby run was the warm-up
                await asyncio.sleep(0.5)
                assert timeline.leader() == "c"
    timeline.check_exclusive()
    (a_span, c_span) = timeline.spans
    assert a_span[0] == "a"
    assert a_span[2] is not None
    gap = c_span[1] - a_span[2]
    print(f"drain: c led {cut_over_s:.2f} s after its gate opened; gap {gap * 1000:.0f} ms")
    assert 0 <= gap < 0.5, gap  # the old leader's last step and one round
    assert any(e["event"] == "member.warmups_staged" and e["cut_over"] == 1 for e in logs)


async def test_ready_by_the_active_leader_does_nothing_and_says_so(backend: Backend) -> None:
    name = f"standby-ignored-{uuid.uuid4().hex[:8]}"
    answers: list[bool] = []
    app = workgroup.App(name, grace_ms=500)

    @app.leader(LEADER, standbys=1)
    async def lead(lease: workgroup.Lease) -> None:
        if lease.role == "active":
            answers.append(await lease.ready())
            answers.append(await lease.ready())
        await lease.wait_revoked()

    with capture_logs() as logs:
        async with running(app, backend):
            await wait_until(lambda: len(answers) == 2, "the leader called ready() twice")
    assert answers == [True, True]  # held: it goes on leading
    ignored = [e for e in logs if e["event"] == "lease.ready_ignored"]
    assert len(ignored) == 1  # said once
    assert "active already" in ignored[0]["why"]
    assert not any(e["event"] == "member.warmup_ready" for e in logs)
