"""``workgroup reset`` names a keyspace's slice by its id or by a key it holds,
and writes the slice's slot in the keyspace's pool: the slice's next holder
reads the checkpoint; a reader that reads only the slots of slices that moved
reads their pool slots (the embedded coordinator; Tansu keeps no commit
metadata, so a slot there names no slice)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

import workgroup
from tests.wire.member.backends import Backend, run_backend
from tests.wire.runtime.test_admin_slots import seed
from workgroup.admin import describe_group, read_lease_slots
from workgroup.cli import main
from workgroup.client.connection import ClientConnection
from workgroup.client.reader import GroupReader
from workgroup.keyspaces import PlannerSettings, SliceMap
from workgroup.member.driver import member_keyspace
from workgroup.runtime.app import Settings
from workgroup.runtime.keyspace_slots import slice_slot
from workgroup.runtime.keyspaces import SliceLease
from workgroup.runtime.runner import AppRunner
from workgroup.testing import FakeClock

TIMEOUT_S = 40
# Four slices a member; a joining process takes its share in one round.
FOUR_SLICES = PlannerSettings(
    imbalance_tolerance=0.5, min_slices_per_member=4, max_slices_per_member=4, churn_budget=1.0
)


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


async def cli(*args: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


class Process:
    """One process of the app, recording the checkpoint each slice's lease starts with."""

    def __init__(self, app_name: str) -> None:
        self.app = workgroup.App(app_name, grace_ms=100)
        self.started: dict[int, str | None] = {}
        self.runner: AppRunner | None = None

        @self.app.keyspace("users", settings=FOUR_SLICES)
        async def serve(lease: SliceLease) -> None:
            self.started[lease.slice.id] = await lease.lease.checkpoint()
            await lease.wait_revoked()

    def start(self, bootstrap: str) -> tuple[asyncio.Event, asyncio.Task[None]]:
        self.runner = AppRunner(
            self.app,
            Settings(
                bootstrap=bootstrap,
                session_timeout_ms=3_000,
                heartbeat_interval_ms=200,
                grace_ms=100,
            ),
        )
        stop = asyncio.Event()
        return stop, asyncio.create_task(self.runner.run(stop))

    async def run_until_settled(
        self, bootstrap: str
    ) -> tuple[SliceMap, asyncio.Event, asyncio.Task[None]]:
        stop, task = self.start(bootstrap)
        return await settled([self]), stop, task


async def settled(processes: list[Process]) -> SliceMap:
    """The map once every slice of it started in one of ``processes``."""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            maps = []
            for process in processes:
                runner = process.runner
                view = (
                    member_keyspace(runner.groups[0].member) if runner and runner.groups else None
                )
                maps.append(view.map if view is not None else None)
            smap = maps[0]
            holding = {p.id: p.owner for p in smap.slices} if smap is not None else {}
            started = {i for process in processes for i in process.started}
            if (
                smap is not None
                and all(m == smap for m in maps)
                and started >= set(holding)
                and len(set(holding.values())) == len(processes)
            ):
                return smap
            await asyncio.sleep(0.05)


