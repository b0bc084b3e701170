"""TLS on the embedded coordinator, with aiokafka (the member), kafka-python and
confluent-kafka (librdkafka) clients; mutual TLS; bad files and plaintext clients."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from workgroup.cli import main
from workgroup.coordinator.server import CoordinatorServer
from workgroup.coordinator.tls import TlsSettings
from workgroup.errors import ConfigError
from workgroup.security import Security

from .conftest import Pki, kafka_python_groups, librdkafka_joins, member

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def tls_server(pki: Pki) -> AsyncIterator[CoordinatorServer]:
    async with CoordinatorServer(tls=TlsSettings(pki.cert, pki.key)) as server:
        yield server


async def test_a_member_joins_over_tls(tls_server: CoordinatorServer, pki: Pki) -> None:
    async with member(tls_server, Security("SSL", ssl_cafile=str(pki.ca)), "tls-g") as m:
        await asyncio.wait_for(m.wait_stable(), 20)
        assert len(m.assignment) == 3


async def test_kafka_python_lists_and_librdkafka_joins_over_tls(
    tls_server: CoordinatorServer, pki: Pki
) -> None:
    async with member(tls_server, Security("SSL", ssl_cafile=str(pki.ca)), "tls-listed") as m:
        await asyncio.wait_for(m.wait_stable(), 20)
        listed = await asyncio.to_thread(
            kafka_python_groups, tls_server.bootstrap, security_protocol="SSL",
            ssl_cafile=str(pki.ca),
        )  # fmt: skip
        assert "tls-listed" in listed
        rdkafka = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
        security = Security("SSL", ssl_cafile=str(pki.ca))
        described = await librdkafka_joins(
            tls_server.bootstrap, "tls-librdkafka", rdkafka, security
        )
        assert described.state == "Stable"
        assert described.protocol_type == "consumer"


async def test_a_plaintext_client_is_turned_away_and_tls_clients_go_on(
    tls_server: CoordinatorServer, pki: Pki
) -> None:
    host, port = tls_server.address

    def plaintext() -> bytes:
        with socket.create_connection((host, port), 5) as sock:
            # ApiVersions v0 in plain Kafka framing: not a TLS ClientHello.
            sock.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
            sock.settimeout(5)
            try:
                return sock.recv(100)
            except ConnectionResetError:
                return b""

    answer = await asyncio.to_thread(plaintext)
    assert not answer.startswith(b"\x00\x00")  # no Kafka response, at most a TLS alert
    async with member(tls_server, Security("SSL", ssl_cafile=str(pki.ca)), "tls-after") as m:
        await asyncio.wait_for(m.wait_stable(), 20)


async def test_mutual_tls_requires_a_client_certificate(pki: Pki) -> None:
    settings = TlsSettings(pki.cert, pki.key, client_cafile=pki.ca)
    async with CoordinatorServer(tls=settings) as server:
        with_cert = Security(
            "SSL",
            ssl_cafile=str(pki.ca),
            ssl_certfile=str(pki.client_cert),
            ssl_keyfile=str(pki.client_key),
        )
        async with member(server, with_cert, "mtls") as m:
            await asyncio.wait_for(m.wait_stable(), 20)
        anonymous = member(server, Security("SSL", ssl_cafile=str(pki.ca)), "mtls-anon")
        with pytest.raises(Exception, match=r"(?i)coordinator|connect|reach"):
            async with anonymous:
                await asyncio.wait_for(anonymous.wait_stable(), 20)


def test_bad_tls_files_are_config_errors(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        TlsSettings(tmp_path / "missing.pem").context()
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match="cannot load the TLS certificate"):
        TlsSettings(garbage).context()
    with pytest.raises(ConfigError, match="cannot load the TLS certificate"):
        TlsSettings(pki.cert, pki.client_key).context()  # a key that does not match


def test_the_command_line_refuses_bad_tls_settings_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["coordinator", "--tls-cert", str(tmp_path / "nope.pem")])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    result = runner.invoke(main, ["coordinator", "--tls-key", str(tmp_path / "k.pem")])
    assert result.exit_code == 2
    assert "need --tls-cert" in result.output


def test_tls_alone_does_not_open_a_non_loopback_listener(pki: Pki) -> None:
    args = ["coordinator", "--listen", "0.0.0.0:0", "--tls-cert", str(pki.cert)]
    result = CliRunner().invoke(main, [*args, "--tls-key", str(pki.key)])
    assert result.exit_code == 2
    assert "without SASL" in result.output
