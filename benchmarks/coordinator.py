"""Benchmark the embedded coordinator against Tansu: joining from empty and heartbeats.

Each back-end is started here on a free loopback port, fresh for every group size, and
stopped afterwards.  Members are raw asyncio connections (one TCP connection each) that
speak the Kafka protocol through kio; the heartbeat hot path uses pre-encoded frames.
Members live in ``--workers`` load-generator processes so the generator is not the
bottleneck; the parent process only orchestrates and aggregates.

Scenarios, per group size:

1. *Join from empty*: every member sends JoinGroup at once (two-step join: the first
   answer is MEMBER_ID_REQUIRED), the leader computes a trivial assignment, every member
   sends SyncGroup.  Measured: time from the first JoinGroup until every member holds its
   SyncGroup answer for one generation whose leader saw all members, and the
   JoinGroup + SyncGroup frame bytes sent and received.  Members that finished early
   heartbeat every ``--join-heartbeat-ms`` to learn about a later generation.
2. *Sustained heartbeats*: once stable, every member keeps ``--pipeline`` heartbeats in
   flight (by default enough for at least ``AUTO_IN_FLIGHT`` in total, at least 4 per
   connection) for ``--heartbeat-seconds``; measured: answered heartbeats per second and
   the latency percentiles.

Run ``python benchmarks/coordinator.py --help``; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import contextlib
import dataclasses
import datetime
import io
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import platform
import pstats
import resource
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i32Timedelta

from workgroup.testing.servers import (
    ServerProcess,
    ServerStartError,
    run_coordinator,
    run_tansu,
    tansu_binary,
)
from workgroup.testing.signals import interrupt_on_termination

# Kafka API keys and the error codes the members react to.
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_SYNC_GROUP = 14
API_VERSIONS = 18
API_NAMES = {API_JOIN_GROUP: "JoinGroup", API_HEARTBEAT: "Heartbeat", API_SYNC_GROUP: "SyncGroup"}
ERROR_NONE = 0
ERROR_ILLEGAL_GENERATION = 22
ERROR_UNKNOWN_MEMBER_ID = 25
ERROR_REBALANCE_IN_PROGRESS = 27
ERROR_MEMBER_ID_REQUIRED = 79

#: Versions the load generator speaks, lowest first; the highest the back-end also
#: advertises is used.  JoinGroup starts at v5 so the two-step join (v4+) is exercised.
SUPPORTED_VERSIONS = {API_JOIN_GROUP: (5, 9), API_SYNC_GROUP: (3, 5), API_HEARTBEAT: (3, 4)}

PROTOCOL_TYPE = "workgroup-bench"
PROTOCOL_NAME = "trivial"
BACKENDS = ("embedded", "tansu")
RETRY_BACKOFF_S = 0.1
#: Heartbeats in flight over all connections that the default pipeline depth aims at: with
#: few connections and only a few requests each, back-end and load generator take turns
#: instead of both working, and the back-end's capacity is under-measured.
AUTO_IN_FLIGHT = 512
MIN_AUTO_PIPELINE = 4
_I32 = struct.Struct(">i")
_HB_PLAIN = struct.Struct(">iiih")  # size, correlation id, throttle, error (header v0)
_HB_FLEX = struct.Struct(">iiBih")  # size, correlation id, tag count, throttle, error


# --------------------------------------------------------------------------- wire


def encode_frame(entity: Any, correlation_id: int, client_id: str) -> bytes:
    """A length-prefixed request frame: header (v1 or v2, per the entity) and body."""
    header_type = entity.__header_schema__
    header = header_type(
        request_api_key=entity.__api_key__,
        request_api_version=entity.__version__,
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header)
    entity_writer(type(entity))(buffer, entity)
    body = buffer.getvalue()
    return _I32.pack(len(body)) + body


def decode_response(response_type: Any, frame: bytes | bytearray | memoryview) -> Any:
    """Decode one response frame without its length prefix."""
    _header, offset = entity_reader(response_type.__header_schema__)(frame, 0)
    body, _size = entity_reader(response_type)(frame, offset)
    return body


def build(entity_type: Any, **values: Any) -> Any:
    """Instantiate ``entity_type`` with the subset of ``values`` its version has."""
    names = {f.name for f in dataclasses.fields(entity_type)}
    return entity_type(**{k: v for k, v in values.items() if k in names})


def negotiate_versions(host: str, port: int, timeout: float = 10.0) -> dict[int, int]:
    """ApiVersions v0 on a throw-away connection; pick the highest common versions."""
    request_type = load_request_schema(API_VERSIONS, 0)
    response_type = load_response_schema(API_VERSIONS, 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode_frame(request_type(), 1, "bench-probe"))
        size = _I32.unpack(_recv_exactly(sock, 4))[0]
        response = decode_response(response_type, _recv_exactly(sock, size))
    if response.error_code != ERROR_NONE:
        raise RuntimeError(f"ApiVersions failed with error {int(response.error_code)}")
    advertised = {
        int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
    }
    chosen: dict[int, int] = {}
    for api, (low, high) in SUPPORTED_VERSIONS.items():
        if api not in advertised:
            raise RuntimeError(f"back-end does not advertise {API_NAMES[api]}")
        server_low, server_high = advertised[api]
        version = min(high, server_high)
        if version < max(low, server_low):
            raise RuntimeError(
                f"no common {API_NAMES[api]} version: ours {low}-{high}, "
                f"back-end {server_low}-{server_high}"
            )
        chosen[api] = version
    return chosen


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed by the back-end")
        chunks += chunk
    return bytes(chunks)


# --------------------------------------------------------------------------- members


@dataclass
class JoinStats:
    """Per-worker counters of the join scenario."""

    join_requests: int = 0
    sync_requests: int = 0
    join_sync_bytes_sent: int = 0
    join_sync_bytes_received: int = 0
    heartbeats: int = 0
    heartbeat_bytes_sent: int = 0
    heartbeat_bytes_received: int = 0
    rejoins: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)


@dataclass
class HeartbeatStats:
    """Per-worker counters of the heartbeat scenario."""

    answered: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: array.array[float] = field(default_factory=lambda: array.array("d"))
    late_answers: int = 0
    unanswered: int = 0


class Member(asyncio.Protocol):
    """One group member on its own connection.

    Join phase states: ``idle`` → ``joining`` (JoinGroup in flight) → ``syncing``
    (SyncGroup in flight) → ``stable`` (heartbeats every join-heartbeat interval; a
    rebalance error sends it back to ``joining``).  In the heartbeat phase the member
    switches to a hand-parsed hot path that keeps ``pipeline`` heartbeats in flight.
    """

    def __init__(self, worker: Worker, index: int) -> None:
        self.worker = worker
        self.index = index
        self.client_id = f"bench-{index}"
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.correlation_id = 0
        self.pending: dict[int, int] = {}  # correlation id -> API key (join phase)
        self.state = "idle"
        self.member_id = ""
        self.generation = -1
        self.heartbeat_in_flight = False
        self.metadata = struct.pack(">hi", 0, index) + bytes(10)
        # Heartbeat hot path.
        self.hot = False
        self.hot_deadline = 0.0
        self.hot_prefix = b""
        self.hot_suffix = b""
        self.hot_sent: collections.deque[float] = collections.deque()
        self.hot_expected_correlation = 0

    # asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.worker.closing:
            self.worker.join_stats.errors["connection lost"] += 1
            self.state = "dead"
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.hot:
            self._hot_frames()
            return
        buffer = self.buffer
        position = 0
        while len(buffer) - position >= 4:
            size = _I32.unpack_from(buffer, position)[0]
            end = position + 4 + size
            if end > len(buffer):
                break
            self._frame(bytes(buffer[position + 4 : end]), size + 4)
            position = end
        del buffer[:position]

    # join phase ------------------------------------------------------------------

    def _send(self, entity: Any) -> None:
        if self.transport is None:
            return
        self.correlation_id += 1
        frame = encode_frame(entity, self.correlation_id, self.client_id)
        api = int(entity.__api_key__)
        self.pending[self.correlation_id] = api
        stats = self.worker.join_stats
        if api == API_HEARTBEAT:
            stats.heartbeats += 1
            stats.heartbeat_bytes_sent += len(frame)
        else:
            stats.join_sync_bytes_sent += len(frame)
            if api == API_JOIN_GROUP:
                stats.join_requests += 1
            else:
                stats.sync_requests += 1
        self.transport.write(frame)

    def send_join(self) -> None:
        self.state = "joining"
        self._send(
            build(
                self.worker.types[API_JOIN_GROUP][0],
                group_id=self.worker.group,
                session_timeout=i32Timedelta.parse(self.worker.session_timeout),
                rebalance_timeout=i32Timedelta.parse(self.worker.rebalance_timeout),
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type=PROTOCOL_TYPE,
                protocols=(
                    build(
                        self.worker.protocol_types[API_JOIN_GROUP],
                        name=PROTOCOL_NAME,
                        metadata=self.metadata,
                    ),
                ),
                reason=None,
            )
        )

    def send_heartbeat(self) -> None:
        if self.state != "stable" or self.heartbeat_in_flight:
            return
        self.heartbeat_in_flight = True
        self._send(
            build(
                self.worker.types[API_HEARTBEAT][0],
                group_id=self.worker.group,
                generation_id=i32(self.generation),
                member_id=self.member_id,
                group_instance_id=None,
            )
        )

    def _frame(self, frame: bytes, frame_size: int) -> None:
        correlation = _I32.unpack_from(frame, 0)[0]
        api = self.pending.pop(correlation, None)
        stats = self.worker.join_stats
        if api is None:
            stats.errors["unexpected correlation id"] += 1
            return
        if api == API_HEARTBEAT:
            stats.heartbeat_bytes_received += frame_size
        else:
            stats.join_sync_bytes_received += frame_size
        response = decode_response(self.worker.types[api][1], frame)
        if api == API_JOIN_GROUP:
            self._on_join(response)
        elif api == API_SYNC_GROUP:
            self._on_sync(response)
        else:
            self._on_heartbeat(response)
        self.worker.maybe_quiet()

    def _on_join(self, response: Any) -> None:
        error = int(response.error_code)
        if self.state != "joining":
            return
        if error == ERROR_MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self.send_join()
        elif error == ERROR_NONE:
            self.member_id = response.member_id
            self.generation = int(response.generation_id)
            assignments: tuple[Any, ...] = ()
            if response.leader == self.member_id:
                # Trivial assignment: every member gets its position in the list.
                assignment_type = self.worker.protocol_types[API_SYNC_GROUP]
                assignments = tuple(
                    build(assignment_type, member_id=m.member_id, assignment=_I32.pack(i))
                    for i, m in enumerate(response.members)
                )
                self.worker.report(("leader", self.generation, len(response.members)))
            self.state = "syncing"
            self._send(
                build(
                    self.worker.types[API_SYNC_GROUP][0],
                    group_id=self.worker.group,
                    generation_id=i32(self.generation),
                    member_id=self.member_id,
                    group_instance_id=None,
                    protocol_type=PROTOCOL_TYPE,
                    protocol_name=PROTOCOL_NAME,
                    assignments=assignments,
                )
            )
        else:
            self._rejoin_after_error("JoinGroup", error)

    def _on_sync(self, response: Any) -> None:
        error = int(response.error_code)
        if self.state != "syncing":
            return
        if error == ERROR_NONE:
            self.state = "stable"
            assignment = bytes(response.assignment)
            position = _I32.unpack(assignment)[0] if len(assignment) == 4 else -1
            self.worker.report(("synced", self.index, self.generation, time.monotonic(), position))
        else:
            self._rejoin_after_error("SyncGroup", error)

    def _on_heartbeat(self, response: Any) -> None:
        self.heartbeat_in_flight = False
        error = int(response.error_code)
        if error == ERROR_NONE or self.state != "stable":
            return
        self._rejoin_after_error("Heartbeat", error)

    def _rejoin_after_error(self, api: str, error: int) -> None:
        stats = self.worker.join_stats
        stats.rejoins[f"{api} {error_name(error)}"] += 1
        if error == ERROR_UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error in (
            ERROR_REBALANCE_IN_PROGRESS,
            ERROR_ILLEGAL_GENERATION,
            ERROR_UNKNOWN_MEMBER_ID,
        ):
            self.send_join()
            return
        stats.errors[f"{api} {error_name(error)}"] += 1
        self.state = "backoff"

        def retry() -> None:
            if self.state == "backoff":
                self.send_join()

        asyncio.get_running_loop().call_later(RETRY_BACKOFF_S, retry)

    @property
    def in_flight(self) -> int:
        return len(self.hot_sent) if self.hot else len(self.pending)

    # heartbeat hot path ----------------------------------------------------------

    def start_hot(self, deadline: float, pipeline: int) -> None:
        """Switch to pre-encoded heartbeats, ``pipeline`` in flight until ``deadline``."""
        if self.transport is None:
            return
        request = build(
            self.worker.types[API_HEARTBEAT][0],
            group_id=self.worker.group,
            generation_id=i32(self.generation),
            member_id=self.member_id,
            group_instance_id=None,
        )
        template = encode_frame(request, 0, self.client_id)
        # Frame layout: size(4) api key(2) version(2) correlation id(4) rest.
        self.hot_prefix, self.hot_suffix = template[:8], template[12:]
        self.hot = True
        self.hot_deadline = deadline
        self.hot_expected_correlation = self.correlation_id + 1
        now = time.monotonic()
        frames = []
        for _ in range(pipeline):
            self.correlation_id += 1
            frames.append(self.hot_prefix + _I32.pack(self.correlation_id) + self.hot_suffix)
            self.hot_sent.append(now)
        self.transport.write(b"".join(frames))

    def _hot_frames(self) -> None:
        buffer = self.buffer
        available = len(buffer)
        stats = self.worker.heartbeat_stats
        latencies = stats.latencies
        sent = self.hot_sent
        now = time.monotonic()
        before_deadline = now < self.hot_deadline
        flexible = self.worker.heartbeat_flexible
        position = 0
        answered = 0
        while available - position >= 4:
            size = _I32.unpack_from(buffer, position)[0]
            end = position + 4 + size
            if end > available:
                break
            if flexible:
                _size, correlation, tags, _throttle, error = _HB_FLEX.unpack_from(buffer, position)
                if tags:  # tagged fields present: take the general decoder
                    response = decode_response(
                        self.worker.types[API_HEARTBEAT][1], bytes(buffer[position + 4 : end])
                    )
                    error = int(response.error_code)
            else:
                _size, correlation, _throttle, error = _HB_PLAIN.unpack_from(buffer, position)
            position = end
            if correlation != self.hot_expected_correlation:
                stats.errors["out-of-order correlation id"] += 1
            self.hot_expected_correlation = correlation + 1
            sent_at = sent.popleft()
            if not before_deadline:
                stats.late_answers += 1
                continue
            latencies.append(now - sent_at)
            if error == ERROR_NONE:
                stats.answered += 1
            else:
                stats.errors[f"Heartbeat {error_name(error)}"] += 1
            answered += 1
        del buffer[:position]
        if answered and before_deadline and self.transport is not None:
            prefix, suffix = self.hot_prefix, self.hot_suffix
            first = self.correlation_id + 1
            self.correlation_id += answered
            for _ in range(answered):
                sent.append(now)
            self.transport.write(
                b"".join(
                    prefix + _I32.pack(c) + suffix for c in range(first, self.correlation_id + 1)
                )
            )
        if not sent:
            self.worker.maybe_drained()


# --------------------------------------------------------------------------- worker


class Worker:
    """A load-generator process: a share of the members and one asyncio loop.

    Commands arrive over a pipe from the parent; events and results go back on it.
    """

    def __init__(self, conn: multiprocessing.connection.Connection, setup: dict[str, Any]) -> None:
        self.conn = conn
        self.host: str = setup["host"]
        self.port: int = setup["port"]
        self.group: str = setup["group"]
        self.indices: list[int] = setup["indices"]
        self.session_timeout = _ms(setup["session_timeout_ms"])
        self.rebalance_timeout = _ms(setup["rebalance_timeout_ms"])
        self.join_heartbeat_s: float = setup["join_heartbeat_ms"] / 1000
        versions: dict[int, int] = setup["versions"]
        self.types = {
            api: (load_request_schema(api, v), load_response_schema(api, v))
            for api, v in versions.items()
        }
        join_module = sys.modules[self.types[API_JOIN_GROUP][0].__module__]
        sync_module = sys.modules[self.types[API_SYNC_GROUP][0].__module__]
        self.protocol_types = {
            API_JOIN_GROUP: join_module.JoinGroupRequestProtocol,
            API_SYNC_GROUP: sync_module.SyncGroupRequestAssignment,
        }
        self.heartbeat_flexible = bool(self.types[API_HEARTBEAT][1].__flexible__)
        self.members: list[Member] = []
        self.closing = False
        self.join_stats = JoinStats()
        self.heartbeat_stats = HeartbeatStats()
        self.outbox: list[tuple[Any, ...]] = []
        self.quiet_waiter: asyncio.Future[None] | None = None
        self.drained_waiter: asyncio.Future[None] | None = None
        self.join_ticker: asyncio.Task[None] | None = None

    def report(self, event: tuple[Any, ...]) -> None:
        """Queue an event for the parent; flushed once per loop iteration."""
        if not self.outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self.outbox.append(event)

    def _flush(self) -> None:
        if self.outbox:
            self.conn.send(("events", self.outbox))
            self.outbox = []

    def maybe_quiet(self) -> None:
        waiter = self.quiet_waiter
        if waiter is not None and not waiter.done() and self._all_answered():
            waiter.set_result(None)

    def maybe_drained(self) -> None:
        waiter = self.drained_waiter
        if waiter is not None and not waiter.done() and self._all_answered():
            waiter.set_result(None)

    def _all_answered(self) -> bool:
        return all(m.in_flight == 0 for m in self.members if m.transport is not None)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        loop.add_reader(self.conn.fileno(), lambda: commands.put_nowait(self.conn.recv()))
        try:
            while True:
                command = await commands.get()
                name = command[0]
                if name == "connect":
                    await self._connect()
                    self.conn.send(("connected", len(self.members)))
                elif name == "join":
                    started = time.monotonic()
                    for member in self.members:
                        member.send_join()
                    self.join_ticker = asyncio.create_task(self._join_heartbeats())
                    self.conn.send(("join-started", started))
                elif name == "quiesce":
                    self.conn.send(("quiet", await self._quiesce(command[1])))
                elif name == "heartbeat":
                    self.conn.send(("heartbeat-done", await self._heartbeat(*command[1:])))
                elif name == "close":
                    self._close()
                    self.conn.send(("closed",))
                    return
        finally:
            loop.remove_reader(self.conn.fileno())
            self._close()

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        # Bounded concurrency: a burst of 1,000 SYNs overflows small listen backlogs.
        gate = asyncio.Semaphore(64)

        async def open_one(index: int) -> Member:
            async with gate:
                member = Member(self, index)
                await loop.create_connection(lambda: member, self.host, self.port)
                return member

        self.members = list(await asyncio.gather(*(open_one(i) for i in self.indices)))

    async def _join_heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.join_heartbeat_s)
            for member in self.members:
                member.send_heartbeat()

    async def _quiesce(self, wait_s: float) -> dict[str, Any]:
        """Stop join-phase heartbeats and wait for every answer still outstanding."""
        states = collections.Counter(m.state for m in self.members)
        if self.join_ticker is not None:
            self.join_ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.join_ticker
        self.quiet_waiter = asyncio.get_running_loop().create_future()
        self.maybe_quiet()
        quiet = True
        try:
            await asyncio.wait_for(self.quiet_waiter, wait_s)
        except TimeoutError:
            quiet = False
        self._flush()
        stats = dataclasses.asdict(self.join_stats)
        stats["errors"] = dict(self.join_stats.errors)
        stats["rejoins"] = dict(self.join_stats.rejoins)
        stats["states"] = dict(states)
        stats["quiet"] = quiet
        stats["stable_members"] = sum(1 for m in self.members if m.state == "stable")
        return stats

    async def _heartbeat(self, start_at: float, seconds: float, pipeline: int) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, start_at - loop.time()))
        deadline = start_at + seconds
        cpu_before = time.process_time()
        begun = time.monotonic()
        for member in self.members:
            member.start_hot(deadline, pipeline)
        await asyncio.sleep(max(0.0, deadline - loop.time()))
        cpu_used = time.process_time() - cpu_before
        ended = time.monotonic()
        self.drained_waiter = loop.create_future()
        self.maybe_drained()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drained_waiter, 10.0)
        stats = self.heartbeat_stats
        stats.unanswered = sum(len(m.hot_sent) for m in self.members)
        return {
            "answered": stats.answered,
            "errors": dict(stats.errors),
            "latencies": stats.latencies.tobytes(),
            "late_answers": stats.late_answers,
            "unanswered": stats.unanswered,
            "cpu_seconds": cpu_used,
            "began": begun,
            "ended": ended,
            "connections": sum(1 for m in self.members if m.transport is not None),
        }

    def _close(self) -> None:
        self.closing = True
        for member in self.members:
            if member.transport is not None:
                member.transport.close()


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def worker_main(conn: multiprocessing.connection.Connection, setup: dict[str, Any]) -> None:
    """Entry point of a load-generator process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    raise_file_limit(len(setup["indices"]) + 64)
    with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError):
        asyncio.run(Worker(conn, setup).run())  # these errors: the parent went away


