"""The asyncio driver of a group member, on aiokafka's client.

All decisions are the state machine's (``state.py``); this module only carries
out its actions: it finds the coordinator and sends requests over one aiokafka
connection (:class:`CoordinatorConnection`; ApiVersions negotiation), runs
callbacks one at a time (coroutine functions in the event loop, plain functions
in a worker thread, so heartbeats keep flowing while a long revocation runs),
runs the leader's assignor in a worker thread, polls the resource source and
wakes the machine at its deadlines.  aiokafka's exceptions are mapped to
:class:`~workgroup.errors.WorkgroupError` here.

Example::

    async with GroupMember("localhost:9092", "indexers", [Protocol("sticky", assignor)],
                           resources={"shard": range(12)}, on_assigned=start) as member:
        async with asyncio.timeout(30):
            await member.wait_stable()
        await member.wait_closed()  # raises the member's fatal error, if it fails
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
import itertools
import re
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

from aiokafka import errors as aiokafka_errors
from aiokafka.client import CoordinationType
from aiokafka.conn import AIOKafkaConnection, CloseReason, create_conn
from aiokafka.errors import (
    CoordinatorNotAvailableError,
    IncompatibleBrokerVersion,
    KafkaConnectionError,
    KafkaError,
    NoError,
    NotCoordinatorError,
    for_code,
)
from aiokafka.protocol.coordination import FindCoordinatorRequest

from workgroup.assignors.balance import DEFAULT_MAX_MOVES, DEFAULT_TOLERANCE
from workgroup.assignors.base import Assignment
from workgroup.clock import monotonic_ms
from workgroup.errors import (
    AuthenticationError,
    ConfigError,
    ProtocolError,
    UnsupportedVersionError,
    WorkgroupError,
)
from workgroup.kafka.messages import (
    CommitTopic,
    FetchedGroup,
    FetchTopic,
    GroupResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.log import describe_error, get_logger, user_frames
from workgroup.member.actions import (
    Action,
    Closed,
    Failed,
    FindCoordinator,
    InvokeCallback,
    RunAssignor,
    SendRequest,
)
from workgroup.member.balancing import DEFAULT_BALANCE_INTERVAL_MS, BalanceSettings, check_load
from workgroup.member.config import MemberConfig
from workgroup.member.errors import (
    CallbackError,
    CoordinatorUnavailableError,
    InconsistentProtocolError,
    MemberClosedError,
)
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.member.wire import (
    DescribeGroupRequest,
    KioRequest,
    describe_group_summary,
    to_result,
)
from workgroup.protocol.catalog import Catalog
from workgroup.protocol.protocol import Protocol
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Resource

log = get_logger(__name__)

#: ``callback(resources, generation)``: a coroutine function (run in the event
#: loop) or a plain function (run in a worker thread).
Callback = Callable[[tuple[Resource, ...], int], Awaitable[None] | None]
#: What a callback that raises does to the member (see :class:`GroupMember`).
CallbackErrorPolicy = Literal["log", "release", "fail"]
#: A fixed catalog, or a (possibly async) function returning the current one.
ResourceSource = Catalog | Callable[[], Catalog | Awaitable[Catalog]]

_ids = itertools.count(1)
#: How long closing a connection waits for its socket to close.
CLOSE_SOCKET_TIMEOUT_S = 1.0
#: How long the DescribeGroups that explains an INCONSISTENT_GROUP_PROTOCOL may take.
DESCRIBE_TIMEOUT_S = 5.0

_PORT = re.compile(r"[0-9]{1,5}")
_HOST_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (or a sequence of them) as ``(host, port)`` pairs.

    An IPv6 address goes in brackets (``[::1]:9092``).  Anything else — an empty
    list or entry, a missing host or port, a port outside 1..65535, a host that
    cannot be a host name — is a :class:`ConfigError`: such an address can never
    work, unlike a host that does not resolve (yet) or refuses connections.
    """
    text = bootstrap if isinstance(bootstrap, str) else ",".join(bootstrap)
    if not text.strip():
        raise ConfigError("no bootstrap servers given (expected HOST:PORT[,HOST:PORT...])")
    return [_parse_address(entry.strip(), text) for entry in text.split(",")]


def _parse_address(entry: str, text: str) -> tuple[str, int]:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"bad bootstrap address {entry!r} in {text!r}: {why}")

    if not entry:
        raise bad("empty entry (expected HOST:PORT)")
    if entry.startswith("["):
        address, sep, port_text = entry[1:].partition("]:")
        if not sep:
            raise bad("expected [IPV6]:PORT")
        try:
            host = str(ipaddress.IPv6Address(address))
        except ValueError as exc:
            raise bad(f"not an IPv6 address: {exc}") from None
    else:
        host, sep, port_text = entry.rpartition(":")
        if not sep:
            raise bad("no port (expected HOST:PORT)")
        if not host:
            raise bad("no host (expected HOST:PORT)")
        if ":" in host:
            raise bad("too many ':' (an IPv6 address goes in brackets: [::1]:9092)")
        if len(host) > 253 or not all(_HOST_LABEL.fullmatch(p) for p in host.split(".")):
            raise bad(f"{host!r} is not a host name or IPv4 address")
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise bad(f"port {port_text!r} is not a number in 1..65535")
    return host, int(port_text)


