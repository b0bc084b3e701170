"""What the console and owner lookup cost, on a big group of the embedded coordinator.

Builds one group of ``--members`` members (1,000) owning ``--resources``
resources (100,000) between them, each with a committed lease slot, then
measures:

* the console's page weight: its files, the summary each refresh streams, and
  one page of a group's resources;
* one console refresh (ListGroups, DescribeGroups, OffsetFetch of every slot,
  the view): wall time in the console, and CPU time of the coordinator process
  (from ``/proc``), per refresh: with nothing changed, with every slot read
  again (the worst case), and after real rebalances that each move 1 % more
  of the resources (every member rejoins);
* :class:`workgroup.Directory`: a refresh, and lookups per second from memory;
* the time from a move to a correct answer: a member of a small live group
  leaves, and the directory (500 ms polls) names the new owner of every moved
  key.

Members are raw protocol clients (static members that join once and stay while
their session, set to 10 minutes, lasts): the coordinator holds exactly the
state a real group of that size has, with none of the daemons' own load.

Run: ``.venv/bin/python benchmarks/console.py [--members 1000 --resources 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from importlib import resources as package_files
from typing import Any

from workgroup.console.server import SETTLE_S, ConsoleServer
from workgroup.directory import Directory
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    JoinGroup,
    JoinGroupResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.driver import CoordinatorConnection, GroupMember
from workgroup.protocol import Protocol
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.runtime.legacy import AdminOffsets
from workgroup.runtime.slots import slot_header, slot_of
from workgroup.testing import run_coordinator

GROUP = "console-bench"
KIND = "shard"
SESSION_MS = 600_000
COMMIT_BATCH = 5_000


async def ask(connection: CoordinatorConnection, record: Any) -> Any:
    """One request record to the coordinator, its result record."""
    return to_result(record, await connection.send(KafkaRequest(record), 600))


def coordinator_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def commit_slots(bootstrap: str, keys: list[int]) -> None:
    """Every key's slot, committed from outside the (still empty) group."""
    offsets = AdminOffsets(bootstrap, GROUP, timeout_s=120)
    try:
        for start in range(0, len(keys), COMMIT_BATCH):
            topics = []
            for key in keys[start : start + COMMIT_BATCH]:
                slot = slot_of(GROUP, key)
                metadata = slot_header(key) + json.dumps({"offset": key * 7})
                topics.append(CommitTopic(slot.topic, (CommitPartition(0, 3, metadata),)))
            await offsets.commit(topics)
    finally:
        await offsets.close()