def raise_file_limit(needed: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise RuntimeError(f"open-file limit {soft} is below the {needed} descriptors needed")
    return soft


# --------------------------------------------------------------------------- back-ends


class Backend:
    """A back-end process on a free loopback port, its output kept in a log file."""

    name = "backend"

    def __init__(self, log_dir: Path, label: str) -> None:
        self.log_path = log_dir / f"{label}.log"
        self._running = contextlib.ExitStack()
        self.log: IO[bytes] = self._running.enter_context(self.log_path.open("wb"))
        self._server: ServerProcess | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0

    def start(self, timeout: float) -> None:
        raise NotImplementedError

    def _run(self, runner: contextlib.AbstractContextManager[ServerProcess]) -> None:
        try:
            self._server = self._running.enter_context(runner)
        except ServerStartError as exc:
            # run_one prints the log's last lines; the error stays one line.
            raise RuntimeError(f"{self.name} did not start; log: {self.log_path}") from exc
        self.process = self._server.process
        self.host, self.port = self._server.host, self._server.port

    def cpu_seconds(self) -> float:
        """User + system CPU of the back-end process (all its threads) so far."""
        assert self.process is not None
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            return math.nan
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        assert self.process is not None
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except FileNotFoundError:
            pass
        return math.nan

    def check_alive(self) -> None:
        """Raise if the back-end process has exited (a crash mid-run)."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"the back-end exited with code {self.process.returncode}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(timeout=10)
        self._running.close()


class EmbeddedBackend(Backend):
    """``python -m workgroup coordinator`` with a zero initial rebalance delay."""

    name = "embedded"

    def __init__(
        self, log_dir: Path, label: str, profile_path: Path | None, command: list[str] | None
    ) -> None:
        super().__init__(log_dir, label)
        self.profile_path = profile_path
        self.command = command

    def start(self, timeout: float) -> None:
        command = self.command
        if command is None and self.profile_path is not None:
            command = [sys.executable, "-m", "cProfile", "-o", str(self.profile_path)]
            command += ["-m", "workgroup", "coordinator"]
        self._run(
            run_coordinator(
                "--initial-rebalance-delay-ms",
                "0",
                command=command,
                log=self.log,
                startup_timeout_s=timeout,
            )
        )


class TansuBackend(Backend):
    """Tansu's broker with in-memory storage."""

    name = "tansu"

    def start(self, timeout: float) -> None:
        self._run(run_tansu(log=self.log, startup_timeout_s=timeout))


# --------------------------------------------------------------------------- orchestration


@dataclass
class JoinResult:
    status: str  # "stable", "not stable", "failed"
    seconds: float | None = None
    generation: int | None = None
    generations_seen: int = 0
    synced_members: int = 0
    join_requests: int = 0
    sync_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    heartbeats: int = 0
    assignments_ok: bool | None = None
    rejoins: dict[str, int] = field(default_factory=dict)
    member_states: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    server_cpu_seconds: float | None = None
    detail: str = ""


@dataclass
class HeartbeatResult:
    status: str  # "ok", "skipped", "failed"
    seconds: float | None = None
    answered: int = 0
    per_second: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    pipeline: int = 0
    server_cpu_percent: float | None = None
    loadgen_cpu_percent: float | None = None
    machine_busy_percent: float | None = None
    machine_steal_percent: float | None = None
    others_cpu_percent: float | None = None
    per_server_cpu_second: float | None = None
    detail: str = ""


@dataclass
class RunResult:
    backend: str
    members: int
    repeat: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    join: JoinResult = field(default_factory=lambda: JoinResult("failed"))
    heartbeat: HeartbeatResult = field(default_factory=lambda: HeartbeatResult("skipped"))
    server_peak_rss_mb: float | None = None
    error: str = ""


@dataclass
class Summary:
    """The runs of one back-end and size, and their medians."""

    backend: str
    members: int
    runs: list[RunResult]

    @property
    def stable_runs(self) -> list[RunResult]:
        return [r for r in self.runs if not r.error and r.join.status == "stable"]

    @property
    def join_seconds(self) -> list[float]:
        return sorted(r.join.seconds for r in self.stable_runs if r.join.seconds is not None)

    @property
    def median_join_seconds(self) -> float | None:
        values = self.join_seconds
        return statistics.median(values) if values else None

    @property
    def join_run(self) -> RunResult:
        """The run whose join time is the median (else the first run)."""
        stable = sorted(self.stable_runs, key=lambda r: r.join.seconds or 0.0)
        return stable[(len(stable) - 1) // 2] if stable else self.runs[0]

    @property
    def heartbeat_rates(self) -> list[float]:
        return sorted(
            r.heartbeat.per_second for r in self.runs if r.heartbeat.per_second is not None
        )

    @property
    def median_heartbeat_rate(self) -> float | None:
        values = self.heartbeat_rates
        return statistics.median(values) if values else None

    @property
    def heartbeat_run(self) -> RunResult | None:
        """The run whose heartbeat rate is the median."""
        measured = sorted(
            (r for r in self.runs if r.heartbeat.per_second is not None),
            key=lambda r: r.heartbeat.per_second or 0.0,
        )
        return measured[(len(measured) - 1) // 2] if measured else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "members": self.members,
            "runs": len(self.runs),
            "stable_runs": len(self.stable_runs),
            "median_join_seconds": self.median_join_seconds,
            "join_seconds": self.join_seconds,
            "median_heartbeats_per_second": self.median_heartbeat_rate,
            "heartbeats_per_second": self.heartbeat_rates,
        }


def summarize(results: list[RunResult]) -> dict[tuple[str, int], Summary]:
    summaries: dict[tuple[str, int], Summary] = {}
    for run in results:
        key = (run.backend, run.members)
        summaries.setdefault(key, Summary(run.backend, run.members, [])).runs.append(run)
    return summaries


class WorkerPool:
    """The load-generator processes for one run, and messaging with them."""

    def __init__(self, count: int, setup: dict[str, Any], members: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conns: list[multiprocessing.connection.Connection] = []
        self.processes: list[Any] = []
        for share in _split(list(range(members)), count):
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=worker_main, args=(child_end, {**setup, "indices": share}), daemon=True
            )
            process.start()
            child_end.close()
            self.conns.append(parent_end)
            self.processes.append(process)

    def broadcast(self, command: tuple[Any, ...]) -> None:
        for conn in self.conns:
            conn.send(command)

    def gather(self, kind: str, timeout: float, on_event: Callable[[Any], None]) -> list[Any]:
        """Wait for one ``kind`` reply from each worker; pass events on meanwhile."""
        replies: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(replies) < len(self.conns):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"workers did not answer {kind!r} within {timeout:.0f} s")
            for conn in multiprocessing.connection.wait(self.conns, remaining):
                assert isinstance(conn, multiprocessing.connection.Connection)
                message = conn.recv()
                if message[0] == "events":
                    for event in message[1]:
                        on_event(event)
                elif message[0] == kind:
                    replies[self.conns.index(conn)] = message[1] if len(message) > 1 else None
                else:
                    raise RuntimeError(f"unexpected worker message {message[0]!r}")
        return [replies[i] for i in range(len(self.conns))]

    def poll_events(self, timeout: float, on_event: Callable[[Any], None]) -> None:
        for conn in multiprocessing.connection.wait(self.conns, timeout):
            assert isinstance(conn, multiprocessing.connection.Connection)
            message = conn.recv()
            if message[0] != "events":
                raise RuntimeError(f"unexpected worker message {message[0]!r}")
            for event in message[1]:
                on_event(event)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("close",))
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self.conns:
            conn.close()


