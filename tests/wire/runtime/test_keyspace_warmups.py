"""``@app.keyspace(..., warm_up=True)`` on the embedded coordinator: a slice the
planner moves (here, off a drained process) is first warmed up by its next
owner, while the map, routing and the token stay with its current owner; the
cut-over then hands it over with a higher token."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import workgroup
from tests.wire.runtime.keyspace_processes import (
    TIMEOUT_S,
    RunnerProcess,
    group_map,
    settled_map,
    wait_for,
)
from tests.wire.runtime.test_keyspaces import (  # noqa: F401 (the coordinator fixture)
    KEYS,
    bootstrap,
)
from workgroup.directory import Directory
from workgroup.keyspaces import KeyMovedError, PlannerSettings, SliceMap
from workgroup.runtime.keyspaces import SliceLease

SETTINGS = PlannerSettings(
    imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
)


class Process(RunnerProcess):
    """One process whose keyspace handler warms moved slices up: it records
    each warming lease and says it is ready only once :attr:`prepared` is set."""

    def __init__(self, name: str, app_name: str) -> None:
        self.name = name
        self.app = workgroup.App(app_name, grace_ms=100)
        #: Active slice leases, by slice id.
        self.leases: dict[int, SliceLease] = {}
        #: Warming slice leases, by slice id, and what ready() answered.
        self.warming: dict[int, SliceLease] = {}
        self.said_ready: dict[int, bool] = {}
        #: The token each warmed slice was warmed with, and the one it took over with.
        self.warm_tokens: dict[int, int] = {}
        self.taken_tokens: dict[int, int] = {}
        self.prepared = asyncio.Event()

        @self.app.keyspace(
            "users", settings=SETTINGS, warm_up=True, warmup_timeout_ms=TIMEOUT_S * 1000
        )
        async def serve(lease: SliceLease) -> None:
            slice_id = lease.slice.id
            if lease.role == "warming":
                self.warming[slice_id] = lease
                self.warm_tokens[slice_id] = lease.token
                await self.prepared.wait()  # loading the slice's state
                self.said_ready[slice_id] = ready = await lease.ready()
                if not ready:
                    return
                self.taken_tokens[slice_id] = lease.token
            self.leases[slice_id] = lease
            try:
                while lease.held:
                    lease.report_load(1.0)  # even loads: no split, no merge
                    await asyncio.sleep(0.05)
            finally:
                if self.leases.get(slice_id) is lease:
                    del self.leases[slice_id]


async def settle(processes: list[Process]) -> SliceMap:
    """The map once every slice is held by its owner, and nothing moved for a while."""

    def settled() -> SliceMap | None:
        first = group_map(processes)
        if first is None:
            return None
        held = sorted(s for p in processes for s in p.leases)
        if held != sorted(piece.id for piece in first.slices) or not all(
            p.leases for p in processes
        ):
            return None
        return first

    return await settled_map(settled)


async def test_a_moved_slice_is_warmed_up_before_its_next_owner_takes_it(
    bootstrap: str,  # noqa: F811
) -> None:
    app_name = f"ks-warm-{uuid.uuid4().hex[:8]}"
    group = f"{app_name}.users"
    processes = [Process(name, app_name) for name in ("a", "b", "c")]
    running = [p.start(bootstrap) for p in processes]
    try:
        smap = await settle(processes)
        drained = next(p for p in processes if not p.member().is_leader)
        others = [p for p in processes if p is not drained]
        drained_id = drained.member().member_id
        moving = {piece.id for piece in smap.slices if piece.owner == drained_id}
        assert moving
        async with Directory(bootstrap, group, refresh_ms=100) as directory:
            drained.member().drain()
            # The others are handed the drained process's slices to warm up.
            await wait_for(
                lambda: {s for p in others for s in p.warming} == moving, "warm-ups begun"
            )
            await asyncio.sleep(0.5)  # a few rounds and directory readings meanwhile
            before = smap.by_id()
            for slice_id in moving:
                (warmer,) = [p for p in others if slice_id in p.warming]
                lease = warmer.warming[slice_id]
                assert lease.role == "warming"
                assert warmer.warm_tokens[slice_id] == before[slice_id].token
                # The map still names the owner that serves the slice, with its token.
                for p in processes:
                    now = (p.map() or smap).by_id().get(slice_id)
                    if now is None:
                        # A part of the map: the slice's owner and warmer have it.
                        assert p is not drained
                        assert p is not warmer
                        continue
                    assert (now.owner, now.token) == (drained_id, before[slice_id].token)
                assert slice_id in drained.leases  # the owner keeps working
                keys = [k for k in KEYS if smap.slice_for_key(k).id == slice_id]
                for key in keys:
                    assert drained.leases[slice_id].owns(key)
                    assert not lease.owns(key)
                    with pytest.raises(KeyMovedError):
                        lease.token_for(key)
                    owner = directory.owner("users", key)
                    assert owner is not None
                    assert (owner.member_id, owner.token) == (drained_id, before[slice_id].token)

            # Prepared: each warm-up says ready, is cut over, and goes on as the owner.
            for p in others:
                p.prepared.set()
            await wait_for(
                lambda: (
                    all(s in p.leases for p in others for s in p.warming) and not drained.leases
                ),
                "cut-overs done",
            )
            after = await settle(others)
            for p in others:
                for slice_id in p.warming:
                    assert p.said_ready[slice_id] is True
                    piece = after.by_id()[slice_id]
                    assert piece.owner == p.member().member_id
                    # The fence: the new owner's token is above the drained one's.
                    assert p.taken_tokens[slice_id] == piece.token > before[slice_id].token
                    for key in (k for k in KEYS if after.slice_for_key(k).id == slice_id):
                        assert p.leases[slice_id].owns(key)
                        assert p.leases[slice_id].token_for(key) == piece.token
    finally:
        for p in processes:
            p.prepared.set()
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
