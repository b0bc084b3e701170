"""Owner lookup: :class:`workgroup.Directory` and ``workgroup whois`` against the
embedded coordinator, with members that advertise endpoints."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from tests.wire.member.backends import Backend, run_backend
from workgroup import ConfigError
from workgroup.cli import main
from workgroup.coordinator import CoordinatorServer
from workgroup.directory import Directory, lookup_owner
from workgroup.member.driver import GroupMember
from workgroup.protocol import Protocol
from workgroup.protocol.endpoint import ENDPOINT_TAG, check_endpoint
from workgroup.testing import FakeClock
from workgroup.testing.clock import settle

TIMEOUT_S = 30
SHARDS = {"shard": [0, 1, 2, 3]}


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


async def cli(args: list[str]) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main, args)


def member(backend: Backend, group: str, name: str, endpoint: str | None) -> GroupMember:
    return GroupMember(
        backend.bootstrap,
        group,
        [Protocol.of("cooperative-sticky")],
        resources=SHARDS,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        tags={ENDPOINT_TAG: endpoint} if endpoint else None,
        client_id=f"dir-{name}",
    )


@pytest.mark.parametrize(
    "bad", ["", "host", "host:", ":80", "host:0", "host:65536", "host:http", "10.0.0.1"]
)
def test_a_bad_endpoint_is_a_clear_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        check_endpoint(bad)


def test_good_endpoints_pass() -> None:
    for good in ("10.0.0.5:8080", "svc.local:1", "[::1]:9000"):
        assert check_endpoint(good) == good


async def test_the_directory_names_each_owner_and_its_endpoint(backend: Backend) -> None:
    group = f"dir-{uuid.uuid4().hex[:8]}"
    # Before any member: nobody owns anything (not an error).
    assert await lookup_owner(backend.bootstrap, group, "shard", 0) is None
    a = member(backend, group, "a", "127.0.0.1:7001")
    b = member(backend, group, "b", None)
    async with a, b, asyncio.timeout(TIMEOUT_S):
        await a.wait_for(lambda _: a.stable and b.stable and len(a.assignment) == 2)
        await b.wait_for(lambda _: b.stable and len(b.assignment) == 2)
        async with Directory(backend.bootstrap, group, refresh_ms=100) as directory:
            for kind, key in a.assignment:
                owner = directory.owner(kind, key)
                assert owner is not None
                assert (owner.member_id, owner.endpoint) == (a.member_id, "127.0.0.1:7001")
                assert owner.generation == a.generation
            for kind, key in b.assignment:
                owner = directory.owner(kind, key)
                assert owner is not None
                assert (owner.member_id, owner.endpoint) == (b.member_id, None)
            assert directory.owner("shard", 99) is None
            assert directory.owner("other", 0) is None
            # Per request: answered from memory, no request per call.
            started = time.perf_counter()
            lookups = 50_000
            for i in range(lookups):
                directory.owner("shard", i % 4)
            rate = lookups / (time.perf_counter() - started)
            assert rate > 50_000, f"{rate:.0f} lookups/s"
            # A member leaves: the directory follows the next generation.
            changes = directory.changes
            moved = sorted(key for _, key in b.assignment)
            await b.close()
            async with asyncio.timeout(TIMEOUT_S):
                while any(  # noqa: ASYNC110
                    (o := directory.owner("shard", k)) is None or o.member_id != a.member_id
                    for k in moved
                ):
                    await asyncio.sleep(0.05)
            assert directory.changes > changes
        # From a shell: whois, with the endpoint; exit 4 for a key nobody owns.
        kind, key = sorted(a.assignment)[0]
        shown = await cli(["whois", group, kind, str(key), "--bootstrap", backend.bootstrap])
        assert shown.exit_code == 0, shown.output
        assert "127.0.0.1:7001" in shown.output
        as_json = await cli(
            ["whois", group, kind, str(key), "--bootstrap", backend.bootstrap, "--json"]
        )
        assert json.loads(as_json.output)["owner"]["member_id"] == a.member_id
        nobody = await cli(["whois", group, "shard", "99", "--bootstrap", backend.bootstrap])
        assert nobody.exit_code == 4
        assert "owned by nobody" in nobody.output


async def test_run_refuses_a_bad_advertise_address(backend: Backend) -> None:
    result = await cli(
        ["run", "tests.e2e.apps.keyed_slots:app", "--bootstrap", backend.bootstrap,
         "--advertise", "nowhere"]
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "is not HOST:PORT" in result.output


async def test_the_directory_polls_and_times_out_on_the_clock_it_is_given(
    coordinator_server: CoordinatorServer,
) -> None:
    clock = FakeClock()
    group = f"dir-clock-{uuid.uuid4().hex[:8]}"
    async with Directory(
        coordinator_server.bootstrap, group, refresh_ms=1000, clock=clock
    ) as directory:
        await clock.wait_for_sleepers(1)  # the poller waits out refresh_ms on the clock
        waiting = asyncio.ensure_future(directory.wait_changed(timeout_s=0.5))
        await clock.wait_for_sleepers(2)
        clock.advance(0.5)
        with pytest.raises(TimeoutError, match=r"no refresh within 0\.5 s"):
            await waiting
        waiting = asyncio.ensure_future(directory.wait_changed(timeout_s=10))
        await clock.wait_for_sleepers(2)
        await settle()
        assert not waiting.done()  # no refresh until the clock reaches refresh_ms
        clock.advance(0.5)
        async with asyncio.timeout(TIMEOUT_S):
            await waiting
        assert directory.error is None