#: aiokafka's ways of saying the credentials were refused.
_AUTHENTICATION_ERRORS = (
    aiokafka_errors.SaslAuthenticationFailed,
    aiokafka_errors.AuthenticationFailedError,
    aiokafka_errors.AuthenticationMethodNotSupported,
    aiokafka_errors.UnsupportedSaslMechanismError,
    aiokafka_errors.IllegalSaslStateError,
)


def map_kafka_error(exc: BaseException, what: str) -> WorkgroupError:
    """aiokafka / asyncio exceptions at this boundary, as WorkgroupError."""
    if isinstance(exc, WorkgroupError):
        return exc
    if isinstance(exc, IncompatibleBrokerVersion):
        return UnsupportedVersionError(f"{what}: {exc}")
    if isinstance(exc, _AUTHENTICATION_ERRORS):
        return AuthenticationError(f"{what}: authentication failed: {exc}")
    if isinstance(exc, TimeoutError):
        return CoordinatorUnavailableError(f"{what}: timed out")
    if isinstance(exc, NotCoordinatorError | CoordinatorNotAvailableError):
        return CoordinatorUnavailableError(f"{what}: {type(exc).__name__}")
    if isinstance(exc, KafkaError | OSError):
        # Disconnects, unknown nodes, timeouts: the coordinator must be found again.
        return CoordinatorUnavailableError(f"{what}: {exc}")
    return WorkgroupError(f"{what}: unexpected {type(exc).__name__}: {exc}")


