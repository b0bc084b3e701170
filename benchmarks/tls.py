"""TLS and SASL cost on the embedded coordinator: connection set-up and heartbeat
throughput, plaintext and TLS side by side (same machine, same run), and what
each SASL mechanism adds to a new connection.

Two coordinators run as subprocesses, one plain and one with ``--tls-cert`` (a
throw-away CA and certificate made with trustme).  Measured on each:

* *handshake*: ``--connections`` sequential new connections, each until the
  answer to its first request (ApiVersions): TCP connect (+ TLS handshake) +
  one round trip; median and p99;
* *heartbeats*: ``--members`` members join one group (JoinGroup twice, SyncGroup),
  then each keeps ``--pipeline`` heartbeats in flight on its connection for
  ``--seconds``; answered heartbeats per second and the coordinator's CPU time;
* *authentication*: ``--logins`` sequential aiokafka connections (ApiVersions,
  then SaslHandshake and SaslAuthenticate) to a third coordinator with
  ``--sasl-credentials``, per mechanism, against the same client's plaintext
  connections: median time and the coordinator's CPU per connection.  SCRAM
  verifiers use the default 8192 iterations; the client's PBKDF2 (SCRAM) and
  the server's (PLAIN) are both in the figures.

``python benchmarks/tls.py --help``; results in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trustme
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.wire.raw_client import (
    ApiVersionsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    RawClient,
    SyncGroupRequest,
)
from workgroup.coordinator.scram import Credentials, verifiers
from workgroup.testing.servers import ServerProcess, run_coordinator
from workgroup.testing.signals import interrupt_on_termination

PASSWORD = "bench-password"


@contextlib.contextmanager
def sasl_coordinator(workdir: Path) -> Iterator[ServerProcess]:
    users = workdir / "users.toml"
    Credentials().with_user("bench", verifiers(PASSWORD)).save(users)
    mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    flags = [arg for m in mechanisms for arg in ("--sasl-mechanism", m)]
    with run_coordinator("--sasl-credentials", str(users), *flags) as server:
        yield server


async def logins(server: ServerProcess, mechanism: str | None, count: int) -> list[float]:
    """Sequential aiokafka connections (version lookup, then SASL if ``mechanism``)."""
    from aiokafka.conn import CloseReason, create_conn

    # aiokafka warns on every PLAIN login without TLS; that is the point here.
    logging.getLogger("aiokafka.conn").setLevel(logging.ERROR)

    options: dict[str, Any] = {"security_protocol": "PLAINTEXT"}
    if mechanism is not None:
        options = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                   "sasl_plain_username": "bench", "sasl_plain_password": PASSWORD}  # fmt: skip
    took = []
    for _ in range(count):
        began = time.perf_counter()
        conn = await create_conn(server.host, server.port, **options)
        took.append((time.perf_counter() - began) * 1000)
        await conn.close(reason=CloseReason.SHUTDOWN)
    return took


@contextlib.contextmanager
def coordinators(workdir: Path) -> Iterator[tuple[ServerProcess, ServerProcess, ssl.SSLContext]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(workdir / "server.pem")
    client = ssl.create_default_context()
    ca.configure_trust(client)
    with (
        run_coordinator() as plain,
        run_coordinator("--tls-cert", str(workdir / "server.pem")) as tls,
    ):
        yield plain, tls, client


async def handshakes(
    server: ServerProcess, context: ssl.SSLContext | None, count: int
) -> list[float]:
    took = []
    for _ in range(count):
        began = time.perf_counter()
        client = await RawClient.connect(server.host, server.port, ssl=context)
        await client.call(ApiVersionsRequest[0](), 0)
        took.append((time.perf_counter() - began) * 1000)
        client.writer.close()
        with contextlib.suppress(Exception):
            await client.writer.wait_closed()
    return took


async def heartbeats(
    server: ServerProcess,
    context: ssl.SSLContext | None,
    members: int,
    pipeline: int,
    seconds: float,
) -> int:
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    group = f"bench-{context is not None}"
    clients = [
        await RawClient.connect(server.host, server.port, ssl=context) for _ in range(members)
    ]

    async def join(client: RawClient) -> tuple[str, int, str, list[str]]:
        request = JoinGroupRequest[5](
            group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
            member_id="", group_instance_id=None, protocol_type="consumer",
            protocols=[proto(name="range", metadata=b"")],
        )  # fmt: skip
        first = await client.call(request, 5, within=60)
        request.member_id = first.member_id
        joined = await client.call(request, 5, within=60)
        ids = [m.member_id if hasattr(m, "member_id") else m[0] for m in joined.members]
        return joined.member_id, joined.generation_id, joined.leader, ids

    joined = await asyncio.gather(*(join(c) for c in clients))
    assignment = (
        SyncGroupRequest[3].SyncGroupRequestAssignment
        if hasattr(SyncGroupRequest[3], "SyncGroupRequestAssignment")
        else None
    )

    async def sync(
        client: RawClient, member_id: str, generation: int, leader: str, ids: list[str]
    ) -> None:
        given = (
            [assignment(member_id=m, assignment=b"") for m in ids]
            if member_id == leader and assignment
            else []
        )
        await client.call(
            SyncGroupRequest[3](group_id=group, generation_id=generation, member_id=member_id,
                                group_instance_id=None, assignments=given), 3, within=60,
        )  # fmt: skip

    await asyncio.gather(*(sync(c, *j) for c, j in zip(clients, joined, strict=True)))
    answered = 0
    deadline = time.perf_counter() + seconds

    async def beat(client: RawClient, member_id: str, generation: int) -> None:
        nonlocal answered
        request = HeartbeatRequest[3](
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None
        )
        for _ in range(pipeline):
            await client.send(request, 3)
        while time.perf_counter() < deadline:
            response = await client.receive()
            assert response.error_code == 0, response
            answered += 1
            await client.send(request, 3)
        for _ in range(pipeline):
            await client.receive()

    await asyncio.gather(*(beat(c, j[0], j[1]) for c, j in zip(clients, joined, strict=True)))
    for client in clients:
        client.writer.close()
    return answered


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, clock ticks


async def measure(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, coordinators(Path(tmp)) as (plain, tls, context):
        for name, server, ctx in (("plaintext", plain, None), ("TLS", tls, context)):
            await handshakes(server, ctx, 20)  # warm-up
            took = sorted(await handshakes(server, ctx, args.connections))
            cpu_before = cpu_seconds(server.process.pid)
            answered = await heartbeats(server, ctx, args.members, args.pipeline, args.seconds)
            cpu = cpu_seconds(server.process.pid) - cpu_before
            results[name] = {
                "median_ms": statistics.median(took),
                "p99_ms": took[int(len(took) * 0.99) - 1],
                "heartbeats_per_s": answered / args.seconds,
                "cpu_us_per_heartbeat": cpu / max(answered, 1) * 1e6,
            }
    return results


async def measure_logins(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        sasl_coordinator(Path(tmp)) as server,
        run_coordinator() as plain,
    ):
        for name, target, mechanism in (
            ("no SASL", plain, None),
            ("PLAIN", server, "PLAIN"),
            ("SCRAM-SHA-256", server, "SCRAM-SHA-256"),
            ("SCRAM-SHA-512", server, "SCRAM-SHA-512"),
        ):
            await logins(target, mechanism, 5)  # warm-up
            cpu_before = cpu_seconds(target.process.pid)
            took = sorted(await logins(target, mechanism, args.logins))
            cpu = cpu_seconds(target.process.pid) - cpu_before
            results[name] = {
                "median_ms": statistics.median(took),
                "p99_ms": took[int(len(took) * 0.99) - 1],
                "server_cpu_ms": cpu / args.logins * 1000,
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--pipeline", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--logins", type=int, default=200)
    args = parser.parse_args()
    results = asyncio.run(measure(args))
    login_results = asyncio.run(measure_logins(args))
    table = Table(
        title=f"embedded coordinator, TLS vs plaintext "
        f"({args.members} members, pipeline {args.pipeline})"
    )
    for column in (
        "listener",
        "connect + first answer, median",
        "p99",
        "heartbeats/s",
        "coordinator CPU per heartbeat",
    ):
        table.add_column(column, justify="right")
    for name, r in results.items():
        table.add_row(
            name,
            f"{r['median_ms']:.2f} ms",
            f"{r['p99_ms']:.2f} ms",
            f"{r['heartbeats_per_s']:,.0f}",
            f"{r['cpu_us_per_heartbeat']:.0f} µs",
        )
    Console().print(table)
    plain, tls = results["plaintext"], results["TLS"]
    setup = tls["median_ms"] / plain["median_ms"]
    throughput = tls["heartbeats_per_s"] / plain["heartbeats_per_s"]
    print(f"TLS: set-up x{setup:.1f}, heartbeat throughput {throughput:.0%} of plaintext")
    logins_table = Table(title=f"new aiokafka connection with SASL ({args.logins} each)")
    for column in ("mechanism", "connect + authenticate, median", "p99", "coordinator CPU"):
        logins_table.add_column(column, justify="right")
    for name, r in login_results.items():
        logins_table.add_row(
            name,
            f"{r['median_ms']:.2f} ms",
            f"{r['p99_ms']:.2f} ms",
            f"{r['server_cpu_ms']:.2f} ms",
        )
    Console().print(logins_table)


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        main()
