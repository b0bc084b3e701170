"""The portable fence (workgroup.fence) against real back-ends: the embedded
coordinator and Tansu, from this process's threads, from spawned processes and
from a pickled copy; after the lease ended, against another coordinator or group,
against an unreachable one; across a cooperative rebalance that keeps the
resource; and with its daemon frozen past the session (SIGSTOP)."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import workgroup
from tests.wire.member.backends import Backend, run_backend
from workgroup.client.blocking import BlockingCoordinator
from workgroup.fence import Fence, FenceTimeoutError
from workgroup.kafka.messages import FetchTopic, OffsetFetch, OffsetFetchGroup, OffsetFetchResult
from workgroup.member.driver import parse_bootstrap
from workgroup.runtime.app import Settings
from workgroup.runtime.runner import AppRunner
from workgroup.security import PLAINTEXT

TIMEOUT_S = 30
ROOT = Path(__file__).resolve().parents[3]
SHARDS = [f"s{i}" for i in range(6)]


@pytest.fixture(scope="module", params=["embedded", pytest.param("tansu", marks=pytest.mark.tansu)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with run_backend(request.param) as running:
        yield running


def tansu_deviates(request: pytest.FixtureRequest, backend: Backend, what: str) -> None:
    if backend.name == "tansu":
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"Tansu: {what}"))


class Holder:
    """An app whose handlers hand their leases' fences to the test."""

    def __init__(
        self,
        kind: str = "leader",
        name: str | None = None,
        *,
        grace_ms: int = 200,
        finish: asyncio.Event | None = None,
    ) -> None:
        """``finish``: revoked handlers return only once it is set (work that
        finishes after its revocation, within ``grace_ms``)."""
        self.grace_ms = grace_ms
        self.app = workgroup.App(name or f"fence-{uuid.uuid4().hex[:8]}", grace_ms=grace_ms)
        self.leases: dict[Any, workgroup.Lease] = {}
        if kind == "leader":

            @self.app.leader("writer")
            async def writer(lease: workgroup.Lease) -> None:
                self.leases[lease.key] = lease
                await lease.wait_revoked()

        else:

            @self.app.resources("shard")
            def shards() -> list[str]:
                return SHARDS

            @self.app.worker("shard")
            async def work(lease: workgroup.Lease) -> None:
                self.leases[lease.key] = lease
                await lease.wait_revoked()
                if finish is not None:
                    await finish.wait()

    @asynccontextmanager
    async def running(self, backend: Backend) -> AsyncIterator[AppRunner]:
        runner = AppRunner(
            self.app,
            Settings(
                bootstrap=backend.bootstrap,
                session_timeout_ms=backend.session_timeout_ms,
                heartbeat_interval_ms=300,
                grace_ms=self.grace_ms,
            ),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        try:
            yield runner
        finally:
            stop.set()
            await asyncio.wait_for(task, TIMEOUT_S)

    async def lease(self, key: Any = "writer") -> workgroup.Lease:
        async with asyncio.timeout(TIMEOUT_S):
            while key not in self.leases or not self.leases[key].held:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        return self.leases[key]


def slot_offset(fence: Fence) -> int:
    """The slot's committed offset, read as an outsider."""
    with BlockingCoordinator(parse_bootstrap(fence.bootstrap), fence.group_id, PLAINTEXT) as c:
        result = c.request(
            OffsetFetch(
                (OffsetFetchGroup(fence.group_id, (FetchTopic(fence.topic, (fence.partition,)),)),)
            ),
            time.monotonic() + 10,
        )
    assert isinstance(result, OffsetFetchResult)
    return result.groups[0].topics[0].partitions[0].offset


def commit_in_child(fence_bytes: bytes, value: str) -> str:
    """Runs in a spawned process: unpickle the fence and commit with it."""
    fence = pickle.loads(fence_bytes)
    try:
        fence.commit(value)
        fence.check()
    except workgroup.LeaseLostError as exc:
        return f"lost: {exc}"
    return "committed"


def run_in_spawned_child(fence: Fence, value: str) -> str:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(commit_in_child, (pickle.dumps(fence), value))


# --- the ordinary path ------------------------------------------------------------------


async def test_a_fence_commits_the_leases_checkpoint_from_another_thread(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    holder = Holder()
    async with holder.running(backend):
        lease = await holder.lease()
        fence = lease.fence()
        assert (fence.token, fence.kind, fence.key) == (lease.token, "leader", "writer")
        await asyncio.to_thread(fence.commit, "from a thread")
        await asyncio.to_thread(fence.check)
        assert await asyncio.to_thread(slot_offset, fence) == lease.token
        if backend.name == "embedded":  # Tansu keeps no commit metadata
            assert await lease.checkpoint() == "from a thread"
        # The lease and its fence write the same slot, under the same fence.
        await lease.commit("from the lease")
        await asyncio.to_thread(fence.commit, "from the fence again")
        if backend.name == "embedded":
            assert await lease.checkpoint() == "from the fence again"


async def test_a_pickled_fence_commits_from_a_spawned_process(backend: Backend) -> None:
    holder = Holder()
    async with holder.running(backend):
        lease = await holder.lease()
        fence = lease.fence()
        assert pickle.loads(pickle.dumps(fence)) == fence
        assert cloudpickle.loads(cloudpickle.dumps(fence)) == fence
        outcome = await asyncio.to_thread(run_in_spawned_child, fence, "from a child")
        assert outcome == "committed"
        if backend.name == "embedded":
            assert await lease.checkpoint() == "from a child"


async def test_a_fence_is_refused_once_its_lease_ended(backend: Backend) -> None:
    holder = Holder()
    async with holder.running(backend):
        lease = await holder.lease()
        fence = lease.fence()
    assert lease.revoked
    with pytest.raises(workgroup.LeaseLostError, match="no longer in the group") as caught:
        await asyncio.to_thread(fence.commit, "too late")
    assert "\n" not in str(caught.value)
    with pytest.raises(workgroup.LeaseLostError):
        await asyncio.to_thread(fence.check)
    outcome = await asyncio.to_thread(run_in_spawned_child, fence, "too late")
    assert outcome.startswith("lost: ")
    # The next holder's token is higher, and an old fence cannot lower it.
    async with holder.running(backend):
        second = await holder.lease()
        assert second.token == fence.token + 1
        with pytest.raises(workgroup.LeaseLostError):
            await asyncio.to_thread(fence.commit, "zombie")
        assert await asyncio.to_thread(slot_offset, fence) == second.token


async def test_a_lease_that_ended_makes_no_fence(backend: Backend) -> None:
    holder = Holder()
    async with holder.running(backend):
        lease = await holder.lease()
    with pytest.raises(workgroup.LeaseLostError, match="no longer held"):
        lease.fence()


def commit_through_own_fence(lease: Any) -> None:
    """A process-isolated handler: it writes with the fence, not through the parent,
    then says so in ``$FENCE_TEST_OUT``."""
    fence = lease.fence()
    fence.commit(f"child {os.getpid()} token {fence.token}")
    fence.check()
    Path(os.environ["FENCE_TEST_OUT"]).write_text(f"committed token {fence.token}")
    lease.wait_revoked_sync()


async def test_a_process_isolated_handler_gets_its_leases_fence(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "child"
    monkeypatch.setenv("FENCE_TEST_OUT", str(out))
    app = workgroup.App(f"fence-{uuid.uuid4().hex[:8]}", grace_ms=200)
    app.leader("writer", isolation="process")(commit_through_own_fence)
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
    task = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not out.exists():  # noqa: ASYNC110 (the child writes it)
                await asyncio.sleep(0.1)
        lease = next(iter(runner.groups[0].runs.values())).lease
        assert out.read_text() == f"committed token {lease.token}"
        if backend.name == "embedded":  # Tansu keeps no commit metadata
            checkpoint = await lease.checkpoint() or ""
            assert checkpoint.startswith("child ")
            assert checkpoint.endswith(f" token {lease.token}")
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


# --- bad input ----------------------------------------------------------------------------


async def test_a_fence_for_another_coordinator_or_group_is_refused(backend: Backend) -> None:
    holder = Holder()
    # The second server starts (blocking) before the holder runs: starting it inside the
    # running loop would stall the holder's heartbeats past its session.
    with run_backend(backend.name) as elsewhere:
        async with holder.running(backend):
            lease = await holder.lease()
            fence = lease.fence()
            other_group = dataclasses.replace(fence, group_id=fence.group_id + "-other")
            with pytest.raises(workgroup.LeaseLostError) as caught:
                await asyncio.to_thread(other_group.commit, "wrong group", timeout_s=5)
            assert "\n" not in str(caught.value)
            moved = dataclasses.replace(fence, bootstrap=(elsewhere.bootstrap,))
            with pytest.raises(workgroup.LeaseLostError, match=r"another coordinator|no longer"):
                await asyncio.to_thread(moved.commit, "wrong coordinator", timeout_s=5)
            # The real fence still works: nothing was spoiled.
            await asyncio.to_thread(fence.commit, "still mine")


def test_an_unreachable_coordinator_times_out_with_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    fence = make_offline_fence(f"127.0.0.1:{closed_port}")
    started = time.monotonic()
    with pytest.raises(FenceTimeoutError, match=f"127.0.0.1:{closed_port}") as caught:
        fence.commit("nobody listens", timeout_s=1.0)
    assert 1.0 <= time.monotonic() - started < 5.0
    assert caught.value.retriable
    assert "\n" not in str(caught.value)


def test_the_timeout_of_a_closed_port_keeps_the_os_reason() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    fence = make_offline_fence(f"127.0.0.1:{closed_port}")
    with pytest.raises(FenceTimeoutError) as caught:
        fence.commit("nobody listens", timeout_s=0.5)
    assert str(caught.value) == (
        f"fence of leader/'writer' (token 1, group 'g'): no verdict from 127.0.0.1:{closed_port} "
        f"within 0.5 s (nothing answers at 127.0.0.1:{closed_port}: Connection refused)"
    )


def test_a_coordinator_that_never_answers_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts connections, never reads them
        fence = make_offline_fence(f"127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        with pytest.raises(FenceTimeoutError, match="timed out"):
            fence.check(timeout_s=1.0)
        assert 1.0 <= time.monotonic() - started < 5.0


def make_offline_fence(bootstrap: str) -> Fence:
    from workgroup.fence import make_fence

    return make_fence(
        bootstrap=bootstrap,
        security=PLAINTEXT,
        group_id="g",
        member_id="m",
        instance_id=None,
        generation=1,
        topic="workgroup-leases.g.0",
        partition=0,
        kind="leader",
        key="writer",
        token=1,
    )


# --- a cooperative rebalance that keeps the resource ---------------------------------------


@asynccontextmanager
async def split_between_two_daemons(
    backend: Backend,
) -> AsyncIterator[tuple[dict[str, Fence], list[str], list[str], Holder]]:
    """A daemon takes every shard and makes their fences; a second daemon joins
    and takes half.  Yields the fences, the keys the first kept and those that
    moved, and the first daemon."""
    first = Holder(kind="shard")
    async with first.running(backend) as runner:
        for key in SHARDS:
            await first.lease(key)
        fences = {key: first.leases[key].fence() for key in SHARDS}
        generation = runner.groups[0].member.generation
        second = Holder(kind="shard", name=first.app.name)  # the same group, a second daemon
        async with second.running(backend):

            def settled() -> bool:
                # Half the shards moved, and each moved one runs on the second daemon.
                moved = [k for k in SHARDS if not first.leases[k].held]
                return len(moved) >= len(SHARDS) // 2 and all(
                    k in second.leases and second.leases[k].held for k in moved
                )

            async with asyncio.timeout(TIMEOUT_S):
                while not settled():  # noqa: ASYNC110 (polls the handlers' leases)
                    await asyncio.sleep(0.05)
            assert runner.groups[0].member.generation > generation
            kept = [k for k in SHARDS if first.leases[k].held]
            moved = [k for k in SHARDS if not first.leases[k].held]
            assert kept
            assert moved
            yield fences, kept, moved, first


async def test_a_stale_generation_still_commits_while_the_resource_stayed(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    tansu_deviates(
        request,
        backend,
        "DescribeGroups returns no member assignments, so a fence whose generation went "
        "stale cannot show that its lease still holds (it says so: LeaseLostError)",
    )
    async with split_between_two_daemons(backend) as (fences, kept, _, first):
        for key in kept:
            await asyncio.to_thread(fences[key].commit, f"kept {key}")
            await asyncio.to_thread(fences[key].check)
            assert await first.leases[key].checkpoint() == f"kept {key}"
        # Pickled again (a fresh process knows only the old generation): still fine.
        fresh = pickle.loads(pickle.dumps(fences[kept[0]]))
        assert await asyncio.to_thread(run_in_spawned_child, fresh, "kept, from a child") == (
            "committed"
        )


async def test_a_fence_of_a_resource_that_moved_is_refused(backend: Backend) -> None:
    async with split_between_two_daemons(backend) as (fences, _, moved, _first):
        for key in moved:
            with pytest.raises(workgroup.LeaseLostError, match=r"no longer assigned|token"):
                await asyncio.to_thread(fences[key].check)
            with pytest.raises(workgroup.LeaseLostError):
                await asyncio.to_thread(fences[key].commit, f"moved {key}")
            # The new holder's token stands.
            assert await asyncio.to_thread(slot_offset, fences[key]) == fences[key].token + 1


async def test_a_fence_holds_while_its_revoked_handler_finishes_its_work(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    """A cooperative rebalance revokes a resource whose handler finishes its work
    first (a Spark query's micro-batch): until it has, nobody else has the
    resource, and the work it writes through its fence is accepted; once the
    next owner has it, the fence is refused."""
    tansu_deviates(
        request,
        backend,
        "DescribeGroups returns no member assignments, so a fence whose generation went "
        "stale cannot show that its lease still holds (it says so: LeaseLostError)",
    )
    finish = asyncio.Event()
    first = Holder(kind="shard", grace_ms=TIMEOUT_S * 1000, finish=finish)
    async with first.running(backend):
        for key in SHARDS:
            await first.lease(key)
        fences = {key: first.leases[key].fence() for key in SHARDS}
        second = Holder(kind="shard", name=first.app.name)
        async with second.running(backend):
            try:
                await revoked_handlers_finish_under_their_fences(first, second, fences, finish)
            finally:
                finish.set()  # a failure leaves no handler waiting out its grace


async def revoked_handlers_finish_under_their_fences(
    first: Holder, second: Holder, fences: dict[str, Fence], finish: asyncio.Event
) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not any(lease.revoked for lease in first.leases.values()):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    revoked = [k for k in SHARDS if first.leases[k].revoked]
    for key in revoked:  # still finishing: the revocation's generation is newer
        await asyncio.to_thread(fences[key].commit, f"finished {key}")
        await asyncio.to_thread(fences[key].check)
        assert await asyncio.to_thread(slot_offset, fences[key]) == fences[key].token
    assert not any(k in second.leases for k in revoked)
    finish.set()
    async with asyncio.timeout(TIMEOUT_S):
        while not all(  # noqa: ASYNC110 (polls the handlers' leases)
            k in second.leases and second.leases[k].held for k in revoked
        ):
            await asyncio.sleep(0.05)
    for key in revoked:
        with pytest.raises(workgroup.LeaseLostError, match=r"now assigned|no longer"):
            await asyncio.to_thread(fences[key].commit, f"late {key}")
        assert await second.leases[key].checkpoint() == f"finished {key}"


# --- heartbeats: the daemon frozen past its session ---------------------------------------


@contextmanager
def holder_process(backend: Backend, group: str, out: Path, *extra: str) -> Iterator[int]:
    log = (out / "holder.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.wire.runtime.fence_holder",
            backend.bootstrap,
            group,
            str(out),
            *extra,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=log,
        stderr=log,
    )
    try:
        yield process.pid
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
        process.wait()
        log.close()


async def read_fence(out: Path, pid: int) -> Fence:
    path = out / f"fence-{pid}.pickle"
    async with asyncio.timeout(TIMEOUT_S):
        while not path.exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    fence = pickle.loads(path.read_bytes())
    assert isinstance(fence, Fence)
    return fence


async def test_a_fence_does_not_keep_a_frozen_daemon_in_the_group(
    backend: Backend, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tansu_deviates(
        request,
        backend,
        "an accepted OffsetCommit extends the member's session, as on Kafka: a fence that "
        "keeps committing keeps its frozen daemon's member in the group (use ttl_s)",
    )
    group = f"frozen-{uuid.uuid4().hex[:8]}"
    with holder_process(backend, group, tmp_path) as pid:
        fence = await read_fence(tmp_path, pid)
        await asyncio.to_thread(fence.commit, "before the freeze")
        os.kill(pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        session_s = backend.session_timeout_ms / 1000

        def keep_committing() -> float:
            n = 0
            while time.monotonic() - frozen_at < session_s + 20:
                n += 1
                try:
                    fence.commit(f"frozen {n}", timeout_s=5)
                    fence.check(timeout_s=5)
                except workgroup.LeaseLostError:
                    return time.monotonic() - frozen_at
                time.sleep(0.2)
            raise AssertionError("the fence kept the frozen daemon's lease")

        lost_after = await asyncio.to_thread(keep_committing)
        # The session expires on its own (session timeout plus a loaded machine's lag).
        assert lost_after >= session_s * 0.8
        # And the leadership moves on: a new holder takes the next token.
        holder = Holder(name=group)
        async with holder.running(backend):
            successor = await holder.lease()
            assert successor.token == fence.token + 1
            os.kill(pid, signal.SIGCONT)
            with pytest.raises(workgroup.LeaseLostError):
                await asyncio.to_thread(fence.check)
