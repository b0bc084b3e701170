"""``describe`` names the process that holds each place now: a static member
that replaces another keeps the first one's client id (coordinators keep it),
so the process comes from the member's metadata; the host is shown without the
leading slash of Kafka's client host."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from workgroup.admin import describe_group
from workgroup.cli import main
from workgroup.member.driver import GroupMember
from workgroup.member.errors import FencedInstanceError
from workgroup.protocol import Protocol
from workgroup.protocol.process import PROCESS_TAG
from workgroup.testing import run_coordinator

TIMEOUT_S = 20


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


def static_member(bootstrap: str, group: str, process: str) -> GroupMember:
    """Instance ``s`` as the process ``process`` runs it (its client id names it)."""
    return GroupMember(
        bootstrap,
        group,
        [Protocol.of("cooperative-sticky")],
        resources={"shard": [0, 1]},
        instance_id="s",
        client_id=f"workgroup-s@{process}",
        tags={PROCESS_TAG: process},
        session_timeout_ms=3_000,
        heartbeat_interval_ms=300,
    )


async def test_describe_names_the_process_that_replaced_a_static_member(bootstrap: str) -> None:
    group = f"process-{uuid.uuid4().hex[:8]}"
    first = static_member(bootstrap, group, "host-111")
    second = static_member(bootstrap, group, "host-222")
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await first.start()
            await first.wait_stable()
            await second.start()  # the replacement: same instance id, new process
            with pytest.raises(FencedInstanceError):
                await first.wait_closed()
            await second.wait_stable()
            while True:  # until the coordinator serves the replacement's metadata
                described = await describe_group(bootstrap, group)
                (m,) = described.members
                if m.process == "host-222":
                    break
                await asyncio.sleep(0.1)
            assert not m.client_host.startswith("/")
            as_json = await asyncio.to_thread(
                CliRunner().invoke, main, ["describe", group, "--bootstrap", bootstrap, "--json"]
            )
            assert as_json.exit_code == 0, as_json.output
            (shown,) = json.loads(as_json.output)["members"]
            assert (shown["process"], shown["client_host"]) == ("host-222", "127.0.0.1")
            table = await asyncio.to_thread(
                CliRunner().invoke, main, ["describe", group, "--bootstrap", bootstrap]
            )
            assert table.exit_code == 0, table.output
            assert "host-222" in table.output
            assert "host-111" not in table.output
            assert "/127.0.0.1" not in table.output
    finally:
        await first.close()
        await second.close()


async def test_a_member_names_its_own_process_by_default(bootstrap: str) -> None:
    group = f"process-{uuid.uuid4().hex[:8]}"
    member = GroupMember(
        bootstrap, group, [Protocol.of("cooperative-sticky")], resources={"shard": [0]},
        session_timeout_ms=3_000, heartbeat_interval_ms=300,
    )  # fmt: skip
    async with member, asyncio.timeout(TIMEOUT_S):
        await member.wait_stable()
        (m,) = (await describe_group(bootstrap, group)).members
        assert m.process == f"{socket.gethostname()}-{os.getpid()}"
        assert m.client_id != m.process
