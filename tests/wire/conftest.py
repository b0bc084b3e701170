"""Fixtures shared by the wire tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from workgroup.admin import GroupDescription, GroupNotFoundError, describe_group
from workgroup.coordinator.server import CoordinatorServer
from workgroup.member.driver import GroupMember
from workgroup.protocol import Protocol
from workgroup.security import Security


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("member-1@workgroup.test")
    ca.cert_pem.write_to_path(root / "ca.pem")
    server.cert_chain_pems[0].write_to_path(root / "server.pem")
    server.private_key_pem.write_to_path(root / "server.key")
    client.cert_chain_pems[0].write_to_path(root / "client.pem")
    client.private_key_pem.write_to_path(root / "client.key")
    return Pki(root / "ca.pem", root / "server.pem", root / "server.key",
               root / "client.pem", root / "client.key")  # fmt: skip


def member(server: CoordinatorServer, security: Security, group: str) -> GroupMember:
    """A member of ``group`` on ``server`` that reaches it with ``security``."""
    return GroupMember(
        server.bootstrap,
        group,
        [Protocol.of("range")],
        resources={"shard": [0, 1, 2]},
        session_timeout_ms=6_000,
        security=security,
        connect_timeout_ms=5_000,
    )


async def librdkafka_joins(
    bootstrap: str, group: str, config: dict[str, object], security: Security
) -> GroupDescription:
    """A librdkafka consumer (with ``config``: its security settings) joins
    ``group``; returns the group as ``describe_group`` sees it once Stable with
    that one member (or as last seen after 20 s)."""
    from confluent_kafka import Consumer

    stable = threading.Event()

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "session.timeout.ms": 6000, **config})  # fmt: skip
        try:
            consumer.subscribe([f"{group}-topic"])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not stable.is_set():
                consumer.poll(0.1)
        finally:
            consumer.close()

    joining = asyncio.create_task(asyncio.to_thread(consume))
    described: GroupDescription | None = None
    try:
        for _ in range(100):
            with contextlib.suppress(GroupNotFoundError):  # not joined yet
                described = await describe_group(bootstrap, group, security=security)
                if described.state == "Stable" and len(described.members) == 1:
                    break
            await asyncio.sleep(0.2)
    finally:
        stable.set()
        await joining
    assert described is not None, f"{group} never appeared"
    return described


def kafka_python_groups(bootstrap: str, **options: object) -> list[str]:
    """The groups kafka-python's admin client lists (``options``: its security settings)."""
    with warnings.catch_warnings():  # kafka-python's own import-time deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **options)
    try:
        return [str(g["group_id"]) for g in admin.list_groups()]
    finally:
        admin.close()