class CoordinatorConnection:
    """The member's one broker connection: FindCoordinator, then the group requests.

    aiokafka's client spends three connections on a lookup (bootstrap metadata, a
    broker for FindCoordinator, the coordinator itself), each opened with its own
    ApiVersions round trip, and a full metadata request.  A member talks to nothing
    but its coordinator, so FindCoordinator goes straight to a bootstrap broker (or
    to the broker already connected), and when the coordinator is that broker — a
    single broker, the embedded coordinator — the same connection carries the group
    requests.  Otherwise it is replaced by a connection to the coordinator.

    A request that times out gives its connection up (Kafka's client does the
    same): a connection that silently lost a request, or its answer, would
    otherwise be reused until the operating system noticed, and answers on one
    connection come in order.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        client_id: str,
        request_timeout_ms: int,
        security: Security = PLAINTEXT,
    ) -> None:
        self._hosts = parse_bootstrap(bootstrap)
        self._options = security.client_options()
        self._next_host = 0
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._conn: AIOKafkaConnection | None = None
        #: A second connection to the coordinator, for heartbeats beside a held
        #: JoinGroup/SyncGroup (opened when first needed, closed with ``_conn``).
        self._beside: AIOKafkaConnection | None = None
        #: Node id of the coordinator that ``_conn`` leads to; ``None`` during a lookup.
        self.coordinator: int | None = None

    async def find(self, group_id: str, timeout_s: float | None = None) -> int:
        """Ask a broker for the group's coordinator and connect to it; its node id."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._find(group_id)
        except TimeoutError:
            self._drop()
            raise

    async def _find(self, group_id: str) -> int:
        self.coordinator = None
        self._close_beside()
        conn = self._conn if self._conn is not None and self._conn.connected() else None
        if conn is None:
            self._drop()
            conn = await self._connect_bootstrap()
        response = await conn.send(FindCoordinatorRequest(group_id, CoordinationType.GROUP))
        error = for_code(response.error_code)
        if error is not NoError:
            raise error()
        node, host, port = int(response.coordinator_id), str(response.host), int(response.port)
        if (host, port) != (conn.host, conn.port):
            coordinator = await self._connect(host, port)
            if self._conn is not None:
                self._conn.close(reason=CloseReason.SHUTDOWN)
            self._conn = coordinator
        self.coordinator = node
        return node

    async def send(
        self, request: Any, timeout_s: float | None = None, *, give_up_on_timeout: bool = True
    ) -> Any:
        """Send ``request`` to the coordinator; ``give_up_on_timeout=False`` keeps the
        connection when it times out (a request that may wait behind a held one)."""
        conn = self._conn
        if self.coordinator is None or conn is None or not conn.connected():
            raise CoordinatorUnavailableError("not connected to the coordinator")
        try:
            async with asyncio.timeout(timeout_s):
                return await conn.send(request)
        except TimeoutError:
            if give_up_on_timeout and conn is self._conn:
                self._drop()
            raise

    async def send_beside(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send ``request`` to the coordinator on the second connection: the first
        is busy with a request the coordinator holds (answers come in order)."""
        conn = self._conn
        if self.coordinator is None or conn is None or not conn.connected():
            raise CoordinatorUnavailableError("not connected to the coordinator")
        beside = self._beside
        try:
            async with asyncio.timeout(timeout_s):
                if beside is None or not beside.connected():
                    self._close_beside()
                    beside = self._beside = await self._connect(conn.host, conn.port)
                return await beside.send(request)
        except TimeoutError:
            if beside is not None and beside is self._beside:
                self._close_beside()
            raise

    def _close_beside(self) -> None:
        if self._beside is not None:
            self._beside.close(reason=CloseReason.SHUTDOWN)
            self._beside = None

    async def send_to_bootstrap(self, request: Any) -> Any:
        """Send ``request`` to a bootstrap broker (requests any broker answers)."""
        conn = self._conn if self._conn is not None and self._conn.connected() else None
        if conn is None:
            self._drop()
            conn = await self._connect_bootstrap()
        return await conn.send(request)

    async def close(self) -> None:
        """Close the connection; wait (briefly) until its socket is closed."""
        self._close_beside()
        conn, self._conn, self.coordinator = self._conn, None, None
        if conn is not None:
            closed = conn.close(reason=CloseReason.SHUTDOWN)
            # A socket closes once its unsent bytes are out: a peer that stopped
            # reading must not hold a member's close (and a revocation) forever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(closed), CLOSE_SOCKET_TIMEOUT_S)

    def _drop(self) -> None:
        self._close_beside()
        if self._conn is not None:
            self._conn.close(reason=CloseReason.CONNECTION_BROKEN)
            self._conn = None

    async def _connect_bootstrap(self) -> AIOKafkaConnection:
        """A connection to the first bootstrap broker that answers (round robin)."""
        failures: list[str] = []
        for _ in self._hosts:
            host, port = self._hosts[self._next_host]
            self._next_host = (self._next_host + 1) % len(self._hosts)
            try:
                conn = await self._connect(host, port)
            except _AUTHENTICATION_ERRORS as exc:
                # Every broker of a cluster checks the same credentials.
                raise AuthenticationError(
                    f"{host}:{port} refused the credentials: {str(exc) or type(exc).__name__}"
                ) from exc
            except (KafkaError, OSError, TimeoutError) as exc:
                failures.append(f"{host}:{port}: {str(exc) or type(exc).__name__}")
                continue
            self._conn = conn
            return conn
        raise KafkaConnectionError(f"no bootstrap server reachable ({'; '.join(failures)})")

    async def _connect(self, host: str, port: int) -> AIOKafkaConnection:
        conn: AIOKafkaConnection = await create_conn(
            host,
            port,
            client_id=self._client_id,
            request_timeout_ms=self._request_timeout_ms,
            **self._options,
        )
        return conn


class GroupMember:
    """A member of a workgroup group: joins, owns what the group assigns it, and
    tells the application through its callbacks.

    Use it as ``async with GroupMember(...) as member:`` (or call :meth:`start`
    and :meth:`close`).  Inside the ``async with`` block, a fatal error of the
    member (say FENCED_INSTANCE_ID: another process started with the same
    instance id) interrupts the block: the task that entered it is cancelled and
    the block ends with the member's fatal error instead of the cancellation (a
    :meth:`wait_stable`, :meth:`wait_for` or :meth:`wait_closed` under way in
    that task raises the error itself instead).

    Callbacks are called as ``callback(resources, generation)`` with what
    *changes*: ``on_assigned`` gets the resources added, ``on_revoked`` those
    taken away in a rebalance (another member gets them once the callback has
    returned), ``on_lost`` those lost without a revocation (session expired,
    fatal error: someone else may own them already, stop at once).  A change
    with no resources is not reported.  While a callback runs, :attr:`assignment`
    is the full set owned right after its change.  Callbacks run one at a time in
    the order of the changes; a coroutine function runs in the event loop, a
    plain function in a worker thread (``asyncio.to_thread``), so blocking work
    in it does not hold up heartbeats.

    Args:
        bootstrap: ``HOST:PORT[,HOST:PORT...]`` or a sequence of them (IPv6 as
            ``[ADDR]:PORT``): the embedded coordinator or any Kafka brokers.  A
            malformed address is a :class:`~workgroup.errors.ConfigError` here; a
            host that does not resolve or refuses connections is retried.
        group_id: The group to join.
        protocols: The protocols this member speaks, most preferred first (all
            of one protocol type); the coordinator picks one every member speaks.
        instance_id: Static membership (KIP-345): a stable id per process.  A
            static member sends no LeaveGroup when it closes, so a restart within
            the session timeout gets its resources back and moves nothing else.
            ``None``: dynamic membership.
        session_timeout_ms: How long the coordinator keeps the member without a
            heartbeat; the member reports its resources lost once it can no
            longer prove its session (``session_margin_ms`` before it can end).
        session_margin_ms: How long before its session can end on the
            coordinator the member reports its resources lost, so that its
            handlers stop before another member's start.  ``None`` (the
            default): a tenth of the session or 500 ms, whichever is larger, as
            long as two heartbeat intervals of the session remain
            (:class:`~workgroup.member.config.MemberConfig`, rule 1).
        rebalance_timeout_ms: How long a rebalance may wait for this member to
            rejoin (its revocations included).
        heartbeat_interval_ms: Time between heartbeats (below the session timeout).
        resources: The catalog ``{kind: [keys]}``, or a (sync or async) callable
            returning it, polled every ``resource_poll_interval_ms``.
        on_assigned: ``callback(resources, generation)`` for resources added.
        on_revoked: ``callback(resources, generation)`` for resources revoked.
        on_lost: ``callback(resources, generation)`` for resources lost.
        on_callback_error: What a callback that raises does: ``"log"`` (the
            default) logs one ``member.callback_failed`` line and keeps the
            change; ``"release"`` also gives back the resources whose
            ``on_assigned`` failed (the member rejoins and the group hands them
            to another member); ``"fail"`` fails the member with a
            :class:`~workgroup.member.errors.CallbackError` whose ``__cause__`` is
            the callback's exception.
        log_tracebacks: Add the callback's traceback (without local variables)
            to ``member.callback_failed``.
        kinds: The kinds of resources this member takes (``None``: every kind).
        rack: This member's rack, for rack-aware assignors.
        capacity: This member's relative capacity (> 0), for weighted assignors
            and load balancing (its share of the load).
        user_data: Opaque bytes the leader's assignor receives with the member.
        tags: Free-form labels sent in the member's metadata.
        client_id: The Kafka client id (default ``workgroup-<instance id or N>``).
        retry_backoff_ms: First back-off after a failed lookup or request; it
            doubles per failure up to one second.
        connect_timeout_ms: Fail (a
            :class:`~workgroup.member.errors.CoordinatorUnavailableError` from
            :meth:`wait_stable`) if no coordinator was found this long after
            :meth:`start`; every failed attempt before is logged as a warning.
            ``None`` (the default): keep trying.
        resource_poll_interval_ms: How often a callable ``resources`` is read.
        request_timeout_ms: Time limit of the coordinator lookup, OffsetCommit
            and OffsetFetch; a connection that lost a request is replaced after
            it.  ``None`` (the default): the session timeout, at most 30 s.
            Heartbeats time out after the session, JoinGroup and SyncGroup after
            the rebalance timeout.
        close_timeout_ms: How long :meth:`close` waits for revocations and the
            LeaveGroup.
        security: TLS and SASL settings for a cluster that requires them
            (:class:`~workgroup.security.Security`; default plain TCP).
        reassign_delay_ms: As the leader, how long the resources of a member
            that left wait before they go to others, so that a restarted process
            (a new member) gets them back without moving anything else (Kafka
            Connect's scheduled rebalance delay; :mod:`workgroup.member.delay`).
        confirm_release: A revoked resource stays claimed (no other member gets
            it) until :meth:`release_done` names it, not only until
            ``on_revoked`` returns: work that stops in the background releases
            each resource on its own (the state machine's rule 9).  A closing
            member heartbeats until every revoked resource was released.
        imbalance_tolerance, max_moves, balance_interval_ms: As the leader, load
            balancing after the assignor (:mod:`workgroup.member.balancing`): at
            most ``max_moves`` moves (0: off) bring the busiest member within
            ``imbalance_tolerance`` of the mean load; while a round ends above
            it, a probing rebalance follows every ``balance_interval_ms``.
            Loads come from :meth:`report_load`.

    Raises:
        ConfigError: A setting that cannot work.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        protocols: Sequence[Protocol],
        *,
        instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int = 3_000,
        resources: ResourceSource | None = None,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
        on_callback_error: CallbackErrorPolicy = "log",
        log_tracebacks: bool = False,
        kinds: Iterable[str] | None = None,
        rack: str | None = None,
        capacity: float = 1.0,
        user_data: bytes = b"",
        tags: Mapping[str, str] | None = None,
        client_id: str | None = None,
        retry_backoff_ms: int = 100,
        connect_timeout_ms: int | None = None,
        resource_poll_interval_ms: int = 5_000,
        request_timeout_ms: int | None = None,
        close_timeout_ms: int = 30_000,
        security: Security = PLAINTEXT,
        reassign_delay_ms: int = 0,
        session_margin_ms: int | None = None,
        confirm_release: bool = False,
        imbalance_tolerance: float = DEFAULT_TOLERANCE,
        max_moves: int = DEFAULT_MAX_MOVES,
        balance_interval_ms: int = DEFAULT_BALANCE_INTERVAL_MS,
    ) -> None:
        self.config = MemberConfig(
            group_id=group_id,
            protocols=tuple(protocols),
            instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            retry_backoff_ms=retry_backoff_ms,
            connect_timeout_ms=connect_timeout_ms,
            kinds=tuple(kinds) if kinds is not None else None,
            rack=rack,
            capacity=capacity,
            user_data=user_data,
            tags=dict(tags or {}),
            reassign_delay_ms=reassign_delay_ms,
            session_margin_ms=session_margin_ms,
            request_timeout_ms=request_timeout_ms,
            balance=BalanceSettings(
                imbalance_tolerance=imbalance_tolerance,
                max_moves=max_moves,
                balance_interval_ms=balance_interval_ms,
            ),
        )
        if resource_poll_interval_ms <= 0 or close_timeout_ms <= 0:
            raise ConfigError("poll interval and close timeout must be > 0")
        if on_callback_error not in get_args(CallbackErrorPolicy):
            raise ConfigError(
                f"on_callback_error must be one of {', '.join(get_args(CallbackErrorPolicy))}, "
                f"got {on_callback_error!r}"
            )
        self._client_id = client_id or f"workgroup-{instance_id or next(_ids)}"
        self._connection = CoordinatorConnection(
            bootstrap,
            client_id=self._client_id,
            # aiokafka applies one timeout to every request of a connection; the
            # JoinGroup may be held for the whole rebalance timeout.
            request_timeout_ms=max(
                self.config.join_timeout_ms, self.config.effective_request_timeout_ms
            ),
            security=security,
        )
        self._lookup_timeout_s = self.config.effective_request_timeout_ms / 1000
        self._source = resources
        self._callbacks: dict[str, Callback | None] = {
            "on_assigned": on_assigned,
            "on_revoked": on_revoked,
            "on_lost": on_lost,
        }
        self._on_callback_error = on_callback_error
        self._log_tracebacks = log_tracebacks
        self._poll_s = resource_poll_interval_ms / 1000
        self._close_timeout_s = close_timeout_ms / 1000
        self._confirm_release = confirm_release
        self._machine: MemberMachine | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Loops that run until cancelled (callbacks, resource polling).
        self._services: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._callback_queue: asyncio.Queue[InvokeCallback] = asyncio.Queue()
        #: The callback running now (its ``owned`` is :attr:`assignment` meanwhile).
        self._running_callback: InvokeCallback | None = None
        #: The fatal error, once the application may see it (after the describe
        #: that completes an InconsistentProtocolError).
        self._fatal: WorkgroupError | None = None
        #: The task inside ``async with`` (interrupted by a fatal error).
        self._owner: asyncio.Task[Any] | None = None
        self._in_context = False
        self._interrupted = False
        #: How many of the owner's waits (wait_for, wait_closed) are under way.
        self._owner_waits = 0
        self._main: asyncio.Task[None] | None = None
        self._started = False
        self._listeners: list[Callable[[GroupMember], None]] = []

    # --- public API ---------------------------------------------------------

    @property
    def assignment(self) -> frozenset[Resource]:
        """Resources this member owns.

        While a callback runs: everything owned right after the change that the
        callback reports (callbacks for later changes may be queued behind it).
        """
        running = self._running_callback
        if running is not None:
            return running.owned
        return self._machine.owned if self._machine else frozenset()

    @property
    def generation(self) -> int:
        """The group generation this member is in (-1: none)."""
        return self._machine.generation if self._machine else -1

    @property
    def protocol(self) -> str | None:
        """Wire name of the protocol the group chose (e.g. ``sticky.v2``)."""
        machine = self._machine
        return machine.protocol.wire_name if machine and machine.protocol else None

    @property
    def member_id(self) -> str:
        """The member id the coordinator gave this member ("" before joining)."""
        return self._machine.member_id if self._machine else ""

    @property
    def is_leader(self) -> bool:
        """Whether this member leads the group (runs the assignor)."""
        return bool(self._machine and self._machine.is_leader)

    @property
    def state(self) -> State:
        return self._machine.state if self._machine else State.UNJOINED

    @property
    def metadata_versions(self) -> Mapping[str, int]:
        """Metadata version used per protocol (lowered by version probing)."""
        return self._machine.used_versions if self._machine else {}

    @property
    def error(self) -> WorkgroupError | None:
        """The fatal error that stopped the member, if any."""
        return self._fatal

    @property
    def stable(self) -> bool:
        """Settled: STABLE with no callback running and no rejoin pending."""
        return bool(self._machine and self._machine.settled)

    async def __aenter__(self) -> GroupMember:
        self._owner = asyncio.current_task()
        await self.start()
        self._in_context = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        self._in_context = False
        owner, interrupted = self._owner, self._interrupted
        if interrupted and owner is not None:
            if not isinstance(exc, asyncio.CancelledError):
                # The block ended before our cancellation reached it: take it now.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)
            owner.uncancel()
        await self.close()
        error = self._fatal
        if (
            interrupted
            and error is not None
            and owner is not None
            and owner.cancelling() == 0  # nobody else cancelled the task
            and (exc is None or isinstance(exc, asyncio.CancelledError))
        ):
            error.__suppress_context__ = True  # the cancellation was only the messenger
            raise error

    async def start(self) -> None:
        """Start joining the group (returns at once; see :meth:`wait_stable`)."""
        if self._started:
            raise WorkgroupError("the member was already started")
        self._started = True
        catalog = await self._read_source()
        self._machine = MemberMachine(self.config, catalog, confirm_release=self._confirm_release)
        self._services.add(self._spawn(self._run_callbacks(), "callbacks"))
        if self._source is not None and callable(self._source):
            self._services.add(self._spawn(self._poll_source(), "resources"))
        self._feed(self._machine.start(monotonic_ms()))
        self._main = asyncio.create_task(self._run(), name=f"workgroup-member-{self._client_id}")

    async def wait_stable(self) -> None:
        """Wait until the member is settled: STABLE in the current generation with
        its assignment, no callback running or queued, no rejoin pending (a
        cooperative follow-up round, version probing, :meth:`request_rejoin`).

        Raises the member's fatal error (e.g. a
        :class:`~workgroup.member.errors.CoordinatorUnavailableError` once
        ``connect_timeout_ms`` passed), or :class:`MemberClosedError` if it was
        closed.  Bound the wait with ``asyncio.timeout``.
        """
        await self.wait_for(lambda member: member.stable)

    async def wait_for(self, predicate: Callable[[GroupMember], bool]) -> None:
        """Wait until ``predicate(member)`` holds (checked after every change).

        Raises like :meth:`wait_stable`.
        """
        self._require_started()
        while not predicate(self):
            if self._fatal is not None:
                raise self._fatal
            if self._closed.is_set():
                raise MemberClosedError("the member is closed")
            await self._next_change()

    async def wait_closed(self) -> None:
        """Wait until the member stops: return when it was closed, raise its fatal
        error when it failed.

        ``await member.wait_closed()`` is how a program that has nothing else to
        do keeps its member running, and hears when it fails.
        """
        self._require_started()
        while self._fatal is None:
            if self._closed.is_set():
                return
            await self._next_change()
        raise self._fatal

    async def _next_change(self) -> None:
        self._changed.clear()
        # The task inside ``async with`` waiting here hears of a fatal error from
        # the wait itself: it needs no interruption.
        owner_waits = asyncio.current_task() is self._owner
        self._owner_waits += owner_waits
        try:
            await self._changed.wait()
        finally:
            self._owner_waits -= owner_waits

    def add_listener(self, listener: Callable[[GroupMember], None]) -> None:
        """Call ``listener(member)`` after every change of the member's state
        (in the event loop; keep it short: metrics, health checks)."""
        self._listeners.append(listener)

    @property
    def rebalances(self) -> int:
        """Generations this member joined."""
        return self._machine.rebalances if self._machine else 0

    @property
    def heartbeat_age_s(self) -> float | None:
        """Seconds since the newest request that proved the session alive was sent."""
        since = self._machine.alive_since if self._machine else None
        return None if since is None else (monotonic_ms() - since) / 1000

    def request_rejoin(self, reason: str = "requested by the application") -> None:
        """Ask for a rebalance (a new generation), e.g. after this member's
        situation changed.  Acted on once the member is STABLE with no callback
        running; ignored while a rebalance is under way anyway."""
        self._require_started()
        assert self._machine is not None
        self._feed(self._machine.request_rejoin(monotonic_ms(), reason))

    @property
    def releasing(self) -> frozenset[Resource]:
        """Revoked resources not yet released (see ``confirm_release``)."""
        return self._machine.releasing if self._machine else frozenset()

    def release_done(self, resources: Iterable[Resource]) -> None:
        """The work on revoked ``resources`` has stopped: another member may get
        them now (with ``confirm_release``; others are ignored)."""
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.released(monotonic_ms(), resources))

    def report_load(self, resource: Resource, value: float) -> None:
        """Record ``value`` (finite, >= 0: records/s, bytes/s, ...) as the current
        load of ``resource``; the member publishes its smoothed load the next time
        it joins (:mod:`workgroup.member.balancing`).  Safe from any thread.
        A bad value is a :class:`~workgroup.errors.ConfigError`."""
        load = check_load(value)
        machine = self._machine
        if machine is not None:
            machine.loads.record(resource, load, monotonic_ms())

    def refuse(self, resources: Iterable[Resource], for_ms: int, reason: str) -> None:
        """Give up ``resources`` (no callback) and refuse them for ``for_ms``:
        the leader hands them to another member that takes their kind, if any
        (the state machine's rule 10)."""
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.refuse(monotonic_ms(), resources, for_ms, reason))

    async def refresh_resources(self) -> None:
        """Read the resource source now (the leader rebalances if it changed)."""
        if self._machine is None:
            return
        catalog = await self._read_source()
        self._feed(self._machine.resources_changed(monotonic_ms(), catalog))

    async def commit_offsets(
        self, topics: Sequence[CommitTopic], *, generation: int | None = None
    ) -> OffsetCommitResult:
        """OffsetCommit under this member's generation, member id and instance id.

        ``generation``: commit under that (older) generation instead, for work the
        member gave up in it: the coordinator accepts it only until the group
        moves on, so nothing is committed for a resource once its next owner
        may hold it (Kafka's commits in ``onPartitionsRevoked``).

        The coordinator accepts it only from a current member of the current
        generation: the fence against a member that missed a rebalance (a paused
        process, a replaced static member).  Per-partition errors are in the
        result; a lost connection is a
        :class:`~workgroup.member.errors.CoordinatorUnavailableError`.
        """
        self._require_started()
        machine = self._machine
        assert machine is not None
        request = OffsetCommit(
            group_id=self.config.group_id,
            generation_id=machine.generation if generation is None else generation,
            member_id=machine.member_id,
            topics=tuple(topics),
            group_instance_id=self.config.instance_id,
        )
        result = await self._request(request)
        assert isinstance(result, OffsetCommitResult)
        return result

    async def fetch_offsets(self, topics: Sequence[FetchTopic]) -> FetchedGroup:
        """OffsetFetch of this group's committed offsets for ``topics``."""
        self._require_started()
        request = OffsetFetch(groups=(OffsetFetchGroup(self.config.group_id, tuple(topics)),))
        result = await self._request(request)
        assert isinstance(result, OffsetFetchResult)
        if len(result.groups) != 1:
            raise ProtocolError(f"OffsetFetch answered {len(result.groups)} groups, asked for 1")
        return result.groups[0]

    async def _request(self, request: OffsetCommit | OffsetFetch) -> GroupResult:
        what = type(request).__name__
        try:
            # It may wait behind a JoinGroup the coordinator holds on the same
            # connection: its timeout says nothing about the connection.
            response = await self._connection.send(
                KioRequest(request), self._lookup_timeout_s, give_up_on_timeout=False
            )
            return to_result(request, response)
        except asyncio.CancelledError:
            raise
        except (KafkaError, OSError, TimeoutError, WorkgroupError) as exc:
            raise map_kafka_error(exc, what) from exc
        except Exception as exc:  # malformed response from kio
            raise ProtocolError(f"{what}: {exc}") from exc

    async def close(self, *, leave: bool | None = None) -> None:
        """Revoke, leave (dynamic members) and release every connection.

        The member heartbeats until the revocation callbacks have returned and
        (with ``confirm_release``) every revoked resource was released, for up to
        ``close_timeout_ms``; then it leaves.  A static member sends no
        LeaveGroup (its instance id keeps its place for a restart) unless
        ``leave=True`` (scale-down: its resources move at once instead of
        waiting for its session to expire).  Out of time, it stops without
        LeaveGroup: what it has not released moves only once its session
        expires (``member.close_timed_out``).
        """
        if not self._started:
            return
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            self._feed(machine.close(monotonic_ms(), leave=leave))
            try:
                async with asyncio.timeout(self._close_timeout_s):
                    await self._closed.wait()
                    # A FATAL member closes at once; its on_lost may still be queued.
                    await self._callback_queue.join()
            except TimeoutError:
                log.error(
                    "member.close_timed_out",
                    group=self.config.group_id,
                    releasing=len(machine.releasing),
                    timeout_s=self._close_timeout_s,
                    why="stopping without LeaveGroup: the unreleased resources move "
                    "once the session expires",
                )
        self._closed.set()
        self._changed.set()
        self._wake.set()
        if self._main is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        # The service loops never end by themselves: waiting for them took the full second.
        pending = [t for t in self._tasks if not t.done() and t not in self._services]
        if pending:
            # A LeaveGroup sent on a fatal error gets a moment to go out.
            await asyncio.wait(pending, timeout=1.0)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._connection.close()

    def _require_started(self) -> None:
        if not self._started:
            raise WorkgroupError("the member is not started (use async with, or start())")

    # --- the loop -----------------------------------------------------------

    async def _run(self) -> None:
        machine = self._machine
        assert machine is not None
        while not self._closed.is_set():
            deadline = machine.next_deadline()
            delay = None if deadline is None else max(0.0, (deadline - monotonic_ms()) / 1000)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            if not self._closed.is_set():
                self._feed(machine.tick(monotonic_ms()))

    def _feed(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, FindCoordinator):
                self._spawn(self._find_coordinator(), "find-coordinator")
            elif isinstance(action, SendRequest):
                self._spawn(self._send(action), f"request-{action.request_id}")
            elif isinstance(action, InvokeCallback):
                self._callback_queue.put_nowait(action)
            elif isinstance(action, RunAssignor):
                self._spawn(self._assign(action), f"assignor-{action.run_id}")
            elif isinstance(action, Failed):
                # The machine has logged it (member.fatal).
                if isinstance(action.error, InconsistentProtocolError):
                    self._spawn(self._explain_and_report(action.error), "describe-group")
                else:
                    self._report_failure(action.error)
            elif isinstance(action, Closed):
                self._closed.set()
        self._wake.set()
        self._changed.set()
        for listener in self._listeners:
            listener(self)

    def _report_failure(self, error: WorkgroupError) -> None:
        """Let the application see the fatal error; interrupt its ``async with``."""
        self._fatal = error
        self._changed.set()
        owner = self._owner
        if (
            self._in_context
            and owner is not None
            and not owner.done()
            and not self._owner_waits
            and not self._interrupted
        ):
            self._interrupted = True
            owner.cancel(msg=f"the group member failed: {error}")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=f"workgroup-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- actions ------------------------------------------------------------

    async def _find_coordinator(self) -> None:
        """One lookup per FindCoordinator: the machine's back-off is the retry policy."""
        machine = self._machine
        assert machine is not None
        try:
            await self._lookup()
        except WorkgroupError as exc:
            self._feed(machine.find_coordinator_failed(monotonic_ms(), exc))
            return
        self._feed(machine.coordinator_found(monotonic_ms()))

    async def _lookup(self) -> int:
        what = f"finding the coordinator of group {self.config.group_id!r}"
        try:
            node_id = await self._connection.find(self.config.group_id, self._lookup_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Anything unexpected (not a network error) is fatal rather than a
            # lookup that never answers.
            raise map_kafka_error(exc, what) from exc
        log.debug("member.coordinator", node=node_id, group=self.config.group_id)
        return node_id

    async def _send(self, action: SendRequest) -> None:
        machine = self._machine
        assert machine is not None
        what = type(action.request).__name__
        request = KioRequest(action.request)
        try:
            timeout_s = action.timeout_ms / 1000
            if action.beside_held:
                response = await self._connection.send_beside(request, timeout_s)
            else:
                response = await self._connection.send(request, timeout_s)
            result = to_result(action.request, response)
        except asyncio.CancelledError:
            raise
        except (KafkaError, OSError, TimeoutError, WorkgroupError) as exc:
            error = map_kafka_error(exc, what)
            self._feed(machine.request_failed(monotonic_ms(), action.request_id, error))
            return
        except Exception as exc:  # malformed response from kio
            error = ProtocolError(f"{what}: {exc}")
            self._feed(machine.request_failed(monotonic_ms(), action.request_id, error))
            return
        self._feed(machine.response(monotonic_ms(), action.request_id, result))

    async def _explain_and_report(self, error: InconsistentProtocolError) -> None:
        """Add what the group speaks to the error (one DescribeGroups), then report it."""
        try:
            async with asyncio.timeout(DESCRIBE_TIMEOUT_S):
                response = await self._connection.send(DescribeGroupRequest(self.config.group_id))
            summary = describe_group_summary(response, self.config.group_id)
            if summary:
                error.args = (f"{error}; {summary}",)
        except Exception as exc:  # the error stands as it is
            log.debug("member.describe_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._report_failure(error)

    async def _assign(self, action: RunAssignor) -> None:
        machine = self._machine
        assert machine is not None
        try:
            target: Assignment | WorkgroupError = await asyncio.to_thread(
                action.assignor.assign, action.input
            )
        except WorkgroupError as exc:
            target = exc
        except Exception as exc:
            log.exception("member.assignor_failed", assignor=action.assignor.name)
            target = WorkgroupError(f"{type(exc).__name__}: {exc}")
        self._feed(machine.assignment_done(monotonic_ms(), action.run_id, target))

    async def _run_callbacks(self) -> None:
        machine = self._machine
        assert machine is not None
        while True:
            action = await self._callback_queue.get()
            try:
                failure = await self._invoke(action)
                if failure is not None:
                    self._callback_failed(machine, action, failure)
                self._feed(machine.callback_done(monotonic_ms(), action.callback_id))
            finally:
                self._callback_queue.task_done()

    async def _invoke(self, action: InvokeCallback) -> Exception | None:
        """Run the application's callback for ``action``; what it raised, if anything."""
        callback = self._callbacks.get(action.kind)
        if callback is None:
            return None
        self._running_callback = action
        try:
            if inspect.iscoroutinefunction(callback):
                await callback(action.resources, action.generation)
            else:
                # A thread: a plain callback that blocks must not stop heartbeats.
                outcome = await asyncio.to_thread(callback, action.resources, action.generation)
                if inspect.isawaitable(outcome):
                    await outcome
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc
        finally:
            self._running_callback = None
        return None

    def _callback_failed(
        self, machine: MemberMachine, action: InvokeCallback, exc: Exception
    ) -> None:
        """Carry out ``on_callback_error`` for a callback that raised ``exc``."""
        what = f"{action.kind} failed in generation {action.generation}"
        if self._on_callback_error == "fail" and machine.state not in (State.FATAL, State.CLOSED):
            error = CallbackError(f"{what}: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._feed(machine.fail(monotonic_ms(), error))  # logged as member.fatal
            return
        details: dict[str, Any] = {}
        if self._log_tracebacks:
            details["traceback"] = "".join(traceback.format_exception(exc)).rstrip()
        # Kafka's clients log callback failures and carry on; the ownership
        # change has happened either way.
        log.error(
            "member.callback_failed",
            callback=action.kind,
            generation=action.generation,
            error_type=type(exc).__name__,
            error=str(exc),
            policy=self._on_callback_error,
            **details,
        )
        if self._on_callback_error == "release" and action.kind == "on_assigned":
            self._feed(machine.release(monotonic_ms(), action.resources, what))

    async def _read_source(self) -> Catalog:
        source = self._source
        if source is None:
            return {}
        if callable(source):
            value = source()
            if inspect.isawaitable(value):
                value = await value
            catalog: Catalog = value
        else:
            catalog = source
        # Not validated here: the machine freezes (and validates) every catalog it
        # is given, so a bad source is still a ConfigError at start.
        return catalog

    async def _poll_source(self) -> None:
        """Re-read the resource source every poll interval.  A failure is logged
        once in full (the user's frames, never local variables), then as one
        line with the count at the 2nd, 4th, 8th... failure in a row, again in
        full when the error changes, and ``member.resource_source_recovered``
        once it reads again; the member keeps its last list meanwhile."""
        failures = 0
        last_error: str | None = None
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.refresh_resources()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                error = getattr(exc, "summary", None) or describe_error(exc)
                if error != last_error:
                    last_error = error
                    frames = getattr(exc, "frames", None) or user_frames(exc)
                    log.error(
                        "member.resource_source_failed",
                        group=self.config.group_id,
                        error=error,
                        failures=failures,
                        hint="the member keeps its last list of resources",
                        **({"exception": frames} if frames else {}),
                    )
                elif failures & (failures - 1) == 0:  # 2, 4, 8, ...
                    log.error(
                        "member.resource_source_failing",
                        group=self.config.group_id,
                        error=error,
                        failures=failures,
                    )
            else:
                if failures:
                    log.info(
                        "member.resource_source_recovered",
                        group=self.config.group_id,
                        failures=failures,
                    )
                failures = 0
                last_error = None
