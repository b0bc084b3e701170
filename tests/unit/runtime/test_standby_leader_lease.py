"""A leader's standby lease (``@app.leader(name, standbys=N)``): its ``ready()``
tells the group and waits to lead; the promotion takes the next token; a worker's
standby ``ready()`` returns at once; ``standbys=`` is checked when declared."""

from __future__ import annotations

import asyncio

import pytest

import workgroup
from tests.unit.runtime.test_lease import SLOT, FakeStore
from workgroup.errors import ConfigError
from workgroup.runtime.handlers import HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.lease import Committed, EndReason, Lease, LeaseState
from workgroup.runtime.lease_states import check_transition
from workgroup.testing import capture_logs


def standby(store: FakeStore, readies: list[int], *, promotable: bool = True) -> Lease:
    return Lease(
        "g",
        "leader",
        "boss",
        slot=SLOT,
        store=store,
        role="standby",
        ready_sink=lambda: readies.append(1),
        promotable=promotable,
    )


async def test_a_leader_standby_reports_ready_then_waits_until_it_leads() -> None:
    store, readies = FakeStore(), list[int]()
    store.offsets[SLOT] = Committed(4, "")  # the old leader's token
    held = standby(store, readies)
    waiting = asyncio.create_task(held.ready())
    await asyncio.sleep(0)
    assert readies == [1]  # the group knows at once
    assert not waiting.done()  # it leads only once promoted
    assert held.state is LeaseState.STANDBY
    held.promote()
    assert (held.role, held.state) == ("active", LeaseState.ACQUIRING)
    assert await held.acquire() == 5  # the token rises: the old leader is fenced
    assert await asyncio.wait_for(waiting, 1) is True
    assert held.state is LeaseState.ACTIVE


async def test_a_leader_standby_that_ends_returns_false_from_ready() -> None:
    readies: list[int] = []
    held = standby(FakeStore(), readies)
    waiting = asyncio.create_task(held.ready())
    await asyncio.sleep(0)
    held.end(EndReason.REVOKED)
    assert await asyncio.wait_for(waiting, 1) is False
    assert readies == [1]


async def test_a_worker_standby_ready_returns_at_once_and_reports_once() -> None:
    readies: list[int] = []
    held = standby(FakeStore(), readies, promotable=False)
    assert not held.promotable
    assert await held.ready() is True
    assert await held.ready() is True
    assert readies == [1]


async def test_an_active_lease_is_never_promotable() -> None:
    held = Lease("g", "leader", "boss", slot=SLOT, store=FakeStore(), promotable=True)
    assert not held.promotable


async def test_ready_by_the_active_leader_does_nothing_and_says_so_once() -> None:
    readies: list[int] = []
    held = Lease(
        "g", "leader", "boss", slot=SLOT, store=FakeStore(), ready_sink=lambda: readies.append(1)
    )
    await held.acquire()
    with capture_logs() as logs:
        assert await held.ready() is True
        assert await held.ready() is True
    assert readies == []
    assert [e["event"] for e in logs] == ["lease.ready_ignored"]


def test_a_standby_may_be_promoted_but_never_fenced() -> None:
    assert check_transition(LeaseState.STANDBY, LeaseState.ACQUIRING) is LeaseState.ACQUIRING
    with pytest.raises(workgroup.WorkgroupError, match="from STANDBY to FENCED"):
        check_transition(LeaseState.STANDBY, LeaseState.FENCED)


async def test_a_promoted_standby_run_goes_on_as_the_leader() -> None:
    """HandlerRun.promote: the same call, which stood by, now leads."""
    store = FakeStore()
    roles: list[tuple[str, int]] = []
    acquired: list[int] = []
    held = standby(store, [])

    async def handler(lease: workgroup.Lease) -> None:
        assert await lease.ready()
        roles.append((lease.role, lease.token))
        await lease.wait_revoked()

    run = HandlerRun(
        held,
        handler,
        name="g",
        restart=RestartPolicy(),
        stats=HandlerStats(),
        on_acquired=lambda lease: acquired.append(lease.token),
    )
    run.start()
    await asyncio.sleep(0.01)
    assert roles == []
    await run.promote()
    await asyncio.sleep(0.01)
    assert roles == [("active", 1)]
    assert acquired == [0, 1]  # as a standby (tokenless), then as the leader
    await run.stop(EndReason.REVOKED, 0.5)


def test_leader_standbys_are_checked_when_declared() -> None:
    app = workgroup.App("checks")
    for bad in (-1, True, 1.5, "1"):
        with pytest.raises(ConfigError, match="standbys must be an integer >= 0"):
            app.leader("boss", standbys=bad)  # type: ignore[arg-type]

    @app.leader("boss", standbys=2)
    async def lead(lease: workgroup.Lease) -> None:
        await lease.wait_revoked()

    assert app.leaders["boss"].standbys == 2
