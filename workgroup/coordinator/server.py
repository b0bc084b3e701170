"""The asyncio driver of the embedded coordinator: sockets, a timer and the store.

The group logic lives in the sans-I/O core (``GroupCoordinator``); this module
only moves bytes and time to it and carries out the actions it returns.

Rules:

* One ``asyncio.Protocol`` per connection, no task: every complete frame of
  a received chunk is handled at once.  Each request gets a reply slot in
  arrival order; a slot is filled when its answer is ready (JoinGroup and
  SyncGroup answers may come much later, from another member's request or the
  timer) and filled slots are written strictly in request order, as Kafka
  guarantees per connection.  Answers are written once per loop iteration,
  one write per connection, after that iteration's reads.  A connection with
  too many unanswered requests, or whose peer does not read its responses (the
  transport's write buffer is above its high-water mark), is not read from
  until that drains.
* ``now_ms`` is the server's :class:`~workgroup.clock.Clock` (``clock=``, the
  system's by default; the connections' idle and rate limits read it too),
  and deadlines are waited out on the loop's timer.  One timer calls ``expire``.  It is
  re-armed only when the earliest deadline may have moved *earlier* than the
  armed one (the core's cheap lower bound says so); a deadline pushed later
  (every heartbeat) leaves it alone, and a timer that fires early finds
  nothing due and is re-armed at the exact next deadline.
* A ``Persist`` action is committed to the store before any reply produced
  after it is sent.  Actions queue behind an unfinished write, so persisted
  state is never acknowledged early; writes run in one worker thread so the
  loop keeps serving, and everything queued while a write runs is written in
  the next transaction.  A store failure stops the coordinator (nothing is
  acknowledged that is not on disk).
* Bad input affects only its own connection: a negative or oversized frame
  size, an undecodable header, an unknown API key or a body that does not parse
  close that connection (as Kafka does) and are logged as
  ``coordinator.bad_frame`` / ``coordinator.bad_request`` /
  ``coordinator.unknown_api``; an unsupported version gets UNSUPPORTED_VERSION.
  A frame size is checked against ``max_request_bytes`` before anything is
  allocated for it.
* With SASL (``sasl=``), a connection that has not authenticated may only send
  ApiVersions, SaslHandshake and SaslAuthenticate; anything else closes it
  before its body is read (sasl.py has the exchange's rules).  A failed
  authentication is answered after ``failed_authentication_delay_ms``, during
  which the connection is not read, then closed.
* With an ACL (``acl=``), each group request is authorized for the
  connection's principal before the core sees it (authorize.py); a denied
  one is answered GROUP_AUTHORIZATION_FAILED and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.coordinator import broker, wire
from workgroup.coordinator.acl import ANONYMOUS, GroupAcl
from workgroup.coordinator.actions import (
    Action,
    Persist,
    Reply,
    ReplyToken,
    StoredGroup,
    StoredOffset,
)
from workgroup.coordinator.authorize import Allowed, authorize
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.framing import FrameSplitter
from workgroup.coordinator.sasl import Authenticator, SaslSettings
from workgroup.coordinator.store import Store
from workgroup.coordinator.tls import TlsSettings
from workgroup.errors import ErrorCode, ProtocolError, StoreError, UnsupportedVersionError
from workgroup.kafka import apis
from workgroup.kafka.messages import GroupRequest, GroupResult
from workgroup.log import get_logger

log = get_logger(__name__)

#: Unanswered requests one connection may have before it is no longer read.
MAX_IN_FLIGHT_PER_CONNECTION = 256
#: Bytes of unsent responses after which a connection waits for its peer to read.
WRITE_BUFFER_HIGH_WATER = 4 * 1024 * 1024
#: How long a clean shutdown waits for written responses to reach their clients.
SHUTDOWN_DRAIN_S = 1.0

_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
#: What a connection may send before SASL authenticated it.
_BEFORE_AUTHENTICATION = frozenset({apis.API_VERSIONS, apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE})


class CoordinatorCore(Protocol):
    """What the driver needs of the sans-I/O group coordinator."""

    def handle(self, now_ms: int, token: ReplyToken, request: GroupRequest) -> list[Action]: ...

    def expire(self, now_ms: int) -> list[Action]: ...

    def next_deadline_ms(self) -> int | None: ...

    def restore(
        self, now_ms: int, groups: Iterable[StoredGroup], offsets: Iterable[StoredOffset]
    ) -> None: ...

    def unload(self, now_ms: int) -> list[Action]: ...


class _ReplySlot:
    """The place of one request's response in its connection's output order."""

    __slots__ = ("connection", "data", "header", "transform")

    def __init__(self, connection: _Connection, header: wire.RequestHeader) -> None:
        self.connection = connection
        self.header = header
        self.data: bytes | None = None
        #: Applied to the core's result before it is sent (ACL redaction).
        self.transform: Callable[[GroupResult], GroupResult] | None = None


class _Connection(asyncio.Protocol):
    """One client connection: frames in, responses out in request order.

    Every complete frame of a chunk is handled as the chunk arrives.  Ready
    responses are not written at once: the server writes each connection's
    with one ``write`` after the loop iteration's reads (measured with 1,000
    connections and one request in flight each: sending right after each read
    cost about 1.5 times the CPU per request; see benchmarks/README.md).
    """

    def __init__(self, server: CoordinatorServer) -> None:
        self._server = server
        self._splitter = FrameSplitter(server.config.max_request_bytes)
        #: Payloads received but not handled yet (only while back-pressure holds).
        self._ready: deque[bytes] = deque()
        self.pending: deque[_ReplySlot] = deque()
        self.closed = False
        self.peer = ""
        self.client_host = ""
        self.local_host = ""
        self._transport: asyncio.Transport | None = None
        # Responses ready to send, in order, not yet handed to the transport.
        self._out: list[bytes] = []
        self._flush_queued = False
        self._reading_paused = False
        self._writing_paused = False
        self._resume_scheduled = False
        self._loop = asyncio.get_running_loop()
        self._clock = server.clock
        self.lost: asyncio.Future[None] = self._loop.create_future()
        self._last_active = self._clock.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        # Request-rate limit (token bucket), when configured.
        rate = server.config.max_requests_per_second
        self._rate = rate
        self._tokens = max(rate, 1.0)
        self._tokens_at = self._last_active
        self._rate_timer: asyncio.TimerHandle | None = None
        #: SASL state (``None``: no SASL on this listener).
        self.auth = Authenticator(server.sasl) if server.sasl is not None else None
        #: Whom this connection speaks for (Kafka's form; ANONYMOUS without SASL).
        self.principal = ANONYMOUS
        #: Set while a failed authentication's answer is delayed: nothing is read.
        self.muted = False

    # --- asyncio.Protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # Shown by DescribeGroups; Kafka prints the peer's InetAddress ("/10.0.0.7").
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        self.local_host = local[0] if isinstance(local, tuple) else ""
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_WATER)
        server = self._server
        if len(server._connections) >= server.config.max_connections:
            server.refused_connections += 1
            log.warning(
                "coordinator.connection_refused",
                peer=self.peer,
                reason=f"max connections ({server.config.max_connections}) reached",
            )
            self.closed = True
            transport.abort()
            return
        server._connections.add(self)
        self._arm_idle_timer(server.config.connections_max_idle_ms / 1000)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._last_active = self._clock.monotonic()
        frames = self._splitter.feed(data)
        if frames:
            self._ready.extend(frames)
        self._handle_ready()

    def eof_received(self) -> bool | None:
        self.close()
        return None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._schedule_resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for timer in (self._idle_timer, self._rate_timer):
            if timer is not None:
                timer.cancel()
        self.pending.clear()
        self._ready.clear()
        self._out.clear()
        self._server._connections.discard(self)
        if not self.lost.done():
            self.lost.set_result(None)

    # --- requests --------------------------------------------------------------------

    def _handle_ready(self) -> None:
        """Handle received frames until none is left or back-pressure says stop."""
        ready = self._ready
        pending = self.pending
        on_request = self._server._on_request
        while ready:
            if len(pending) >= MAX_IN_FLIGHT_PER_CONNECTION or self._writing_paused or self.muted:
                break
            if self._rate and not self._take_token():
                break
            if not on_request(self, ready.popleft()):
                self.close()
                return
        if self.closed:
            return
        if not ready and self._splitter.error is not None:
            log.warning("coordinator.bad_frame", peer=self.peer, error=str(self._splitter.error))
            self.close()
        elif (
            len(pending) >= MAX_IN_FLIGHT_PER_CONNECTION
            or self._writing_paused
            or self._rate_timer is not None
            or self.muted
        ):
            # Too much unanswered or unsent: leave the peer's bytes in the kernel.
            if not self._reading_paused and self._transport is not None:
                self._reading_paused = True
                self._transport.pause_reading()
        elif self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()

    def _take_token(self) -> bool:
        """Spend one request of the rate limit; if none is left, resume when one is."""
        if self._rate_timer is not None:
            return False
        now = self._clock.monotonic()
        refill = (now - self._tokens_at) * self._rate
        self._tokens = min(self._tokens + refill, max(self._rate, 1.0))
        self._tokens_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        wait = (1.0 - self._tokens) / self._rate
        self._server.throttled_requests += 1
        self._rate_timer = self._loop.call_later(wait, self._rate_refilled)
        return False

    def _rate_refilled(self) -> None:
        self._rate_timer = None
        if not self.closed:
            self._handle_ready()

    def _arm_idle_timer(self, idle_s: float) -> None:
        # Measured on the server's clock, waited out on the loop's timer (as the core's deadlines).
        wait = max(self._last_active + idle_s - self._clock.monotonic(), 0.0)
        self._idle_timer = self._loop.call_later(wait, self._check_idle, idle_s)

    def _check_idle(self, idle_s: float) -> None:
        if self.closed:
            return
        if self.pending or self._ready:  # waiting on us, not idle
            self._last_active = self._clock.monotonic()
        if self._clock.monotonic() - self._last_active >= idle_s:
            log.info("coordinator.idle_connection_closed", peer=self.peer, idle_s=idle_s)
            self._server.idle_closed += 1
            self.close()
            return
        self._arm_idle_timer(idle_s)

    def _schedule_resume(self) -> None:
        if self._reading_paused and not self._resume_scheduled and not self.closed:
            # Not at once: this may run inside the core's handling of another request.
            self._resume_scheduled = True
            self._loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._resume_scheduled = False
        if not self.closed:
            self._handle_ready()

    # --- responses -------------------------------------------------------------------

    def slot(self, header: wire.RequestHeader) -> _ReplySlot:
        slot = _ReplySlot(self, header)
        self.pending.append(slot)
        return slot

    def fill(self, slot: _ReplySlot, data: bytes) -> None:
        slot.data = data
        if self.closed:
            return
        pending = self.pending
        out = self._out
        while pending and pending[0].data is not None:
            out.append(pending.popleft().data)  # type: ignore[arg-type]
        if out and not self._flush_queued:
            self._flush_queued = True
            self._server._queue_flush(self)
        if len(pending) < MAX_IN_FLIGHT_PER_CONNECTION:
            self._schedule_resume()

    def flush(self) -> None:
        """Hand every ready response to the transport in one write."""
        self._flush_queued = False
        if not self.closed:
            self._write_out()

    def _write_out(self) -> None:
        out = self._out
        if out and self._transport is not None:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    def close(self) -> None:
        """Close after writing the responses that are ready (unanswered ones are dropped)."""
        if not self.closed:
            self._write_out()
            self.closed = True
            self.pending.clear()
            self._ready.clear()
            if self._transport is not None:
                self._transport.close()  # sends what is buffered first

    def abort(self) -> None:
        """Close at once, dropping unsent bytes (a peer that does not read at shutdown)."""
        self.close()
        if self._transport is not None:
            self._transport.abort()


class _MillisecondClock:
    """A :class:`~workgroup.clock.Clock` over a milliseconds function (the
    deprecated ``clock_ms=``); it sleeps on the event loop, and its wall time is
    the system's (the function measures only monotonic time)."""

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._clock_ms = clock_ms

    def monotonic(self) -> float:
        return self._clock_ms() / 1000

    def monotonic_ms(self) -> int:
        return self._clock_ms()

    def wall(self) -> float:
        return SYSTEM_CLOCK.wall()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class CoordinatorServer:
    """The embedded coordinator listening on one TCP address.

    As an async context manager it starts, and stops when the block ends; this
    is how a test embeds a coordinator on its own event loop (port 0, the
    default, picks a free port)::

        async with CoordinatorServer(CoordinatorConfig(initial_rebalance_delay_ms=0)) as server:
            async with GroupMember(server.bootstrap, "my-group", protocols) as member:
                ...
    """

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        store: Store | None = None,
        core: CoordinatorCore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        clock_ms: Callable[[], int] | None = None,
        empty_topics: bool = True,
        tls: TlsSettings | None = None,
        sasl: SaslSettings | None = None,
        acl: GroupAcl | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        #: Who may connect (``None``: anyone who reaches the port).
        self.sasl = sasl
        #: Who may do what in which group (``None``: everyone everything).
        self.acl = acl
        #: The listener's TLS context (built now: a bad file fails before listening).
        self.ssl_context = tls.context() if tls is not None else None
        if core is None:
            from workgroup.coordinator.coordinator import GroupCoordinator

            core = GroupCoordinator(self.config)
        self.core = core
        hint = getattr(core, "next_deadline_hint_ms", None)
        #: A lower bound of the core's next deadline, cheaper than the exact one.
        self._deadline_hint: Callable[[], int | None] = (
            hint if callable(hint) else core.next_deadline_ms
        )
        self.store = store
        self._host = host
        self._port = port
        if clock_ms is not None:
            warnings.warn(
                "CoordinatorServer(clock_ms=...) is deprecated: pass clock= a "
                "workgroup.clock.Clock (its monotonic_ms() is the core's now)",
                DeprecationWarning,
                stacklevel=2,
            )
            clock = _MillisecondClock(clock_ms)
        #: What the core's ``now`` and the connections' idle and rate limits are read from.
        self.clock = clock
        #: Report requested topics as existing with no partitions (see broker.py).
        self.empty_topics = empty_topics
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        #: Connections with responses made ready outside their own reading.
        self._to_flush: list[_Connection] = []
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._armed_deadline: int | None = None
        self._outbox: list[Action] = []
        self._flusher: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stopped = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.failure: BaseException | None = None
        #: Connections closed at once for ``max_connections``.
        self.refused_connections = 0
        #: Connections closed after ``connections_max_idle_ms`` of silence.
        self.idle_closed = 0
        #: Times a connection's reading paused for ``max_requests_per_second``.
        self.throttled_requests = 0
        #: SASL authentications that succeeded / failed.
        self.authentications = 0
        self.failed_authentications = 0
        #: Group requests refused by the ACL.
        self.denied_requests = 0

    # --- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Restore stored state, then listen.  Raises ``OSError`` if the address is unusable."""
        if self.store is not None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="workgroup-store")
            groups, offsets = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.store.load
            )
            self.core.restore(self.clock.monotonic_ms(), groups, offsets)
            log.info("coordinator.restored", groups=len(groups), offsets=len(offsets))
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            self._host,
            self._port,
            reuse_address=True,
            ssl=self.ssl_context,
        )
        self._rearm_timer()
        host, port = self.address
        log.info("coordinator.listening", host=host, port=port)

    async def __aenter__(self) -> CoordinatorServer:
        try:
            await self.start()
        except BaseException:
            await self.stop()  # releases the store and its thread
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def bootstrap(self) -> str:
        """``HOST:PORT`` (``[HOST]:PORT`` for IPv6) for clients to connect to."""
        host, port = self.address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def address(self) -> tuple[str, int]:
        """The host as configured and the port actually bound."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the coordinator is not listening")
        port = self._server.sockets[0].getsockname()[1]
        return self._host, int(port)

    async def wait_stopped(self) -> None:
        """Wait until :meth:`stop` ran; raise the failure that stopped it, if any."""
        await self._stopped.wait()
        if self.failure is not None:
            raise self.failure

    async def stop(self) -> None:
        """Stop cleanly: stop listening, answer parked requests, flush the store, close.

        Parked JoinGroup/SyncGroup requests are answered NOT_COORDINATOR (the
        core unloads its groups), so members rediscover the coordinator instead
        of waiting for their request timeout.
        """
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        if self._server is not None:
            self._server.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.failure is None and self._server is not None:
            try:
                self._carry_out(self.core.unload(self.clock.monotonic_ms()))
            except Exception:
                log.exception("coordinator.unload_failed")
        if self._flusher is not None and self._flusher is not asyncio.current_task():
            with contextlib.suppress(Exception):
                await self._flusher
        await self._close_connections()
        if self._server is not None:
            await self._server.wait_closed()
        if self.store is not None:
            try:
                self.store.close()
            except StoreError as exc:
                log.error("coordinator.store_close_failed", error=str(exc))
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._stopped.set()
        log.info("coordinator.stopped")

    async def _close_connections(self) -> None:
        """Close every connection after its written responses left; abort laggards."""
        connections = list(self._connections)
        for connection in connections:
            connection.close()
        lost = [connection.lost for connection in connections]
        if not lost:
            return
        _, unfinished = await asyncio.wait(lost, timeout=SHUTDOWN_DRAIN_S)
        if unfinished:
            for connection in connections:
                if not connection.lost.done():
                    connection.abort()
            await asyncio.wait(unfinished)

    # --- connections -----------------------------------------------------------------

    def _queue_flush(self, connection: _Connection) -> None:
        """Write ``connection``'s ready responses at the end of this loop iteration."""
        self._to_flush.append(connection)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_connections)

    def _flush_connections(self) -> None:
        self._flush_scheduled = False
        connections, self._to_flush = self._to_flush, []
        for connection in connections:
            connection.flush()

    def _on_request(self, connection: _Connection, payload: bytes) -> bool:
        """Handle one request frame; ``False`` closes the connection."""
        try:
            header, offset = wire.decode_header(payload)
        except ProtocolError as exc:
            log.warning("coordinator.bad_request", peer=connection.peer, error=str(exc))
            return False
        auth = connection.auth
        if (
            auth is not None
            and not auth.authenticated
            and header.api_key not in _BEFORE_AUTHENTICATION
        ):
            # Kafka's IllegalSaslState: the body of an unauthenticated peer is not read.
            log.warning(
                "coordinator.unauthenticated_request",
                peer=connection.peer,
                api_key=header.api_key,
                state=auth.state.value,
            )
            return False
        try:
            request = wire.decode_request(header, payload, offset, connection.client_host)
        except wire.UnknownApiKeyError:
            log.warning(
                "coordinator.unknown_api",
                peer=connection.peer,
                api_key=header.api_key,
                api_version=header.api_version,
                client_id=header.client_id,
            )
            return False
        except UnsupportedVersionError as exc:
            answer = wire.unsupported_version_response(header, wire.request_of(exc))
            log.info(
                "coordinator.unsupported_version",
                peer=connection.peer,
                api_key=header.api_key,
                api_version=header.api_version,
                client_id=header.client_id,
                answered=answer is not None,
            )
            if answer is None:
                return False
            connection.fill(connection.slot(header), answer)
            return True
        except ProtocolError as exc:
            log.warning(
                "coordinator.bad_request",
                peer=connection.peer,
                api_key=header.api_key,
                api_version=header.api_version,
                correlation_id=header.correlation_id,
                client_id=header.client_id,
                error=str(exc),
            )
            return False

        slot = connection.slot(header)
        if isinstance(request, broker.ApiVersions | broker.Metadata | broker.FindCoordinator):
            return self._send(slot, self._answer_broker_request(connection, request))
        if isinstance(request, broker.SaslHandshake | broker.SaslAuthenticate):
            return self._answer_sasl(connection, slot, request)
        if self.acl is not None:
            decision = authorize(self.acl, connection.principal, request)
            if not isinstance(decision, Allowed):
                self.denied_requests += 1
                log.info(
                    "coordinator.request_denied",
                    peer=connection.peer,
                    principal=connection.principal,
                    api_key=header.api_key,
                    groups=decision.groups,
                )
                return self._send(slot, decision.result)
            request = decision.request
            slot.transform = decision.transform
        try:
            actions = self.core.handle(self.clock.monotonic_ms(), slot, request)
        except Exception:
            log.exception("coordinator.handle_failed", peer=connection.peer, request=request)
            return False
        self._carry_out(actions)
        self._rearm_timer()
        return True

    def _answer_broker_request(
        self,
        connection: _Connection,
        request: broker.ApiVersions | broker.Metadata | broker.FindCoordinator,
    ) -> wire.Result:
        host, port = self.config.advertised() or self.address
        if host in _WILDCARD_HOSTS:
            host = connection.local_host  # the address this client reached us at
        me = broker.BrokerAddress(self.config.node_id, host, port)
        match request:
            case broker.ApiVersions():
                # Kafka answers a v3+ request with a malformed client software name
                # INVALID_REQUEST in the request's version, which some clients
                # (kafka-python) read as v0: the name is only informational, so
                # every request gets the versions.
                return broker.ApiVersionsResult(ErrorCode.NONE, wire.ADVERTISED_VERSIONS)
            case broker.Metadata():
                return broker.answer_metadata(request, me, empty_topics=self.empty_topics)
            case broker.FindCoordinator():
                return broker.answer_find_coordinator(request, me)

    def _answer_sasl(
        self,
        connection: _Connection,
        slot: _ReplySlot,
        request: broker.SaslHandshake | broker.SaslAuthenticate,
    ) -> bool:
        auth = connection.auth
        if auth is None:
            # A listener without SASL (Kafka answers so on a PLAINTEXT listener).
            return self._send(slot, wire.error_result(request, ErrorCode.ILLEGAL_SASL_STATE))
        if isinstance(request, broker.SaslHandshake):
            handshake = auth.handshake(request.mechanism)
            if handshake.error is not ErrorCode.NONE:
                log.warning(
                    "coordinator.sasl_handshake_refused",
                    peer=connection.peer,
                    mechanism=request.mechanism,
                    error=handshake.error.name,
                )
            answered = broker.SaslHandshakeResult(handshake.error, handshake.mechanisms)
            sent = self._send(slot, answered)
            if handshake.close:
                connection.close()
                return True
            return sent
        answer = auth.authenticate(request.auth_bytes)
        result = broker.SaslAuthenticateResult(answer.error, answer.message, answer.token)
        if answer.error is ErrorCode.NONE:
            if auth.authenticated:
                assert auth.principal is not None
                connection.principal = auth.principal
                self.authentications += 1
                log.info(
                    "coordinator.authenticated",
                    peer=connection.peer,
                    principal=auth.principal,
                    mechanism=auth.mechanism,
                )
            return self._send(slot, result)
        self.failed_authentications += 1
        log.warning(
            "coordinator.authentication_failed",
            peer=connection.peer,
            mechanism=auth.mechanism,
            reason=answer.reason,
        )
        # Kafka's connection.failed.authentication.delay.ms: a guesser waits for
        # each answer, and nothing the peer sends meanwhile is read.
        connection.muted = True
        assert self.sasl is not None
        delay_s = self.sasl.failed_authentication_delay_ms / 1000

        def answer_and_close() -> None:
            self._send(slot, result)
            connection.close()

        asyncio.get_running_loop().call_later(delay_s, answer_and_close)
        return True

    def _send(self, slot: _ReplySlot, result: wire.Result) -> bool:
        connection = slot.connection
        if connection.closed:
            return False
        try:
            data = wire.encode_response(slot.header, result)
        except Exception:
            log.exception(
                "coordinator.encode_failed",
                peer=connection.peer,
                api_key=slot.header.api_key,
                api_version=slot.header.api_version,
            )
            connection.close()
            return False
        connection.fill(slot, data)
        return True

    # --- actions -----------------------------------------------------------------

    def _carry_out(self, actions: Sequence[Action]) -> None:
        if not actions:
            return
        if self.store is None:
            for action in actions:
                if isinstance(action, Reply):
                    self._reply(action)
            return
        if (
            self._flusher is None
            and not self._outbox
            and not any(isinstance(a, Persist) for a in actions)
        ):
            for action in actions:
                if isinstance(action, Reply):
                    self._reply(action)
            return
        self._outbox.extend(actions)
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    def _reply(self, action: Reply) -> None:
        slot = action.token
        if not isinstance(slot, _ReplySlot):
            raise TypeError(f"reply token {slot!r} was not issued by this server")
        result = action.result
        if slot.transform is not None:
            result = slot.transform(result)
        self._send(slot, result)

    async def _flush(self) -> None:
        """Write queued Persist actions, then send the replies queued with them."""
        assert self.store is not None
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        try:
            while self._outbox:
                batch, self._outbox = self._outbox, []
                groups: list[StoredGroup] = []
                offsets: list[StoredOffset] = []
                for action in batch:
                    if isinstance(action, Persist):
                        groups.extend(action.groups)
                        offsets.extend(action.offsets)
                if groups or offsets:
                    try:
                        await loop.run_in_executor(
                            self._executor, self.store.write, groups, offsets
                        )
                    except StoreError as exc:
                        log.critical("coordinator.store_failed", error=str(exc))
                        self.failure = exc
                        self._outbox.clear()
                        self._stop_task = loop.create_task(self.stop())
                        return
                for action in batch:
                    if isinstance(action, Reply):
                        self._reply(action)
        finally:
            self._flusher = None

    # --- time --------------------------------------------------------------------

    def _rearm_timer(self) -> None:
        if self._timer is not None:
            # Hot path (every request): the armed timer fires no later than any
            # deadline unless one may have been brought before it.
            hint = self._deadline_hint()
            armed = self._armed_deadline
            if hint is None or (armed is not None and hint >= armed):
                return
        deadline = self.core.next_deadline_ms()
        if deadline == self._armed_deadline and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_deadline = deadline
        if deadline is not None and not self._stopping:
            # One millisecond late rather than early: the core expires at >= deadline.
            delay = max(0, deadline - self.clock.monotonic_ms() + 1) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._armed_deadline = None
        try:
            actions = self.core.expire(self.clock.monotonic_ms())
        except Exception:
            log.exception("coordinator.expire_failed")
            # Retry later rather than spin on a deadline that keeps failing.
            self._armed_deadline = self.core.next_deadline_ms()
            self._timer = asyncio.get_running_loop().call_later(1.0, self._on_timer)
            return
        self._carry_out(actions)
        self._rearm_timer()
