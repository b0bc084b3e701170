"""An app's start-up functions (``App.add_startup``: a plugin starting its engine) run
before any group is joined: the process takes nothing until it is ready."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

import workgroup
from tests.wire.member.backends import Backend, run_backend
from workgroup.member.transitions import State
from workgroup.runtime.app import Settings
from workgroup.runtime.runner import AppRunner

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


def make_app(started: list[str]) -> workgroup.App:
    app = workgroup.App(f"startup-{uuid.uuid4().hex[:8]}")

    @app.resources("shard")
    def shards() -> list[str]:
        return ["s-0"]

    @app.worker("shard")
    async def work(lease: workgroup.Lease) -> None:
        started.append(str(lease.key))
        await lease.wait_revoked()

    return app


def runner_for(app: workgroup.App, backend: Backend) -> AppRunner:
    return AppRunner(
        app, Settings(bootstrap=backend.bootstrap, session_timeout_ms=6_000, grace_ms=500)
    )


async def test_the_app_joins_only_once_its_start_up_functions_returned(backend: Backend) -> None:
    started: list[str] = []
    app = make_app(started)
    engine_ready = asyncio.Event()
    calls: list[str] = []

    async def start_engine() -> None:
        calls.append("async")
        await engine_ready.wait()

    app.add_startup(start_engine)
    app.add_startup(lambda: calls.append("plain, in a thread"))
    runner = runner_for(app, backend)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while calls != ["async"]:  # noqa: ASYNC110 (polls test state)
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        # Not ready: not in the group, nothing taken.
        assert runner.groups[0].member.state is State.UNJOINED
        assert started == []
        engine_ready.set()
        async with asyncio.timeout(TIMEOUT_S):
            while started != ["s-0"]:  # noqa: ASYNC110 (polls test state)
                await asyncio.sleep(0.02)
        assert calls == ["async", "plain, in a thread"]
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT_S)


async def test_a_stop_while_starting_up_joins_nothing(backend: Backend) -> None:
    started: list[str] = []
    app = make_app(started)
    cleaned: list[str] = []
    app.add_startup(asyncio.Event().wait)  # never ready
    app.add_cleanup(lambda: cleaned.append("cleaned"))
    runner = runner_for(app, backend)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.wait_for(task, TIMEOUT_S)
    assert runner.groups[0].member.state is State.UNJOINED
    assert started == []
    assert cleaned == ["cleaned"]


async def test_a_failing_start_up_function_stops_the_app(backend: Backend) -> None:
    app = make_app([])

    def refuse() -> None:
        raise workgroup.ConfigError("the engine cannot start: no licence")

    app.add_startup(refuse)
    with pytest.raises(workgroup.ConfigError, match="no licence"):
        await asyncio.wait_for(runner_for(app, backend).run(asyncio.Event()), TIMEOUT_S)
