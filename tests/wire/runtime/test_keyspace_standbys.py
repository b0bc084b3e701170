"""``@app.keyspace(..., standbys=1)`` on the embedded coordinator: every slice
has a standby holder on another process, whose lease owns no key; a drained
process's slices go to their standby holders, and so do a crashed one's."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

import workgroup
from tests.wire.runtime.keyspace_processes import (
    RunnerProcess,
    group_map,
    settled_map,
    wait_for,
)
from tests.wire.runtime.test_keyspaces import (  # noqa: F401 (the coordinator fixture)
    KEYS,
    bootstrap,
)
from workgroup.keyspaces import KeyMovedError, PlannerSettings, SliceMap
from workgroup.runtime.keyspaces import SliceLease

SETTINGS = PlannerSettings(
    imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
)


class Process(RunnerProcess):
    """One process whose keyspace handler records its active and standby slice leases."""

    def __init__(self, name: str, app_name: str) -> None:
        self.name = name
        self.app = workgroup.App(app_name, grace_ms=100)
        #: Active slice leases, by slice id.
        self.leases: dict[int, SliceLease] = {}
        #: Standby slice leases, by slice id.
        self.standbys: dict[int, SliceLease] = {}
        #: Keys a standby lease was asked about and said it owns (none expected).
        self.standby_owned: list[str] = []

        @self.app.keyspace("users", settings=SETTINGS, standbys=1)
        async def serve(lease: SliceLease) -> None:
            slice_id = lease.slice.id
            table = self.standbys if lease.role == "standby" else self.leases
            if lease.role == "standby":
                self.standby_owned += [k for k in KEYS if lease.owns(k)]
                assert await lease.ready() is True  # warm: replayed the slice's state
            table[slice_id] = lease
            try:
                while lease.held:
                    if lease.role == "active":
                        lease.report_load(1.0)  # even loads: no split, no merge
                    await asyncio.sleep(0.05)
            finally:
                if table.get(slice_id) is lease:
                    del table[slice_id]


def standby_of(processes: list[Process]) -> dict[int, list[str]]:
    """``slice id -> the member ids running its standby``."""
    holders: dict[int, list[str]] = {}
    for p in processes:
        for slice_id in p.standbys:
            holders.setdefault(slice_id, []).append(p.member().member_id)
    return holders


def owned_by(processes: list[Process]) -> SliceMap | None:
    """The map once every slice runs on its owner among ``processes`` (standbys
    may still be placing: a crashed holder's twins need new holders)."""
    first = group_map(processes)
    if first is None:
        return None
    ids = sorted(piece.id for piece in first.slices)
    if sorted(s for p in processes for s in p.leases) != ids:
        return None
    return first


async def settle(processes: list[Process]) -> SliceMap:
    """The map once every slice runs on its owner and on one standby holder
    apart from it, and nothing moved for a while."""

    def settled() -> SliceMap | None:
        first = owned_by(processes)
        if first is None:
            return None
        holders = standby_of(processes)
        if sorted(holders) != sorted(piece.id for piece in first.slices) or any(
            holders[piece.id] == [piece.owner] or len(holders[piece.id]) != 1
            for piece in first.slices
        ):
            return None
        return first

    return await settled_map(settled)


@contextlib.asynccontextmanager
async def started(
    processes: list[Process], address: str, instance_ids: dict[str, str] | None = None
) -> AsyncIterator[dict[str, tuple[asyncio.Event, asyncio.Task[None]]]]:
    """``processes`` running (``name -> (stop, task)``), stopped at the end."""
    running = {
        p.name: p.start(address, instance_id=(instance_ids or {}).get(p.name)) for p in processes
    }
    try:
        yield running
    finally:
        for stop, _ in running.values():
            stop.set()
        await asyncio.gather(*(task for _, task in running.values()), return_exceptions=True)


def leaving_slices(
    smap: SliceMap, processes: list[Process], leaving: Process
) -> tuple[set[int], dict[int, str]]:
    """The slices ``leaving`` owns in ``smap``, and each slice's standby holder."""
    member_id = leaving.member().member_id
    moving = {piece.id for piece in smap.slices if piece.owner == member_id}
    assert moving
    holder = {slice_id: ids[0] for slice_id, ids in standby_of(processes).items()}
    return moving, holder


def check_taken_by_standbys(
    before: SliceMap, after: SliceMap, moving: set[int], holder: dict[int, str]
) -> None:
    for slice_id in moving:
        piece = after.by_id()[slice_id]
        assert piece.owner == holder[slice_id]  # its standby holder took it
        assert piece.token > before.by_id()[slice_id].token


async def test_slices_have_standbys_and_a_drained_owner_s_slices_go_to_them(
    bootstrap: str,  # noqa: F811
) -> None:
    app_name = f"ks-standby-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name) for name in ("a", "b", "c")]
    async with started(processes, bootstrap):
        smap = await settle(processes)
        for p in processes:
            assert p.standby_owned == []
            for slice_id, lease in p.standbys.items():
                assert lease.role == "standby"
                key = next(k for k in KEYS if smap.slice_for_key(k).id == slice_id)
                assert not lease.owns(key)
                with pytest.raises(KeyMovedError):
                    lease.token_for(key)
        drained = next(p for p in processes if not p.member().is_leader)
        others = [p for p in processes if p is not drained]
        moving, holder = leaving_slices(smap, processes, drained)
        drained.member().drain()
        await wait_for(
            lambda: not drained.leases and not drained.standbys, "the drained process let go"
        )
        check_taken_by_standbys(smap, await settle(others), moving, holder)


async def test_a_crashed_owner_s_slices_go_to_their_standby_holders(
    bootstrap: str,  # noqa: F811
) -> None:
    """A static member that stops sends no LeaveGroup: the group sees a crash,
    and once its session expires each of its slices goes to its standby holder,
    with a higher token."""
    app_name = f"ks-standby-crash-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name) for name in ("a", "b", "c")]
    crashed = processes[2]
    async with started(processes, bootstrap, {"c": f"{app_name}-c"}) as running:
        smap = await settle(processes)
        crashed_id = crashed.member().member_id
        moving, holder = leaving_slices(smap, processes, crashed)
        assert all(holder[slice_id] != crashed_id for slice_id in moving)
        stop, task = running["c"]
        stop.set()
        await task
        others = processes[:2]

        def taken_over() -> bool:
            current = group_map(others)
            return current is not None and all(
                piece.owner != crashed_id for piece in current.slices
            )

        await wait_for(taken_over, "the crashed process's slices placed elsewhere")
        after = await settled_map(lambda: owned_by(others))
        check_taken_by_standbys(smap, after, moving, holder)
