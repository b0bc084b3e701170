"""Warming leases (the lease's rule 7): no token, no commits, ready() until the cut-over."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.runtime.test_lease import SLOT, FakeStore
from workgroup.errors import WorkgroupError
from workgroup.runtime.lease import EndReason, Lease, LeaseState
from workgroup.testing import capture_logs


def warming(store: FakeStore, ready: list[str]) -> Lease:
    return Lease(
        "g",
        "shard",
        3,
        slot=SLOT,
        store=store,
        role="warming",
        ready_sink=lambda: ready.append("x"),
    )


async def test_a_warming_lease_cannot_commit_fence_or_produce() -> None:
    lease = warming(FakeStore(), [])
    assert lease.state is LeaseState.WARMING
    assert lease.warming
    assert not lease.held
    assert not lease.revoked
    with pytest.raises(WorkgroupError, match=r"warming holder.*lease.ready\(\)"):
        await lease.commit("x")
    with pytest.raises(WorkgroupError, match="warming holder"):
        lease.fence()
    with pytest.raises(WorkgroupError, match="warming lease has no producer"):
        await lease.producer()


async def test_ready_tells_the_group_once_and_returns_at_the_cut_over() -> None:
    store, told = FakeStore(), []
    lease = warming(store, told)
    waiting = asyncio.ensure_future(lease.ready())
    await asyncio.sleep(0)
    again = asyncio.ensure_future(lease.ready())
    await asyncio.sleep(0)
    assert told == ["x"]  # once, however often it is called
    assert not waiting.done()
    lease.promote()
    assert lease.role == "active"
    assert await lease.acquire() == 1
    assert await waiting is True
    assert await again is True
    assert lease.state is LeaseState.ACTIVE
    await lease.commit("now")  # the active holder commits with its token


async def test_ready_returns_false_when_the_warm_up_is_called_off() -> None:
    lease = warming(FakeStore(), [])
    waiting = asyncio.ensure_future(lease.ready())
    await asyncio.sleep(0)
    lease.end(EndReason.WARMUP_ENDED)
    assert await waiting is False
    assert lease.state is LeaseState.ENDED
    assert lease.end_reason == "warm-up called off"


async def test_ready_by_an_active_holder_does_nothing_and_says_so_once() -> None:
    store, told = FakeStore(), []
    lease = Lease("g", "shard", 3, slot=SLOT, store=store, ready_sink=lambda: told.append("x"))
    await lease.acquire()
    with capture_logs() as logs:
        assert await lease.ready() is True
        assert await lease.ready() is True
    assert told == []
    said = [e for e in logs if e["event"] == "lease.ready_ignored"]
    assert len(said) == 1
    assert "active already" in said[0]["why"]


async def test_a_fall_back_reports_ready_once_with_why() -> None:
    told: list[str] = []
    lease = warming(FakeStore(), told)
    with capture_logs() as logs:
        lease.fall_back("not ready after 1 s")
        lease.fall_back("not ready after 1 s")
    assert told == ["x"]
    assert [e["why"] for e in logs if e["event"] == "lease.warmup_fallback"] == [
        "not ready after 1 s"
    ]
