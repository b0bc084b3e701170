"""``standbys=N``: each shard has a standby holder on another process, and a
departed holder's shards are taken over by their standby holders."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

import workgroup
from workgroup.runtime.app import Settings
from workgroup.runtime.runner import AppRunner
from workgroup.testing import run_coordinator

KEYS = [f"shard-{i}" for i in range(6)]
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "200"
    ) as server:
        yield server.bootstrap


class Process:
    """One 'process' of the app: its own App object, so handlers know who runs them."""

    def __init__(self, name: str, app_name: str, holding: dict[tuple[str, str], str]) -> None:
        self.name = name
        self.app = workgroup.App(app_name, grace_ms=100)
        self.committed: list[str] = []
        #: Standby commits that were not refused (must stay empty).
        self.standby_commits: list[str] = []

        @self.app.resources("shard")
        def shards() -> list[str]:
            return KEYS

        @self.app.worker("shard", standbys=1)
        async def work(lease: workgroup.Lease) -> None:
            slot = (lease.role, str(lease.key))
            holding[slot] = self.name
            try:
                if lease.role == "standby":
                    try:
                        await lease.commit("not mine")
                        self.standby_commits.append(str(lease.key))
                    except workgroup.WorkgroupError as exc:
                        if "standby" not in str(exc):
                            self.standby_commits.append(f"{lease.key}: {exc}")
                else:
                    await lease.commit(f"{self.name}")
                    self.committed.append(str(lease.key))
                await lease.wait_revoked()
            finally:
                if holding.get(slot) == self.name:
                    del holding[slot]

    def start(self, bootstrap: str) -> tuple[asyncio.Event, asyncio.Task[None]]:
        settings = Settings(
            bootstrap=bootstrap,
            session_timeout_ms=3_000,
            heartbeat_interval_ms=200,
            grace_ms=100,
        )
        stop = asyncio.Event()
        return stop, asyncio.create_task(AppRunner(self.app, settings).run(stop))


async def settled(holding: dict[tuple[str, str], str], members: int) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not (  # noqa: ASYNC110 (polls handler state)
            all(("active", k) in holding and ("standby", k) in holding for k in KEYS)
            and all(holding["active", k] != holding["standby", k] for k in KEYS)
            and len(set(holding.values())) == members
        ):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # nothing moves any more


async def test_standbys_sit_apart_and_take_over(bootstrap: str) -> None:
    holding: dict[tuple[str, str], str] = {}
    app_name = f"sb-{uuid.uuid4().hex[:8]}"
    processes = [Process(name, app_name, holding) for name in ("a", "b", "c")]
    running = [p.start(bootstrap) for p in processes]
    try:
        await settled(holding, 3)
        before = dict(holding)
        a_shards = [k for k in KEYS if before["active", k] == "a"]
        assert len(a_shards) == 2
        stop_a, task_a = running[0]
        stop_a.set()
        await asyncio.wait_for(task_a, TIMEOUT_S)
        await settled(holding, 2)
        for key in a_shards:
            assert holding["active", key] == before["standby", key], (key, before, holding)
        for key in set(KEYS) - set(a_shards):
            assert holding["active", key] == before["active", key]
        assert sorted(k for p in processes for k in p.committed) == sorted(KEYS + a_shards)
        assert not any(p.standby_commits for p in processes)
    finally:
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
