"""A fault-injecting TCP proxy for Kafka-protocol connections, for tests on loopback.

Put it between members and their coordinator (the embedded one, Tansu, or a
Kafka broker) and break the network on purpose::

    async with FaultProxy("127.0.0.1:9092") as proxy:      # listens on 127.0.0.1:<free>
        member = GroupMember(bootstrap=proxy.bootstrap, ...)
        proxy.delay(200, jitter_ms=50)                     # every chunk, each way
        proxy.partition("worker-2")                        # black-hole one member only
        proxy.heal()

Clients learn the coordinator's address from FindCoordinator and Metadata, so
the coordinator must *advertise* the proxy's address: ``workgroup coordinator
--advertised-listener`` (Tansu: ``--advertised-listener-url``; Kafka:
``advertised.listeners``).  Start the proxy first on a fixed port with
``listen_port=`` or the server first with ``upstream`` known.

Faults:

* ``delay(ms, jitter_ms)``: hold each chunk before forwarding it;
* ``throttle(bytes_per_s)``: pace each connection's bytes, each way;
* ``drop(probability)``: drop whole request frames (the client's request
  times out, as a lost packet that TCP could not recover would look to it);
* ``blackhole()`` / ``partition(client_id, ...)``: forward nothing and close
  nothing, for every connection or only those whose requests carry a matching
  Kafka client id (one side of the group cut off while the rest still reach the
  coordinator);
* ``unpartition(client_id, ...)``: end those clients' partition only;
* ``cut()``: close every connection now (clients reconnect);
* ``heal()``: remove every fault (held bytes are forwarded again).

:meth:`FaultProxy.run_schedule` applies faults at given times; :func:`random_schedule`
makes a seeded one, so that a failing run can be replayed from its seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType

from workgroup.log import get_logger

log = get_logger(__name__)

LOOPBACK = "127.0.0.1"
CHUNK = 65536
#: A request frame larger than this is not parsed for its client id (still forwarded).
MAX_PARSED_FRAME = 100 * 1024 * 1024


#: ``(seconds from the schedule's start, what to do to the proxy)``.
ScheduledFault = tuple[float, "Callable[[FaultProxy], object]"]


@dataclass
class Faults:
    """The faults in force; read by every connection for every chunk."""

    delay_s: float = 0.0
    jitter_s: float = 0.0
    bytes_per_s: float | None = None
    drop_probability: float = 0.0
    blackhole_all: bool = False
    partitioned: set[str] = field(default_factory=set)

    def blocks(self, client_id: str | None) -> bool:
        if self.blackhole_all:
            return True
        return client_id is not None and any(p in client_id for p in self.partitioned)


@dataclass
class ProxyStats:
    connections: int = 0
    frames: int = 0
    frames_dropped: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    cuts: int = 0


def request_client_id(frame: bytes) -> str | None:
    """The client id of a Kafka request frame (without its size prefix), if it has one.

    Request header v1+: api_key int16, api_version int16, correlation_id int32,
    client_id nullable string (int16 length, -1 for null)."""
    if len(frame) < 10:
        return None
    (length,) = struct.unpack_from(">h", frame, 8)
    if length < 0 or 10 + length > len(frame):
        return None
    return frame[10 : 10 + length].decode("utf-8", "replace")


class _Link:
    """One client connection and its upstream connection."""

    def __init__(
        self,
        proxy: FaultProxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.client_reader, self.client_writer = client
        self.upstream_reader, self.upstream_writer = upstream
        self.client_id: str | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._requests(), name="proxy-up"),
            asyncio.create_task(self._responses(), name="proxy-down"),
        ]

    async def _hold_while_blocked(self) -> None:
        while self.proxy.faults.blocks(self.client_id):
            changed = self.proxy.faults_changed
            changed.clear()
            await changed.wait()

    async def _pace(self, size: int) -> None:
        faults = self.proxy.faults
        wait = faults.delay_s
        if faults.jitter_s:
            wait += self.proxy.random.uniform(0, faults.jitter_s)
        if faults.bytes_per_s:
            wait += size / faults.bytes_per_s
        if wait > 0:
            await asyncio.sleep(wait)

    async def _requests(self) -> None:
        """Client to upstream, frame by frame (to read client ids and drop frames)."""
        stats = self.proxy.stats
        try:
            while True:
                header = await self.client_reader.readexactly(4)
                (size,) = struct.unpack(">i", header)
                if size < 0:
                    break  # not Kafka: close, as a broker would
                body = await self.client_reader.readexactly(size)
                if self.client_id is None and size <= MAX_PARSED_FRAME:
                    self.client_id = request_client_id(body)
                stats.frames += 1
                await self._hold_while_blocked()
                await self._pace(size + 4)
                if self.proxy.random.random() < self.proxy.faults.drop_probability:
                    stats.frames_dropped += 1
                    continue
                self.upstream_writer.write(header + body)
                await self.upstream_writer.drain()
                stats.bytes_up += size + 4
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.close()

    async def _responses(self) -> None:
        stats = self.proxy.stats
        try:
            while True:
                chunk = await self.upstream_reader.read(CHUNK)
                if not chunk:
                    break
                await self._hold_while_blocked()
                await self._pace(len(chunk))
                self.client_writer.write(chunk)
                await self.client_writer.drain()
                stats.bytes_down += len(chunk)
        except (ConnectionError, OSError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        for writer in (self.client_writer, self.upstream_writer):
            with contextlib.suppress(Exception):
                writer.close()
        self.proxy.links.discard(self)

    async def wait_closed(self) -> None:
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        await asyncio.gather(*(t for t in self.tasks if t is not current), return_exceptions=True)


class FaultProxy:
    """Forwards TCP connections from ``127.0.0.1:listen_port`` to ``upstream``, with faults."""

    def __init__(self, upstream: str, *, listen_port: int = 0, seed: int | None = None) -> None:
        host, _, port = upstream.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"upstream must be HOST:PORT, got {upstream!r}")
        self.upstream = (host, int(port))
        self.listen_port = listen_port
        self.faults = Faults()
        self.stats = ProxyStats()
        self.seed = seed if seed is not None else random.randrange(2**32)
        self.random = random.Random(self.seed)
        self.links: set[_Link] = set()
        #: Set whenever the faults change (held connections look again).
        self.faults_changed = asyncio.Event()
        self._server: asyncio.Server | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, self.listen_port)
        log.info("proxy.started", listen=self.bootstrap, upstream=self.upstream, seed=self.seed)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        links = list(self.links)
        for link in links:
            link.close()
        await asyncio.gather(*(link.wait_closed() for link in links), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        try:
            upstream = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()  # the coordinator is down: the client sees a refused-like close
            return
        link = _Link(self, (reader, writer), upstream)
        self.links.add(link)
        link.start()

    # --- faults ----------------------------------------------------------------------

    def delay(self, ms: float, *, jitter_ms: float = 0.0) -> None:
        self.faults.delay_s, self.faults.jitter_s = ms / 1000, jitter_ms / 1000
        self.faults_changed.set()
        log.info("proxy.delay", ms=ms, jitter_ms=jitter_ms)

    def throttle(self, bytes_per_s: float | None) -> None:
        self.faults.bytes_per_s = bytes_per_s
        self.faults_changed.set()
        log.info("proxy.throttle", bytes_per_s=bytes_per_s)

    def drop(self, probability: float) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {probability}")
        self.faults.drop_probability = probability
        self.faults_changed.set()
        log.info("proxy.drop", probability=probability)

    def blackhole(self) -> None:
        self.faults.blackhole_all = True
        self.faults_changed.set()
        log.info("proxy.blackhole")

    def partition(self, *client_ids: str) -> None:
        """Black-hole the connections whose Kafka client id contains one of ``client_ids``."""
        self.faults.partitioned.update(client_ids)
        self.faults_changed.set()
        log.info("proxy.partition", client_ids=sorted(self.faults.partitioned))

    def unpartition(self, *client_ids: str) -> None:
        """Let the connections of ``client_ids`` through again (held bytes flow)."""
        self.faults.partitioned.difference_update(client_ids)
        self.faults_changed.set()
        log.info("proxy.unpartition", client_ids=sorted(client_ids))

    def cut(self) -> int:
        """Close every connection now; returns how many."""
        links = list(self.links)
        for link in links:
            link.close()
        self.stats.cuts += len(links)
        log.info("proxy.cut", connections=len(links))
        return len(links)

    def heal(self) -> None:
        self.faults = Faults()
        self.faults_changed.set()
        log.info("proxy.heal")

    async def run_schedule(self, schedule: Sequence[ScheduledFault]) -> None:
        """Apply ``(at_s, action)`` pairs at their times (seconds from now)."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        for at_s, action in sorted(schedule, key=lambda item: item[0]):
            await asyncio.sleep(max(began + at_s - loop.time(), 0.0))
            result = action(self)
            if isinstance(result, Awaitable):
                await result