def deal(ids: list[str], keys: list[int], shift: int = 0) -> dict[str, list[tuple[str, int]]]:
    """The keys dealt out evenly; ``shift`` blocks of 1 % of them moved one member on."""
    share: dict[str, list[tuple[str, int]]] = {m: [] for m in ids}
    block = max(1, len(keys) // 100)
    for n, key in enumerate(keys):
        moved = 1 if n // block < shift else 0
        share[ids[(n + moved) % len(ids)]].append((KIND, key))
    return share


async def join_round(
    connections: list[CoordinatorConnection],
    member_ids: list[str],
    keys: list[int],
    shift: int,
) -> list[str]:
    """One round of every member (joined as it was, or new): the keys dealt with
    ``shift`` (see :func:`deal`); the member ids."""
    codec = BinaryCodec()

    async def join(i: int) -> JoinGroupResult:
        meta = MemberMetadata(
            kinds=(KIND,),
            instance_id=f"m{i:04d}",
            tags=((ENDPOINT_TAG, f"10.0.{i // 250}.{i % 250}:8080"),),
        )
        record = JoinGroup(
            GROUP,
            SESSION_MS,
            SESSION_MS,
            member_ids[i],
            "workgroup",
            (("cooperative-sticky.v1", codec.encode_metadata(meta)),),
            group_instance_id=f"m{i:04d}",
        )
        result = await ask(connections[i], record)
        assert isinstance(result, JoinGroupResult), result
        return result

    joined = await asyncio.gather(*(join(i) for i in range(len(connections))))
    leader = next(r for r in joined if r.members)
    ids = sorted(m.member_id for m in leader.members)
    assignments = tuple(
        (
            member_id,
            codec.encode_assignment(
                AssignmentData(assigned=tuple(owned), generation=leader.generation_id)
            ),
        )
        for member_id, owned in deal(ids, keys, shift).items()
    )

    async def sync(i: int, result: JoinGroupResult) -> None:
        record = SyncGroup(
            GROUP,
            result.generation_id,
            result.member_id,
            assignments if result.members else (),
            group_instance_id=f"m{i:04d}",
            protocol_type="workgroup",
            protocol_name="cooperative-sticky.v1",
        )
        synced = await ask(connections[i], record)
        assert isinstance(synced, SyncGroupResult), synced

    await asyncio.gather(*(sync(i, r) for i, r in enumerate(joined)))
    return [r.member_id for r in joined]


async def build_group(
    bootstrap: str, members: int, keys: list[int]
) -> tuple[list[CoordinatorConnection], list[str]]:
    """``members`` static members in one generation, the keys dealt out evenly."""
    connections = []
    for i in range(members):
        connection = CoordinatorConnection(
            bootstrap, client_id=f"bench-{i}", request_timeout_ms=SESSION_MS
        )
        await connection.find(GROUP)
        connections.append(connection)
    member_ids = await join_round(connections, [""] * members, keys, 0)
    return connections, member_ids


async def rebalanced_refreshes(
    console: ConsoleServer,
    pid: int,
    connections: list[CoordinatorConnection],
    member_ids: list[str],
    keys: list[int],
    rounds: int,
) -> tuple[list[float], list[float], list[float]]:
    """Wall, coordinator CPU and this process's CPU seconds of the console's
    refresh after each of ``rounds`` real rebalances (every member rejoins; 1 %
    more of the keys move each time), sorted."""
    walls, cpus, owns = [], [], []
    for shift in range(1, rounds + 1):
        await join_round(connections, member_ids, keys, shift)
        cpu_before, own_before = coordinator_cpu_s(pid), time.process_time()
        t0 = time.perf_counter()
        await console.refresh()
        walls.append(time.perf_counter() - t0)
        cpus.append(coordinator_cpu_s(pid) - cpu_before)
        owns.append(time.process_time() - own_before)
    return sorted(walls), sorted(cpus), sorted(owns)


async def timed_refreshes(
    console: ConsoleServer, pid: int, rounds: int, *, forget_slots: bool = False
) -> tuple[list[float], list[float], list[float]]:
    """Wall, coordinator CPU and this process's CPU seconds of ``rounds`` console
    refreshes, sorted (on a shared machine the wall time also counts the waits
    for a core)."""
    walls, cpus, owns = [], [], []
    for _ in range(rounds):
        if forget_slots:
            # The worst case after a change: every group read afresh, every slot read
            # again (a real rebalance reads only the slots of the resources that moved).
            if hasattr(console, "_readers"):
                console._readers.clear()
            else:  # the console before workgroup.client
                console._slots.clear()
        cpu_before, own_before = coordinator_cpu_s(pid), time.process_time()
        t0 = time.perf_counter()
        await console.refresh()
        walls.append(time.perf_counter() - t0)
        cpus.append(coordinator_cpu_s(pid) - cpu_before)
        owns.append(time.process_time() - own_before)
    return sorted(walls), sorted(cpus), sorted(owns)


def table(title: str) -> None:
    print(f"\n| {title} | |\n|---|---:|")


def row(label: str, value: str) -> None:
    print(f"| {label} | {value} |")


def page_weight() -> dict[str, int]:
    static = package_files.files("workgroup.console").joinpath("static")
    return {
        name: len(static.joinpath(name).read_bytes())
        for name in sorted(("index.html", "console.js", "console.css"))
    }


async def measure_big(bootstrap: str, pid: int, members: int, resources: int, rounds: int) -> None:
    keys = list(range(resources))
    started = time.perf_counter()
    await commit_slots(bootstrap, keys)
    committed_s = time.perf_counter() - started
    started = time.perf_counter()
    connections, member_ids = await build_group(bootstrap, members, keys)
    formed_s = time.perf_counter() - started
    print(f"setup: {resources:,} slots committed in {committed_s:.1f} s, "
          f"{members:,} members joined and synced in {formed_s:.1f} s")  # fmt: skip
    try:
        console = ConsoleServer(bootstrap, port=0, refresh_ms=60_000, timeout_s=120)
        await console.refresh()
        # Steady state: nothing changes, so slots are read only every SLOTS_EVERY_S.
        await asyncio.sleep(SETTLE_S + 0.5)
        steady = await timed_refreshes(console, pid, rounds)
        # After a change: the slots (every committed offset) are read as well.
        changed = await timed_refreshes(console, pid, rounds, forget_slots=True)
        rebalanced = await rebalanced_refreshes(console, pid, connections, member_ids, keys, rounds)
        view = console.model.view
        [group] = [g for g in view["groups"] if g["group"] == GROUP]
        assert len(group["members"]) == members, len(group["members"])
        assert len(group["resources"]) == resources, len(group["resources"])
        assert group["unowned"] == 0
        tokens = {r["token"] for r in group["resources"]}
        print(f"tokens shown after the last rebalance: {sorted(map(str, tokens))}")
        summary = json.dumps(console.summary()).encode()
        page = json.dumps(
            {"group": GROUP, "total": resources, "resources": group["resources"][:500]}
        ).encode()
        weight = page_weight()
        table("console")
        for name, size in weight.items():
            row(name, f"{size / 1024:.1f} KiB")
        row("page files in all (first load)", f"{sum(weight.values()) / 1024:.1f} KiB")
        row(f"summary streamed per refresh ({members:,} members)", f"{len(summary) / 1024:.1f} KiB")
        row(f"one page of resources (500 rows of {resources:,})", f"{len(page) / 1024:.1f} KiB")
        for label, (walls, cpus, owns) in (
            ("nothing changed", steady),
            ("every slot read again (as after a change, before workgroup.client)", changed),
            ("after a rebalance that moved 1 % of the resources", rebalanced),
        ):
            wall, cpu = walls[len(walls) // 2], cpus[len(cpus) // 2]
            paced = max(1.0, 2 * wall)  # the next refresh waits twice the last one
            row(
                f"refresh, {label}: console wall time (median of {rounds})",
                f"{wall * 1000:,.0f} ms (min {walls[0] * 1000:,.0f}, max {walls[-1] * 1000:,.0f})",
            )
            row(f"refresh, {label}: coordinator CPU (median)", f"{cpu * 1000:,.0f} ms")
            row(
                f"refresh, {label}: CPU of the console's process (median)",
                f"{owns[len(owns) // 2] * 1000:,.0f} ms",
            )
            row(
                f"refresh, {label}: coordinator CPU at the paced refresh (every {paced:.1f} s)",
                f"{cpu / paced * 100:.0f} % of a core",
            )
        if hasattr(console, "_connection"):
            await console.close()
        directory = Directory(bootstrap, GROUP, timeout_s=120)
        cpu_before, own_before = coordinator_cpu_s(pid), time.process_time()
        t0 = time.perf_counter()
        await directory.refresh()
        first_s = time.perf_counter() - t0
        first_cpu = coordinator_cpu_s(pid) - cpu_before
        first_own = time.process_time() - own_before
        t0 = time.perf_counter()
        await directory.refresh()
        again_s = time.perf_counter() - t0
        if hasattr(directory, "_connection"):
            await directory.close()
        lookups = 1_000_000
        t0 = time.perf_counter()
        for i in range(lookups):
            directory.owner(KIND, i % resources)
        rate = lookups / (time.perf_counter() - t0)
        owner = directory.owner(KIND, resources // 2)
        assert owner is not None
        assert owner.endpoint is not None
        assert owner.token in (3, None)  # None: its owner moved, and took no token since
        table("Directory")
        row(f"first refresh (describe + {resources:,} slots)", f"{first_s * 1000:,.0f} ms")
        row("first refresh: coordinator CPU", f"{first_cpu * 1000:,.0f} ms")
        row("first refresh: CPU of the directory's process", f"{first_own * 1000:,.0f} ms")
        row("a refresh within the settling time (describe + slots)", f"{again_s * 1000:,.0f} ms")
        row("owner() lookups from memory", f"{rate:,.0f} /s")
    finally:
        for connection in connections:
            await connection.close()


async def measure_move(bootstrap: str, trials: int) -> None:
    """A member leaves a live group: how long until the directory names the new
    owner of every key it had (default 500 ms polls)."""
    times = []
    for trial in range(trials):
        group = f"console-move-{trial}"

        def member(name: str, group: str = group) -> GroupMember:
            return GroupMember(
                bootstrap,
                group,
                [Protocol.of("cooperative-sticky")],
                resources={KIND: list(range(16))},
                session_timeout_ms=6_000,
                heartbeat_interval_ms=200,
                tags={ENDPOINT_TAG: f"127.0.0.1:{9000 + ord(name[0])}"},
            )

        a, b = member("a"), member("b")
        async with a, Directory(bootstrap, group) as directory:
            await b.start()
            await a.wait_for(lambda m: m.stable and len(m.assignment) == 8)
            await b.wait_for(lambda m: m.stable and len(m.assignment) == 8)
            moved = sorted(key for _, key in b.assignment)
            while any(directory.owner(KIND, k) is None for k in moved):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            left = time.perf_counter()
            await b.close()
            while any(  # noqa: ASYNC110
                (o := directory.owner(KIND, k)) is None or o.member_id != a.member_id for k in moved
            ):
                await asyncio.sleep(0.005)
            times.append(time.perf_counter() - left)
    times.sort()
    table(f"a member leaves: until the directory names the new owner of its keys ({trials} runs)")
    row("median", f"{times[len(times) // 2] * 1000:,.0f} ms")
    row("max", f"{times[-1] * 1000:,.0f} ms")


async def main_async(args: argparse.Namespace) -> None:
    with run_coordinator(
        "--min-session-timeout-ms", "500",
        "--max-session-timeout-ms", str(SESSION_MS),
        "--initial-rebalance-delay-ms", "3000",
        "--group-max-size", str(args.members + 10),
        "--max-request-bytes", str(512 * 1024 * 1024),
        startup_timeout_s=60,
    ) as server:  # fmt: skip
        assert server.process.pid is not None
        await measure_big(
            server.bootstrap, server.process.pid, args.members, args.resources, args.rounds
        )
        await measure_move(server.bootstrap, args.move_trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--resources", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5, help="console refreshes measured")
    parser.add_argument("--move-trials", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    asyncio.run(main_async(args))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
