"""``@app.keyspace``: slices of a keyspace spread over the processes, every key
owned by exactly one of them, a departed process's slices taken over, and a hot
key split into a slice of its own (the embedded coordinator)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

import workgroup
from tests.wire.runtime.keyspace_processes import TIMEOUT_S, RunnerProcess, group_map, settled_map
from workgroup.cli import main
from workgroup.keyspaces import PlannerSettings, SliceMap, key_hash
from workgroup.runtime.keyspaces import SliceLease
from workgroup.testing import capture_logs, run_coordinator

KEYS = [f"user-{i}" for i in range(300)]
HOT = "user-7"


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "200"
    ) as server:
        yield server.bootstrap


class Process(RunnerProcess):
    """One process of the app: its own App, and the slice leases its handlers hold."""

    def __init__(
        self, name: str, app_name: str, settings: PlannerSettings, *, loads: bool = True
    ) -> None:
        self.name = name
        #: Whether the key HOT carries most of its slice's load.
        self.hot = False
        self.app = workgroup.App(app_name, grace_ms=100)
        self.leases: dict[int, SliceLease] = {}
        #: The token of every slice a handler ran with.
        self.tokens: list[int] = []

        @self.app.keyspace("users", settings=settings)
        async def serve(lease: SliceLease) -> None:
            self.leases[lease.slice.id] = lease
            self.tokens.append(lease.token)
            try:
                while lease.held:
                    # A steady load per slice; the hot key carries most of its slice's.
                    hot_here = self.hot and lease.owns(HOT)
                    if loads:
                        lease.report_load(100.0 if hot_here else 1.0)
                    if hot_here:
                        lease.report_key_load(HOT, 99.0)
                    await asyncio.sleep(0.05)
            finally:
                if self.leases.get(lease.slice.id) is lease:
                    del self.leases[lease.slice.id]


def owners_of(processes: list[Process], key: str) -> list[str]:
    return [p.name for p in processes for lease in list(p.leases.values()) if lease.owns(key)]


def settled_now(processes: list[Process]) -> SliceMap | None:
    """The map every process holds its share of, or ``None`` while anything moves."""
    first = group_map(processes)
    if first is None:
        return None
    held = [(p.name, slice_id) for p in processes for slice_id in p.leases]
    if sorted(s for _, s in held) != sorted(piece.id for piece in first.slices):
        return None
    if any(not p.leases for p in processes):
        return None
    return first


async def settle(processes: list[Process], timeout_s: float = TIMEOUT_S) -> SliceMap:
    return await settled_map(lambda: settled_now(processes), timeout_s)


async def test_slices_spread_every_key_has_one_owner_and_the_leader_leaving_hands_over(
    bootstrap: str,
) -> None:
    settings = PlannerSettings(
        imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
    )
    app_name = f"ks-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name, settings) for name in ("a", "b", "c")]
    running = dict(zip(processes, (p.start(bootstrap) for p in processes), strict=True))
    try:
        smap = await settle(processes)
        assert len(smap.slices) >= 9
        for p in processes:
            for slice_id, lease in p.leases.items():
                assert lease.slice == smap.by_id()[slice_id], p.name
        for key in KEYS:
            owners = owners_of(processes, key)
            assert len(owners) == 1, (key, owners)
            owner = next(p for p in processes if p.name == owners[0])
            assert smap.slice_for_key(key).id in owner.leases
            assert smap.slice_for_key(key).owner == owner.member().member_id

        # The leader leaves: the next leader starts from the map the others carry.
        leaver = next(p for p in processes if p.member().is_leader)
        rest = [p for p in processes if p is not leaver]
        leaver_keys = [k for k in KEYS if owners_of(processes, k) == [leaver.name]]
        assert leaver_keys
        stop, task = running[leaver]
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)
        assert not leaver.leases
        after = await settle(rest)
        assert after.epoch > smap.epoch
        assert after.max_token > smap.max_token
        assert {piece.owner for piece in after.slices} == {p.member().member_id for p in rest}
        assert any(p.member().is_leader for p in rest)
        for key in KEYS:
            assert len(owners_of(rest, key)) == 1, key
            # A key's token never goes down; a moved key's went up.
            assert after.slice_for_key(key).token >= smap.slice_for_key(key).token
        for key in leaver_keys:
            assert after.slice_for_key(key).token > smap.slice_for_key(key).token
    finally:
        for stop, _ in running.values():
            stop.set()
        await asyncio.gather(*(task for _, task in running.values()), return_exceptions=True)


async def test_a_hot_key_is_split_into_a_slice_of_its_own(bootstrap: str) -> None:
    settings = PlannerSettings(
        imbalance_tolerance=0.5, min_slices_per_member=2, max_slices_per_member=16
    )
    app_name = f"ks-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name, settings) for name in ("a", "b")]
    running = [p.start(bootstrap) for p in processes]
    point = key_hash(HOT)
    try:
        first = await settle(processes)
        parent = first.slice_for_key(HOT)
        assert parent.width > 1
        for p in processes:
            p.hot = True
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                smap = settled_now(processes)
                if smap is not None and smap.slice_for_key(HOT).width == 1:
                    break
                await asyncio.sleep(0.05)
        hot = smap.slice_for_key(HOT)
        assert (hot.start, hot.end) == (point, point + 1)
        assert hot.token > parent.token
        assert len(owners_of(processes, HOT)) == 1
        for key in KEYS:
            assert len(owners_of(processes, key)) == 1, key
    finally:
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)


async def test_a_drained_process_hands_its_slices_over_and_stays_in_the_group(
    bootstrap: str,
) -> None:
    settings = PlannerSettings(
        imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
    )
    app_name = f"ks-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name, settings) for name in ("a", "b")]
    running = [p.start(bootstrap, instance_id=p.name) for p in processes]
    try:
        smap = await settle(processes)
        drained = await asyncio.to_thread(
            CliRunner().invoke,
            main,
            ["drain", f"{app_name}.users", "--instance-id", "a", "--bootstrap", bootstrap,
             "--wait", "--wait-timeout-s", str(TIMEOUT_S)],
        )  # fmt: skip
        assert drained.exit_code == 0, drained.output
        a, b = processes

        def handed_over() -> bool:
            owners = {piece.owner for piece in (b.map() or smap).slices}
            return not a.leases and owners == {b.member().member_id}

        async with asyncio.timeout(TIMEOUT_S):
            while not handed_over():  # noqa: ASYNC110 (polls the processes' state)
                await asyncio.sleep(0.05)
        after = await settle([b])
        assert a.member().draining
        assert a.map() == after  # still a member: it is handed every map
        for key in KEYS:
            assert owners_of(processes, key) == ["b"], key
            assert after.slice_for_key(key).token >= smap.slice_for_key(key).token
    finally:
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)


async def test_both_carriers_of_the_map_crash_and_the_survivor_rebuilds_it(
    bootstrap: str,
) -> None:
    """Two processes carry the whole map; the third holds its part.  Both
    carriers crash at once (static members: no LeaveGroup, their sessions
    expire): the survivor leads, rebuilds the map from its part, keeps its
    own slices with their tokens, and takes every other range with a token
    above every token issued before."""
    settings = PlannerSettings(
        imbalance_tolerance=0.5, min_slices_per_member=3, max_slices_per_member=12
    )
    app_name = f"ks-carriers-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name, settings, loads=False) for name in ("a", "b", "c")]
    running = {p: p.start(bootstrap, instance_id=f"{app_name}-{p.name}") for p in processes}
    try:
        smap = await settle(processes)
        carriers = [p for p in processes if isinstance(p.map(), SliceMap)]
        (survivor,) = [p for p in processes if p not in carriers]
        assert len(carriers) == 2
        survivor_id = survivor.member().member_id
        kept = {piece.id: piece.token for piece in smap.slices if piece.owner == survivor_id}
        assert kept
        with capture_logs() as logs:
            for p in carriers:
                running[p][0].set()
            await asyncio.gather(*(running[p][1] for p in carriers))
            after = await settle([survivor])
        assert [e for e in logs if e["event"] == "member.keyspace_map_rebuilt"]
        assert {piece.owner for piece in after.slices} == {survivor_id}
        for piece in after.slices:
            if piece.id in kept:
                assert piece.token == kept[piece.id]  # its handler went on undisturbed
            else:
                assert piece.token > smap.max_token  # the crashed carriers' ranges: fenced
        for key in KEYS:
            assert owners_of([survivor], key) == [survivor.name], key
    finally:
        for stop, _ in running.values():
            stop.set()
        await asyncio.gather(*(task for _, task in running.values()), return_exceptions=True)


class FailingProcess(RunnerProcess):
    """A process whose handler of the slice holding ``key`` keeps failing if
    ``broken[key]`` names it (the first process to be handed that slice)."""

    def __init__(self, name: str, app_name: str, broken: dict[str, str]) -> None:
        self.name = name
        self.app = workgroup.App(app_name, grace_ms=100)
        self.leases: dict[int, SliceLease] = {}
        settings = PlannerSettings(min_slices_per_member=3, max_slices_per_member=12)

        @self.app.keyspace("users", settings=settings, on_failure="release", max_failures=2)
        async def serve(lease: SliceLease) -> None:
            if lease.owns(HOT) and broken.setdefault(HOT, name) == name:
                raise RuntimeError(f"{name} cannot serve {HOT}")
            self.leases[lease.slice.id] = lease
            try:
                await lease.wait_revoked()
            finally:
                if self.leases.get(lease.slice.id) is lease:
                    del self.leases[lease.slice.id]


async def test_a_slice_whose_handler_keeps_failing_is_released_to_another_process(
    bootstrap: str,
) -> None:
    """``on_failure="release"``: the process whose handler of a slice failed
    ``max_failures`` times gives it up and refuses it; the planner hands the
    slice to the other process, with a higher token, and never back while the
    refusal lasts."""
    app_name = f"ks-release-{uuid.uuid4().hex[:8]}"
    broken: dict[str, str] = {}
    processes = [FailingProcess(name, app_name, broken) for name in ("a", "b")]
    running = [p.start(bootstrap) for p in processes]
    try:

        def released() -> SliceMap | None:
            smap = group_map(processes)
            if smap is None or HOT not in broken:
                return None
            served = [p.name for p in processes for lease in p.leases.values() if lease.owns(HOT)]
            return smap if served and broken[HOT] not in served else None

        with capture_logs() as logs:
            smap = await settled_map(released)
        failing = next(p for p in processes if p.name == broken[HOT])
        other = next(p for p in processes if p is not failing)
        piece = smap.slice_for_key(HOT)
        assert piece.owner == other.member().member_id
        assert piece.id in other.leases
        assert not any(lease.owns(HOT) for lease in failing.leases.values())
        assert failing.leases  # it keeps serving its other slices
        (gave_up,) = [e for e in logs if e["event"] == "worker.released"]
        assert gave_up["failures"] == 2
    finally:
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