async def test_reset_names_a_slice_by_id_or_by_key_and_its_next_holder_reads_it(
    backend: Backend,
) -> None:
    app_name = f"ks-tools-{uuid.uuid4().hex[:8]}"
    group = f"{app_name}.users"
    first = Process(app_name)
    smap, stop, task = await first.run_until_settled(backend.bootstrap)
    assert len(smap.slices) == 4
    stop.set()
    await asyncio.wait_for(task, TIMEOUT_S)
    async with asyncio.timeout(TIMEOUT_S):
        while (await describe_group(backend.bootstrap, group)).members:  # noqa: ASYNC110 (polls the coordinator)
            await asyncio.sleep(0.1)

    async def reset(*args: str) -> Result:
        return await cli("reset", group, *args, "--bootstrap", backend.bootstrap)

    by_id = smap.slices[1]
    hot = next(
        f"user-{i}"
        for i in range(10_000)
        if smap.slice_for_key(f"user-{i}") not in (by_id, smap.slices[0])
    )
    by_key = smap.slice_for_key(hot)
    done = await reset("--kind", "users", "--key", str(by_id.id), "--to", "at-1")
    assert done.exit_code == 0, done.output
    assert f"users/{by_id.id} in group {group!r}: checkpoint set to 'at-1'" in done.output
    # Without --kind: the group's only keyspace.
    done = await reset("--slice-of", hot, "--to", "at-hot")
    assert done.exit_code == 0, done.output
    assert f"{by_key.id} (the slice holding {hot!r})" in done.output

    # Bad input: one line, exit status 2, nothing written.
    for args, says in (
        (("--kind", "users", "--key", "999999", "--to", "x"), "has no slice 999999 in its map"),
        (("--kind", "orders", "--slice-of", hot, "--to", "x"), "serves no kind 'orders'"),
        (("--kind", "users", "--key", hot, "--to", "x"), "names its slices by int ids"),
    ):
        refused = await reset(*args)
        assert refused.exit_code == 2, refused.output
        assert says in refused.output
        assert len(refused.output.strip().splitlines()) == 1, refused.output
    usage = await reset("--key", "1", "--slice-of", hot)
    assert usage.exit_code == 2
    # A group of listed resources has no slices to name.
    plain = f"{app_name}.shard"
    await seed(backend, plain, 1, 3, "at-3")
    refused = await cli(
        "reset", plain, "--kind", "shard", "--slice-of", hot, "--bootstrap", backend.bootstrap
    )
    assert refused.exit_code == 2, refused.output
    assert f"group {plain!r} has no keyspace 'shard' (its keyspaces: none)" in refused.output

    slots = {s.topic: s for s in await read_lease_slots(backend.bootstrap, group)}
    written = slots[slice_slot(group, smap, by_id).topic]
    assert (written.key, written.checkpoint) == (by_id.id, "at-1")
    written = slots[slice_slot(group, smap, by_key).topic]
    assert (written.key, written.checkpoint) == (by_key.id, "at-hot")

    # After the restart the kept map keeps the slices: their leases read the resets.
    second = Process(app_name)
    again, stop, task = await second.run_until_settled(backend.bootstrap)
    try:
        assert [p.id for p in again.slices] == [p.id for p in smap.slices]
        assert second.started[by_id.id] == "at-1"
        assert second.started[by_key.id] == "at-hot"
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


async def test_a_reader_reads_the_pool_slots_of_the_slices_that_moved(backend: Backend) -> None:
    app_name = f"ks-reader-{uuid.uuid4().hex[:8]}"
    group = f"{app_name}.users"
    first, second = Process(app_name), Process(app_name)
    _, stop_first, first_task = await first.run_until_settled(backend.bootstrap)
    stop_second = None
    try:
        async with ClientConnection(backend.bootstrap) as connection:
            # Only the slots of what moved are read after the first reading: no
            # time-driven full reading (a frozen clock, a long settling time).
            reader = GroupReader(connection, group, settle_s=3600.0, clock=FakeClock())
            await reader.read()
            stop_second, second_task = second.start(backend.bootstrap)
            both = await settled([first, second])
            async with asyncio.timeout(TIMEOUT_S):
                while True:
                    seen = await reader.read()
                    holders = [seen.resource("users", piece.id) for piece in both.slices]
                    if all(h is not None and h.token is not None for h in holders):
                        break
                    await asyncio.sleep(0.1)
            for piece, holder in zip(both.slices, holders, strict=True):
                assert holder is not None
                assert holder.owner is not None
                assert holder.owner.member_id == piece.owner
    finally:
        stop_first.set()
        if stop_second is not None:
            stop_second.set()
            await asyncio.wait_for(second_task, TIMEOUT_S)
        await asyncio.wait_for(first_task, TIMEOUT_S)