def _partitioning(client_id: str) -> Callable[[FaultProxy], object]:
    def apply(proxy: FaultProxy) -> None:
        proxy.partition(client_id)

    return apply


#: Fault kinds of :func:`random_schedule`.
FAULT_KINDS = ("delay", "drop", "cut", "blackhole", "partition")


def random_schedule(
    seed: int,
    *,
    duration_s: float,
    every_s: float = 2.0,
    fault_s: float = 1.0,
    kinds: Sequence[str] = FAULT_KINDS,
    client_ids: Sequence[str] = (),
) -> list[ScheduledFault]:
    """A seeded schedule: a fault every ``every_s`` (on average), healed ``fault_s`` later."""
    chooser = random.Random(seed)
    schedule: list[ScheduledFault] = []
    at = chooser.uniform(0, every_s)
    while at < duration_s:
        kind = chooser.choice([k for k in kinds if k != "partition" or client_ids])
        if kind == "delay":
            ms = chooser.uniform(10, 500)
            schedule.append((at, partial(FaultProxy.delay, ms=ms, jitter_ms=ms / 4)))
        elif kind == "drop":
            probability = chooser.uniform(0.05, 0.5)
            schedule.append((at, partial(FaultProxy.drop, probability=probability)))
        elif kind == "cut":
            schedule.append((at, lambda p: p.cut()))
        elif kind == "blackhole":
            schedule.append((at, lambda p: p.blackhole()))
        else:
            victim = chooser.choice(list(client_ids))
            schedule.append((at, _partitioning(victim)))
        schedule.append((at + fault_s, lambda p: p.heal()))
        at += chooser.uniform(every_s / 2, every_s * 1.5)
    return schedule


__all__ = [
    "FAULT_KINDS",
    "FaultProxy",
    "Faults",
    "ProxyStats",
    "ScheduledFault",
    "random_schedule",
    "request_client_id",
]