def _split(items: list[int], parts: int) -> list[list[int]]:
    parts = max(1, min(parts, len(items)))
    return [items[i::parts] for i in range(parts)]


class StabilityTracker:
    """Stable = some generation whose leader saw all members, and all synced at it."""

    def __init__(self, members: int) -> None:
        self.members = members
        self.leader_sizes: dict[int, int] = {}
        self.synced_at: dict[int, tuple[int, float]] = {}  # member -> (generation, time)
        self.assignments: dict[int, int] = {}  # member -> position the leader gave it
        self.synced_count: collections.Counter[int] = collections.Counter()
        self.generations: set[int] = set()

    def on_event(self, event: Any) -> None:
        if event[0] == "leader":
            _, generation, size = event
            self.leader_sizes[generation] = size
            self.generations.add(generation)
        elif event[0] == "synced":
            _, index, generation, at, position = event
            self.assignments[index] = position
            previous = self.synced_at.get(index)
            if previous is not None:
                self.synced_count[previous[0]] -= 1
            self.synced_at[index] = (generation, at)
            self.synced_count[generation] += 1
            self.generations.add(generation)

    def stable_generation(self) -> int | None:
        for generation, size in self.leader_sizes.items():
            if size == self.members and self.synced_count[generation] == self.members:
                return generation
        return None

    def stable_at(self, generation: int) -> float:
        return max(at for g, at in self.synced_at.values() if g == generation)

    def assignments_consistent(self) -> bool:
        """Every member got a distinct position 0..N-1: the leader's assignment, intact."""
        return sorted(self.assignments.values()) == list(range(self.members))

    def best_synced(self) -> int:
        return max(self.synced_count.values(), default=0)


