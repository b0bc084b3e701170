"""Fixtures shared by the wire tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

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
