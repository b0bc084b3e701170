"""A load a handler reports after its member joined shows up in ``top``,
``describe`` and the console without a rebalance (:mod:`workgroup.runtime.loads`),
on the embedded coordinator and on Tansu (which keeps no commit metadata: the
committed offset alone carries the load); a keyspace's slices report theirs
in their pool slots, the lease topics that exist."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

import workgroup
from tests.wire.member.backends import Backend, run_backend
from workgroup.admin import describe_group, read_current_loads
from workgroup.cli import main
from workgroup.console.server import ConsoleServer
from workgroup.keyspaces import PlannerSettings
from workgroup.member.driver import member_keyspace
from workgroup.runtime.app import Settings
from workgroup.runtime.keyspace_slots import slice_slot
from workgroup.runtime.keyspaces import SliceLease
from workgroup.runtime.runner import AppRunner
from workgroup.runtime.slots import slot_of

SHARDS = ["s0", "s1"]
LOAD = 7.5
TIMEOUT_S = 30


@pytest.fixture(scope="module", params=["embedded", pytest.param("tansu", marks=pytest.mark.tansu)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with run_backend(request.param) as running:
        yield running


async def cli(*args: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, list(args))


def load_column(table: str) -> list[str]:
    """The ``load`` cells of the members table ``top`` or ``describe`` printed."""
    lines = table.splitlines()
    header = next(line for line in lines if "┃" in line and " load " in line)
    heads = [cell.strip() for cell in header.split("┃")]
    at = heads.index("load")
    start = lines.index(header)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            rows.append(line.split("│")[at].strip())
    return rows


async def test_a_load_reported_after_the_join_shows_without_a_rebalance(
    backend: Backend,
) -> None:
    app = workgroup.App(f"loads-{uuid.uuid4().hex[:8]}", grace_ms=200)
    measuring = asyncio.Event()

    @app.resources("shard")
    def shards() -> list[str]:
        return SHARDS

    @app.worker("shard")
    async def work(lease: workgroup.Lease) -> None:
        while not lease.revoked:
            if measuring.is_set():
                lease.report_load(LOAD)
            await asyncio.sleep(0.1)

    group = app.group_id("shard")
    runner = AppRunner(
        app,
        Settings(
            bootstrap=backend.bootstrap,
            session_timeout_ms=backend.session_timeout_ms,
            heartbeat_interval_ms=300,
            grace_ms=200,
        ),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while len(runner.groups[0].member.assignment) < len(SHARDS):  # noqa: ASYNC110 (polls the member)
                await asyncio.sleep(0.1)
            if backend.name == "tansu":
                # Tansu's DescribeGroups shows no assignment to join the loads with:
                # they are written and read back, by lease slot topic.
                measuring.set()
                expected = {slot_of(group, key).topic: LOAD for key in SHARDS}
                while await read_current_loads(backend.bootstrap, group) != expected:  # noqa: ASYNC110 (polls the coordinator)
                    await asyncio.sleep(0.2)
                return
            while (described := await describe_group(backend.bootstrap, group)).state != "Stable":  # noqa: ASYNC110 (polls the coordinator)
                await asyncio.sleep(0.1)
            generation = described.generation
            before = await cli("top", group, "--once", "--bootstrap", backend.bootstrap)
            assert before.exit_code == 0, before.output
            assert load_column(before.output) == ["-"]  # nothing measured at the join
            measuring.set()
            while True:  # the reporter commits within LOAD_REPORT_S
                top = await cli("top", group, "--once", "--bootstrap", backend.bootstrap)
                assert top.exit_code == 0, top.output
                if load_column(top.output) == [f"{2 * LOAD:g}"]:
                    break
                await asyncio.sleep(0.2)
            table = await cli("describe", group, "--bootstrap", backend.bootstrap)
            assert load_column(table.output) == [f"{2 * LOAD:g}"], table.output
            shown = await cli("describe", group, "--json", "--bootstrap", backend.bootstrap)
            assert shown.exit_code == 0, shown.output
            (member,) = json.loads(shown.output)["members"]
            assert member["load"] == 2 * LOAD
            console = ConsoleServer(backend.bootstrap, port=0)
            try:
                await console.refresh()
            finally:
                await console.close()  # its connection is kept between refreshes
            (viewed,) = [g for g in console.model.view["groups"] if g["group"] == group]
            (console_member,) = viewed["members"]
            assert console_member["load"] == 2 * LOAD
            # No rebalance told them: the generation is the one of the join.
            assert (await describe_group(backend.bootstrap, group)).generation == generation
            # One commit per changed value: a steady load is not written again.
            (reporting,) = runner.groups
            commits = reporting.loads.commits
            await asyncio.sleep(2.5)
            assert reporting.loads.commits == commits
    finally:
        stop.set()
        await asyncio.wait_for(running, TIMEOUT_S)


#: Four slices for the one process, no more and no fewer.
FOUR_SLICES = PlannerSettings(min_slices_per_member=4, max_slices_per_member=4)
SLICE_LOAD = 1.5


async def test_a_keyspace_s_slice_loads_are_in_its_pool_slots_for_top_and_the_console(
    backend: Backend,
) -> None:
    app = workgroup.App(f"ks-loads-{uuid.uuid4().hex[:8]}", grace_ms=200)
    measuring = asyncio.Event()

    @app.keyspace("users", settings=FOUR_SLICES)
    async def serve(lease: SliceLease) -> None:
        while lease.held:
            if measuring.is_set():
                lease.report_load(SLICE_LOAD)
            await asyncio.sleep(0.1)

    group = app.group_id("users")
    runner = AppRunner(
        app,
        Settings(
            bootstrap=backend.bootstrap,
            session_timeout_ms=backend.session_timeout_ms,
            heartbeat_interval_ms=300,
            grace_ms=200,
        ),
    )
    stop = asyncio.Event()
    running = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(TIMEOUT_S * 2):
            member = runner.groups[0].member
            while True:
                view = member_keyspace(member)
                smap = view.map if view is not None else None
                held = {key for _, key in member.assignment}
                if smap is not None and held == {piece.id for piece in smap.slices}:
                    break
                await asyncio.sleep(0.1)
            assert len(smap.slices) == 4
            measuring.set()
            # Each slice's load in its pool slot, none by slice id (no such topic on Kafka).
            expected = {slice_slot(group, smap, piece).topic: SLICE_LOAD for piece in smap.slices}
            assert all(
                topic != slot_of(group, piece.id).topic
                for piece in smap.slices
                for topic in expected
            )
            while (await read_current_loads(backend.bootstrap, group)) != expected:  # noqa: ASYNC110 (polls the coordinator)
                await asyncio.sleep(0.2)
            if backend.name == "tansu":
                return  # Tansu's DescribeGroups shows no assignment to join the loads with
            total = 4 * SLICE_LOAD
            top = await cli("top", group, "--once", "--bootstrap", backend.bootstrap)
            assert top.exit_code == 0, top.output
            assert load_column(top.output) == [f"{total:g}"], top.output
            shown = await cli("describe", group, "--json", "--bootstrap", backend.bootstrap)
            assert shown.exit_code == 0, shown.output
            document = json.loads(shown.output)
            (described,) = document["members"]
            assert described["load"] == total
            slices = document["keyspaces"]["users"]["slices"]
            assert [s["load"] for s in slices] == [SLICE_LOAD] * 4
            console = ConsoleServer(backend.bootstrap, port=0)
            try:
                await console.refresh()
            finally:
                await console.close()
            (viewed,) = [g for g in console.model.view["groups"] if g["group"] == group]
            (console_member,) = viewed["members"]
            assert console_member["load"] == total
    finally:
        stop.set()
        await asyncio.wait_for(running, TIMEOUT_S)