def run_one(
    backend_name: str, members: int, repeat: int, args: argparse.Namespace, log_dir: Path
) -> RunResult:
    result = RunResult(backend=backend_name, members=members, repeat=repeat)
    label = f"{backend_name}-{members}" + (f"-r{repeat + 1}" if args.repeat > 1 else "")
    backend: Backend
    if backend_name == "embedded":
        profile = args.profile_dir / f"{label}.prof" if args.profile_dir else None
        command = shlex.split(args.embedded_command) if args.embedded_command else None
        backend = EmbeddedBackend(log_dir, label, profile, command)
    else:
        backend = TansuBackend(log_dir, label)
    pool: WorkerPool | None = None
    try:
        backend.start(args.startup_timeout)
        versions = negotiate_versions(backend.host, backend.port)
        result.versions = {API_NAMES[api]: v for api, v in versions.items()}
        setup = {
            "host": backend.host,
            "port": backend.port,
            "group": f"bench-{members}-{uuid.uuid4().hex[:8]}",
            "session_timeout_ms": args.session_timeout_ms,
            "rebalance_timeout_ms": args.rebalance_timeout_ms,
            "join_heartbeat_ms": args.join_heartbeat_ms,
            "versions": versions,
        }
        workers = max(1, min(args.workers, members))
        pool = WorkerPool(workers, setup, members)
        pool.broadcast(("connect",))
        connected = sum(pool.gather("connected", args.startup_timeout + members / 50, _no_event))
        if connected != members:
            raise RuntimeError(f"only {connected} of {members} connections opened")
        with sampled(args, backend, f"{label}-join"):
            run_join(pool, backend, members, args, result)
        if result.join.status == "stable":
            with sampled(args, backend, f"{label}-heartbeat"):
                run_heartbeats(pool, backend, args, result)
        else:
            result.heartbeat = HeartbeatResult("skipped", detail="group not stable")
        result.server_peak_rss_mb = backend.peak_rss_mb()
    except Exception as exc:  # report and go on with the next run
        result.error = f"{type(exc).__name__}: {exc}"
        log(f"  {label}: {result.error}")
        with contextlib.suppress(OSError, ValueError):
            backend.log.flush()
            tail = backend.log_path.read_text(errors="replace").splitlines()[-5:]
            log("  last lines of the back-end's log:\n    " + "\n    ".join(tail))
    finally:
        if pool is not None:
            pool.close()
        backend.stop()
    return result


@contextlib.contextmanager
def sampled(args: argparse.Namespace, backend: Backend, label: str) -> Iterator[None]:
    """Sample the embedded coordinator with py-spy while the block runs (if asked)."""
    if args.py_spy_dir is None or not isinstance(backend, EmbeddedBackend):
        yield
        return
    assert backend.process is not None
    raw = args.py_spy_dir / f"{label}.collapsed"
    with (args.py_spy_dir / f"{label}.py-spy.log").open("wb") as spy_log:
        spy = subprocess.Popen(
            [
                args.py_spy,
                "record",
                "--pid",
                str(backend.process.pid),
                "--rate",
                "250",
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(raw),
            ],
            stdin=subprocess.DEVNULL,
            stdout=spy_log,
            stderr=subprocess.STDOUT,
        )
        time.sleep(0.5)  # let it attach before the phase starts
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=15)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
    if raw.exists():
        summary = args.py_spy_dir / f"{label}.top.txt"
        summary.write_text(summarize_samples(raw.read_text(), 30))
        log(f"  py-spy {label}: {summary}")
    else:
        log(f"  py-spy {label}: no samples (see {args.py_spy_dir / (label + '.py-spy.log')})")


def summarize_samples(collapsed: str, limit: int) -> str:
    """Top functions by own and by total samples, from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [_function_of(frame) for frame in stack.split(";")]
        own[frames[-1]] += count
        for frame in set(frames):
            if not frame.endswith(_OUTER_FRAMES):
                total[frame] += count
    lines = [f"{samples} samples of the coordinator on CPU (py-spy, idle excluded)", ""]
    for title, counter in (("own time (the function itself)", own), ("total time", total)):
        lines.append(f"top {limit} by {title}:")
        for frame, count in counter.most_common(limit):
            lines.append(f"  {100 * count / max(samples, 1):5.1f} %  {frame}")
        lines.append("")
    return "\n".join(lines)


#: Frames every sample passes through (start-up, CLI, event loop): left out of "total".
_OUTER_FRAMES = (
    "(<frozen runpy>)",
    "(click/core.py)",
    "(workgroup/__main__.py)",
    "(workgroup/cli/__init__.py)",
    "(workgroup/cli/coordinator.py)",
    "(asyncio/runners.py)",
    "BaseEventLoop.run_until_complete (asyncio/base_events.py)",
    "BaseEventLoop.run_forever (asyncio/base_events.py)",
)


def _function_of(frame: str) -> str:
    """'func (path/file.py:123)' -> 'func (path/file.py)': aggregate over lines."""
    name, _, location = frame.partition(" (")
    path = location.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({path})" if path else name


def _no_event(event: Any) -> None:
    raise RuntimeError(f"unexpected event {event!r}")


def run_join(
    pool: WorkerPool, backend: Backend, members: int, args: argparse.Namespace, result: RunResult
) -> None:
    tracker = StabilityTracker(members)
    cpu_before = backend.cpu_seconds()
    pool.broadcast(("join",))
    started = min(pool.gather("join-started", 30, tracker.on_event))
    deadline = started + args.join_timeout
    stable = tracker.stable_generation()
    while stable is None and time.monotonic() < deadline:
        pool.poll_events(min(0.05, max(0.0, deadline - time.monotonic())), tracker.on_event)
        stable = tracker.stable_generation()
        backend.check_alive()
    join = JoinResult("stable" if stable is not None else "not stable")
    join.server_cpu_seconds = backend.cpu_seconds() - cpu_before
    if stable is not None:
        join.seconds = tracker.stable_at(stable) - started
        join.generation = stable
        join.assignments_ok = tracker.assignments_consistent()
        if not join.assignments_ok:
            join.detail = "members did not receive the leader's assignment intact"
    else:
        join.seconds = None
        join.detail = (
            f"not stable after {args.join_timeout:g} s "
            f"({tracker.best_synced()}/{members} synced in one generation)"
        )
    pool.broadcast(("quiesce", 10.0))
    stats = pool.gather("quiet", 30, tracker.on_event)
    join.generations_seen = len(tracker.generations)
    join.synced_members = members if stable is not None else tracker.best_synced()
    for s in stats:
        join.join_requests += s["join_requests"]
        join.sync_requests += s["sync_requests"]
        join.bytes_sent += s["join_sync_bytes_sent"]
        join.bytes_received += s["join_sync_bytes_received"]
        join.heartbeats += s["heartbeats"]
        _add_counts(join.rejoins, s["rejoins"])
        _add_counts(join.member_states, s["states"])
        _add_counts(join.errors, s["errors"])
    if stable is not None and not all(s["quiet"] for s in stats):
        join.detail = "some requests still unanswered after the group was stable"
    result.join = join


def _add_counts(total: dict[str, int], more: dict[str, int]) -> None:
    for key, count in more.items():
        total[key] = total.get(key, 0) + count


def run_heartbeats(
    pool: WorkerPool, backend: Backend, args: argparse.Namespace, result: RunResult
) -> None:
    start_at = time.monotonic() + 0.2
    pipeline = pipeline_depth(args.pipeline, result.members)
    pool.broadcast(("heartbeat", start_at, args.heartbeat_seconds, pipeline))
    # CPU is read at the window's edges: the workers report only at its end.
    time.sleep(max(0.0, start_at - time.monotonic()))
    cpu_before, machine_before = backend.cpu_seconds(), machine_cpu_ticks()
    time.sleep(max(0.0, start_at + args.heartbeat_seconds - time.monotonic()))
    server_cpu = backend.cpu_seconds() - cpu_before
    machine = [
        after - before for after, before in zip(machine_cpu_ticks(), machine_before, strict=True)
    ]
    backend.check_alive()
    replies = pool.gather("heartbeat-done", 30, _no_event)
    began = min(r["began"] for r in replies)
    ended = max(r["ended"] for r in replies)
    elapsed = max(ended - began, 1e-9)
    latencies = array.array("d")
    for reply in replies:
        latencies.frombytes(reply["latencies"])
    ordered = sorted(latencies)
    hb = HeartbeatResult("ok", seconds=elapsed, pipeline=pipeline)
    hb.answered = sum(r["answered"] for r in replies)
    hb.per_second = hb.answered / elapsed
    hb.p50_ms = _percentile(ordered, 0.50) * 1000 if ordered else None
    hb.p99_ms = _percentile(ordered, 0.99) * 1000 if ordered else None
    hb.max_ms = ordered[-1] * 1000 if ordered else None
    for reply in replies:
        for key, count in reply["errors"].items():
            hb.errors[key] = hb.errors.get(key, 0) + count
    unanswered = sum(r["unanswered"] for r in replies)
    if unanswered:
        hb.errors["unanswered after 10 s"] = unanswered
    hb.server_cpu_percent = 100 * server_cpu / args.heartbeat_seconds
    if server_cpu > 0:
        hb.per_server_cpu_second = hb.answered / server_cpu
    hb.loadgen_cpu_percent = 100 * sum(r["cpu_seconds"] for r in replies) / elapsed
    if machine and sum(machine) > 0:
        # /proc/stat "cpu": user nice system idle iowait irq softirq steal ...
        idle = machine[3] + machine[4]
        hb.machine_busy_percent = 100 * (sum(machine[:8]) - idle) / sum(machine[:8])
        hb.machine_steal_percent = 100 * machine[7] / sum(machine[:8])
        cores = os.cpu_count() or 1
        hb.others_cpu_percent = max(
            0.0, hb.machine_busy_percent * cores - hb.server_cpu_percent - hb.loadgen_cpu_percent
        )
    result.heartbeat = hb


def machine_cpu_ticks() -> list[int]:
    """Machine-wide CPU ticks from /proc/stat (empty where unavailable)."""
    try:
        with open("/proc/stat") as stat:
            return [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def pipeline_depth(requested: int | None, members: int) -> int:
    """Heartbeats in flight per connection: as requested, or the automatic depth."""
    if requested is not None:
        return requested
    return max(MIN_AUTO_PIPELINE, math.ceil(AUTO_IN_FLIGHT / members))


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


# --------------------------------------------------------------------------- reporting


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def environment(args: argparse.Namespace) -> dict[str, Any]:
    try:
        binary = tansu_binary()
        tansu = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except Exception as exc:
        tansu = f"unavailable ({exc})"
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model,
        "cpus": os.cpu_count(),
        "tansu": tansu,
        "workers": args.workers,
        "repeat": args.repeat,
        "pipeline": args.pipeline or f"auto (>= {AUTO_IN_FLIGHT} in flight, >= 4 each)",
        "session_timeout_ms": args.session_timeout_ms,
        "rebalance_timeout_ms": args.rebalance_timeout_ms,
        "join_heartbeat_ms": args.join_heartbeat_ms,
        "join_timeout_s": args.join_timeout,
        "heartbeat_seconds": args.heartbeat_seconds,
        "profiled": bool(args.profile_dir) or bool(args.py_spy_dir),
    }


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "—" if value is None or math.isnan(value) else f"{value:{spec}}{suffix}"


def _bytes(value: int) -> str:
    if value >= 10 * 1024 * 1024:
        return f"{value / 1024 / 1024:.1f} MiB"
    if value >= 10 * 1024:
        return f"{value / 1024:.0f} KiB"
    return f"{value} B"


def _join_time(summary: Summary | None) -> str:
    if summary is None:
        return ""
    stable = len(summary.stable_runs)
    if stable:
        text = _fmt(summary.median_join_seconds, ".2f", " s") + _range(summary.join_seconds, ".2f")
        if stable < len(summary.runs):
            text += f" [yellow]({stable}/{len(summary.runs)} runs stable)[/yellow]"
        return text
    first = summary.runs[0]
    if first.error:
        return f"[red]failed: {first.error[:60]}[/red]"
    return f"[yellow]{first.join.detail.split(' (')[0]}[/yellow]"


def _range(values: Sequence[float], spec: str) -> str:
    if len(values) < 2:
        return ""
    return f" ({min(values):{spec}}-{max(values):{spec}})"


def render(results: list[RunResult], env: dict[str, Any], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 240)
    backends = [b for b in BACKENDS if b in args.backends]
    sizes = args.sizes
    index = summarize(results)
    repeats = f", median of {args.repeat} runs (min-max)" if args.repeat > 1 else ""

    join = Table(
        title=f"Join from empty: time until every member has its SyncGroup answer{repeats}"
    )
    join.add_column("members", justify="right")
    for b in backends:
        join.add_column(f"{b}\nstable after", justify="right")
        join.add_column(f"{b}\ngenerations", justify="right")
        join.add_column(f"{b}\nJoin+Sync sent", justify="right")
        join.add_column(f"{b}\nJoin+Sync recv", justify="right")
    for size in sizes:
        row = [f"{size:,}"]
        for b in backends:
            summary = index.get((b, size))
            if summary is None or not summary.stable_runs:
                row += [_join_time(summary), "", "", ""]
                continue
            run = summary.join_run
            row += [
                _join_time(summary),
                str(run.join.generations_seen),
                _bytes(run.join.bytes_sent),
                _bytes(run.join.bytes_received),
            ]
        join.add_row(*row)
    console.print(join)

    heart = Table(title=f"Sustained heartbeats ({args.heartbeat_seconds:g} s per run{repeats})")
    heart.add_column("members", justify="right")
    heart.add_column("in flight", justify="right")
    for b in backends:
        heart.add_column(f"{b}\nheartbeats/s", justify="right")
        heart.add_column(f"{b}\nper server\nCPU-second", justify="right")
        heart.add_column(f"{b}\np50", justify="right")
        heart.add_column(f"{b}\np99", justify="right")
        heart.add_column(f"{b}\nerrors", justify="right")
    for size in sizes:
        depth = pipeline_depth(args.pipeline, size)
        row = [f"{size:,}", f"{depth} x {size:,}"]
        for b in backends:
            summary = index.get((b, size))
            measured = None if summary is None else summary.heartbeat_run
            if summary is None or measured is None:
                first = None if summary is None else summary.runs[0]
                why = "" if first is None else (first.heartbeat.detail or first.error or "")
                row += [f"[yellow]skipped[/yellow] {why[:30]}", "", "", "", ""]
                continue
            hb = measured.heartbeat
            row += [
                _fmt(summary.median_heartbeat_rate, ",.0f")
                + _range(summary.heartbeat_rates, ",.0f"),
                _fmt(hb.per_server_cpu_second, ",.0f"),
                _fmt(hb.p50_ms, ".2f", " ms"),
                _fmt(hb.p99_ms, ".2f", " ms"),
                str(sum(hb.errors.values())),
            ]
        heart.add_row(*row)
    console.print(heart)

    detail = Table(title="Details per run")
    for name in (
        "back-end",
        "members",
        "run",
        "versions J/S/H",
        "JoinGroup reqs",
        "SyncGroup reqs",
        "join hb",
        "rejoins",
        "server CPU join",
        "server CPU hb",
        "loadgen CPU hb",
        "other procs CPU hb",
        "steal hb",
        "peak RSS",
        "notes",
    ):
        if name == "notes":
            detail.add_column(name, overflow="fold")
        else:
            detail.add_column(name, justify="left" if name == "back-end" else "right")
    for run in results:
        versions = "/".join(
            str(run.versions.get(n, "?")) for n in ("JoinGroup", "SyncGroup", "Heartbeat")
        )
        notes = "; ".join(
            filter(
                None,
                [
                    run.error,
                    run.join.detail,
                    run.heartbeat.detail if run.heartbeat.status != "skipped" else "",
                    _errors_text("join", run.join.errors),
                    _errors_text("rejoins", run.join.rejoins),
                    _errors_text("members at cap", run.join.member_states)
                    if run.join.status == "not stable"
                    else "",
                    _errors_text("hb", run.heartbeat.errors),
                ],
            )
        )
        detail.add_row(
            run.backend,
            f"{run.members:,}",
            str(run.repeat + 1),
            versions if run.versions else "—",
            str(run.join.join_requests),
            str(run.join.sync_requests),
            str(run.join.heartbeats),
            str(sum(run.join.rejoins.values())),
            _fmt(run.join.server_cpu_seconds, ".2f", " s"),
            _fmt(run.heartbeat.server_cpu_percent, ".0f", " %"),
            _fmt(run.heartbeat.loadgen_cpu_percent, ".0f", " %"),
            _fmt(run.heartbeat.others_cpu_percent, ".0f", " %"),
            _fmt(run.heartbeat.machine_steal_percent, ".0f", " %"),
            _fmt(run.server_peak_rss_mb, ".0f", " MiB"),
            notes,
        )
    console.print(detail)

    if "embedded" in backends:
        targets = Table(title="Targets for the embedded coordinator (issue 2)")
        targets.add_column("target")
        targets.add_column("measured")
        targets.add_column("verdict")
        for check, figures, verdict in target_checks(index, sizes, backends):
            colour = {"met": "green", "missed": "red"}.get(verdict, "yellow")
            targets.add_row(check, figures, f"[{colour}]{verdict}[/{colour}]")
        console.print(targets)
    console.print("[dim]environment: " + ", ".join(f"{k}={v}" for k, v in env.items()) + "[/dim]")


def _errors_text(label: str, errors: dict[str, int]) -> str:
    if not errors:
        return ""
    return f"{label}: " + ", ".join(f"{k} x{v}" for k, v in sorted(errors.items()))


def target_checks(
    index: dict[tuple[str, int], Summary], sizes: Sequence[int], backends: Sequence[str]
) -> Iterator[tuple[str, str, str]]:
    big = index.get(("embedded", 1000))
    if big is not None:
        seconds = big.median_join_seconds
        ok = len(big.stable_runs) == len(big.runs) and seconds is not None and seconds < 3.0
        yield (
            "1,000 members stable < 3 s (initial delay 0)",
            _join_time(big),
            "met" if ok else "missed",
        )
    rates = {
        size: s.median_heartbeat_rate
        for (b, size), s in index.items()
        if b == "embedded" and s.median_heartbeat_rate is not None
    }
    if rates:
        measured = ", ".join(f"{rate:,.0f}/s at {size:,}" for size, rate in rates.items())
        best = max(r for r in rates.values() if r is not None)
        yield (
            "≥ 10,000 heartbeats/s",
            measured,
            "met" if best >= 10_000 else "missed",
        )
    if "tansu" in backends:
        for size in (100, 1000):
            ours, theirs = index.get(("embedded", size)), index.get(("tansu", size))
            if ours is None or theirs is None:
                continue
            yield from _versus_tansu(size, ours, theirs)


def _versus_tansu(size: int, ours: Summary, theirs: Summary) -> Iterator[tuple[str, str, str]]:
    ours_s, theirs_s = ours.median_join_seconds, theirs.median_join_seconds
    if ours_s is None:
        verdict = "missed"
    elif theirs_s is None:
        verdict = "met"
    else:
        verdict = "met" if ours_s <= theirs_s else "missed"
    yield (
        f"join at {size:,} not slower than Tansu",
        f"{_join_time(ours)} vs {_join_time(theirs)}",
        verdict,
    )
    a, b = ours.median_heartbeat_rate, theirs.median_heartbeat_rate
    if a is not None or b is not None:
        if a is None:
            verdict = "missed"
        elif b is None:
            verdict = "met"
        else:
            verdict = "met" if a >= b else "missed"
        yield (
            f"heartbeats/s at {size:,} not below Tansu",
            f"{_fmt(a, ',.0f')} vs {_fmt(b, ',.0f')}",
            verdict,
        )


def print_profiles(profile_dir: Path, limit: int) -> None:
    for path in sorted(profile_dir.glob("*.prof")):
        text = io.StringIO()
        stats = pstats.Stats(str(path), stream=text)
        stats.strip_dirs().sort_stats("tottime").print_stats(limit)
        stats.sort_stats("cumulative").print_stats(limit)
        report = path.with_suffix(".txt")
        report.write_text(text.getvalue())
        log(f"profile of {path.stem}: {report}")


# --------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--sizes", type=_int_list, default=[10, 100, 1000], help="group sizes, comma-separated"
    )
    parser.add_argument(
        "--backends",
        type=_backend_list,
        default=list(BACKENDS),
        help="back-ends to run, comma-separated: embedded,tansu",
    )
    parser.add_argument(
        "--join-timeout", type=float, default=60.0, help="cap of the join scenario, seconds"
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=5.0, help="duration of the heartbeat scenario"
    )
    parser.add_argument(
        "--pipeline",
        type=int,
        default=None,
        help="heartbeats in flight per connection in the heartbeat scenario "
        f"(default: enough for {AUTO_IN_FLIGHT} in total, at least {MIN_AUTO_PIPELINE})",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of every back-end and size (tables show medians); a run that hits the "
        "join cap is not repeated",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="load-generator processes (members are split between them)",
    )
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--rebalance-timeout-ms", type=int, default=30_000)
    parser.add_argument(
        "--join-heartbeat-ms",
        type=int,
        default=250,
        help="heartbeat interval of synced members during the join scenario",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=20.0,
        help="seconds to wait for a back-end to listen",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print machine-readable results on stdout instead of tables",
    )
    parser.add_argument(
        "--json-out",
        type=Path,
        default=None,
        help="also write the machine-readable results to this file",
    )
    parser.add_argument(
        "--profile-dir",
        type=Path,
        default=None,
        help="run the embedded coordinator under cProfile; write .prof/.txt here",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="keep back-end logs here (default: a temporary directory)",
    )
    parser.add_argument(
        "--embedded-command",
        default=None,
        help="command that starts the embedded coordinator, instead of "
        "'python -m workgroup coordinator' (--listen and --initial-rebalance-delay-ms "
        "are appended); e.g. another checkout's interpreter",
    )
    parser.add_argument(
        "--py-spy-dir",
        type=Path,
        default=None,
        help="sample the embedded coordinator with py-spy during each scenario; write the "
        "collapsed stacks and a top-functions summary here",
    )
    parser.add_argument(
        "--py-spy",
        default=os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy",
        help="py-spy executable (env PY_SPY)",
    )
    args = parser.parse_args(argv)
    if args.py_spy_dir is not None:
        if not (Path(args.py_spy).exists() or shutil.which(args.py_spy)):
            parser.error(f"--py-spy-dir needs py-spy: {args.py_spy!r} not found (set PY_SPY)")
        args.py_spy_dir.mkdir(parents=True, exist_ok=True)
    if args.embedded_command and args.profile_dir:
        parser.error("--profile-dir profiles the default embedded command only")
    if (
        (args.pipeline is not None and args.pipeline < 1)
        or args.workers < 1
        or args.repeat < 1
        or args.heartbeat_seconds <= 0
    ):
        parser.error("--pipeline, --workers, --repeat must be >= 1, --heartbeat-seconds > 0")
    return args


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("sizes must be positive integers")
    return values


def _backend_list(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [v for v in values if v not in BACKENDS]
    if unknown or not values:
        raise argparse.ArgumentTypeError(f"unknown back-end(s) {unknown}; choose from {BACKENDS}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    raise_file_limit(max(args.sizes) + 64)
    if args.profile_dir:
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    env = environment(args)
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="workgroup-bench-") as tmp:
        log_dir = args.log_dir or Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        capped: set[tuple[str, int]] = set()
        for size in args.sizes:
            for repeat in range(args.repeat):
                for backend in [b for b in BACKENDS if b in args.backends]:
                    if (backend, size) in capped:
                        continue  # it hit the join cap: repeating it only burns minutes
                    log(f"{backend}: {size} members, run {repeat + 1}/{args.repeat} …")
                    run = run_one(backend, size, repeat, args, log_dir)
                    log(
                        f"  join: {run.join.status} {_fmt(run.join.seconds, '.3f', ' s')}; "
                        f"heartbeats: {_fmt(run.heartbeat.per_second, ',.0f', '/s')}"
                    )
                    results.append(run)
                    if run.join.status == "not stable":
                        capped.add((backend, size))
    if args.profile_dir:
        print_profiles(args.profile_dir, 40)
    document = {
        "environment": env,
        "summary": [s.as_dict() for s in summarize(results).values()],
        "results": [dataclasses.asdict(r) for r in results],
    }
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    if args.json:
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        render(results, env, args)
    failed = any(r.error for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        sys.exit(main())
