"""The asyncio driver of a group member, on aiokafka's client.

All decisions are the state machine's (``state.py``); this module only carries
out its actions: it finds the coordinator and sends requests over one aiokafka
connection (:class:`CoordinatorConnection`; ApiVersions negotiation), runs
callbacks one at a time in their own task (so heartbeats keep flowing while a
long revocation runs), runs the leader's assignor in a worker thread, polls the
resource source and wakes the machine at its deadlines.  aiokafka's exceptions
are mapped to :class:`~workgroup.errors.WorkgroupError` here.

Example::

    async with GroupMember("localhost:9092", "indexers", [Protocol("sticky", assignor)],
                           resources={"shard": range(12)}, on_assigned=start) as member:
        async with asyncio.timeout(30):
            await member.wait_stable()
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka.client import CoordinationType
from aiokafka.conn import AIOKafkaConnection, CloseReason, collect_hosts, create_conn
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
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from workgroup.assignors.base import Assignment
from workgroup.clock import monotonic_ms
from workgroup.errors import ConfigError, ProtocolError, UnsupportedVersionError, WorkgroupError
from workgroup.log import get_logger
from workgroup.member.errors import CoordinatorUnavailableError, MemberClosedError
from workgroup.member.state import (
    Action,
    Closed,
    Failed,
    FindCoordinator,
    InvokeCallback,
    MemberConfig,
    MemberMachine,
    RunAssignor,
    SendRequest,
    State,
)
from workgroup.member.wire import KioRequest, to_result
from workgroup.protocol.catalog import Catalog
from workgroup.protocol.protocol import Protocol
from workgroup.types import Resource

log = get_logger("workgroup.member")

#: ``callback(resources, generation)``; may be a coroutine function.
Callback = Callable[[tuple[Resource, ...], int], Awaitable[None] | None]
#: A fixed catalog, or a (possibly async) function returning the current one.
ResourceSource = Catalog | Callable[[], Catalog | Awaitable[Catalog]]

_ids = itertools.count(1)
#: How long closing a connection waits for its socket to close.
CLOSE_SOCKET_TIMEOUT_S = 1.0


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, WorkgroupError) and exc.retriable


def map_kafka_error(exc: BaseException, what: str) -> WorkgroupError:
    """aiokafka / asyncio exceptions at this boundary, as WorkgroupError."""
    if isinstance(exc, WorkgroupError):
        return exc
    if isinstance(exc, IncompatibleBrokerVersion):
        return UnsupportedVersionError(f"{what}: {exc}")
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
    """

    def __init__(self, bootstrap: str, *, client_id: str, request_timeout_ms: int) -> None:
        try:
            hosts = collect_hosts(bootstrap, randomize=False)
        except Exception as exc:
            raise ConfigError(f"bad bootstrap servers {bootstrap!r}: {exc}") from exc
        if not hosts:
            raise ConfigError("no bootstrap servers")
        self._hosts: list[tuple[str, int]] = [(host, int(port)) for host, port, _afi in hosts]
        self._next_host = 0
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._conn: AIOKafkaConnection | None = None
        #: Node id of the coordinator that ``_conn`` leads to; ``None`` during a lookup.
        self.coordinator: int | None = None

    async def find(self, group_id: str) -> int:
        """Ask a broker for the group's coordinator and connect to it; its node id."""
        self.coordinator = None
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

    async def send(self, request: Any) -> Any:
        conn = self._conn
        if self.coordinator is None or conn is None or not conn.connected():
            raise CoordinatorUnavailableError("not connected to the coordinator")
        return await conn.send(request)

    async def close(self) -> None:
        """Close the connection; wait (briefly) until its socket is closed."""
        conn, self._conn, self.coordinator = self._conn, None, None
        if conn is not None:
            closed = conn.close(reason=CloseReason.SHUTDOWN)
            # A socket closes once its unsent bytes are out: a peer that stopped
            # reading must not hold a member's close (and a revocation) forever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(closed), CLOSE_SOCKET_TIMEOUT_S)

    def _drop(self) -> None:
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
        )
        return conn


class GroupMember:
    """A member of a workgroup group (see the module docstring)."""

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
        kinds: Iterable[str] | None = None,
        rack: str | None = None,
        capacity: float = 1.0,
        user_data: bytes = b"",
        tags: Mapping[str, str] | None = None,
        client_id: str | None = None,
        retry_backoff_ms: int = 100,
        resource_poll_interval_ms: int = 5_000,
        request_timeout_ms: int = 30_000,
        close_timeout_ms: int = 30_000,
    ) -> None:
        self.config = MemberConfig(
            group_id=group_id,
            protocols=tuple(protocols),
            instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            retry_backoff_ms=retry_backoff_ms,
            kinds=tuple(kinds) if kinds is not None else None,
            rack=rack,
            capacity=capacity,
            user_data=user_data,
            tags=dict(tags or {}),
        )
        if resource_poll_interval_ms <= 0 or close_timeout_ms <= 0 or request_timeout_ms <= 0:
            raise ConfigError("poll interval, request and close timeouts must be > 0")
        self._client_id = client_id or f"workgroup-{instance_id or next(_ids)}"
        self._connection = CoordinatorConnection(
            bootstrap if isinstance(bootstrap, str) else ",".join(bootstrap),
            client_id=self._client_id,
            # aiokafka applies one timeout to every request of a connection; the
            # JoinGroup may be held for the whole rebalance timeout.
            request_timeout_ms=max(self.config.join_timeout_ms, request_timeout_ms),
        )
        self._source = resources
        self._callbacks: dict[str, Callback | None] = {
            "on_assigned": on_assigned,
            "on_revoked": on_revoked,
            "on_lost": on_lost,
        }
        self._poll_s = resource_poll_interval_ms / 1000
        self._close_timeout_s = close_timeout_ms / 1000
        self._machine: MemberMachine | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Loops that run until cancelled (callbacks, resource polling).
        self._services: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._callback_queue: asyncio.Queue[InvokeCallback] = asyncio.Queue()
        #: Cleared while a closing static member takes its connection down: its
        #: revocation waits for that (see close()).
        self._callbacks_open = asyncio.Event()
        self._callbacks_open.set()
        self._main: asyncio.Task[None] | None = None
        self._started = False

    # --- public API ---------------------------------------------------------

    @property
    def assignment(self) -> frozenset[Resource]:
        """Resources this member owns now."""
        return self._machine.owned if self._machine else frozenset()

    @property
    def generation(self) -> int:
        return self._machine.generation if self._machine else -1

    @property
    def protocol(self) -> str | None:
        """Wire name of the protocol the group chose (e.g. ``sticky.v2``)."""
        machine = self._machine
        return machine.protocol.wire_name if machine and machine.protocol else None

    @property
    def member_id(self) -> str:
        return self._machine.member_id if self._machine else ""

    @property
    def is_leader(self) -> bool:
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
        return self._machine.error if self._machine else None

    @property
    def stable(self) -> bool:
        """In the group with its assignment, no callback or rejoin pending."""
        m = self._machine
        return bool(m and m.state is State.STABLE and not m._callbacks and m._rejoin_reason is None)

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._started:
            raise WorkgroupError("the member was already started")
        self._started = True
        catalog = await self._read_source()
        self._machine = MemberMachine(self.config, catalog)
        self._services.add(self._spawn(self._run_callbacks(), "callbacks"))
        if self._source is not None and callable(self._source):
            self._services.add(self._spawn(self._poll_source(), "resources"))
        self._feed(self._machine.start(monotonic_ms()))
        self._main = asyncio.create_task(self._run(), name=f"workgroup-member-{self._client_id}")

    async def wait_stable(self) -> None:
        """Wait until the member is STABLE (raises the member's fatal error).

        Bound the wait with ``asyncio.timeout``.
        """
        await self.wait_for(lambda member: member.stable)

    async def wait_for(self, predicate: Callable[[GroupMember], bool]) -> None:
        """Wait until ``predicate(member)`` holds (checked after every change)."""
        while not predicate(self):
            if self.error is not None:
                raise self.error
            if self._closed.is_set():
                raise MemberClosedError("the member is closed")
            self._changed.clear()
            await self._changed.wait()

    async def refresh_resources(self) -> None:
        """Read the resource source now (the leader rebalances if it changed)."""
        if self._machine is None:
            return
        catalog = await self._read_source()
        self._feed(self._machine.resources_changed(monotonic_ms(), catalog))

    async def close(self) -> None:
        """Revoke, leave (dynamic members) and release every connection."""
        if not self._started:
            return
        machine = self._machine
        if machine is not None and not self._closed.is_set():
            # A static member sends no LeaveGroup, and nobody else can be handed its
            # resources before its session expires or its instance id joins again
            # (after this returns): it keeps them, and its work running, until its
            # requests and connection are down, so a restart leaves them unowned as
            # briefly as possible.  A dynamic member must revoke before it leaves.
            revoke_last = self.config.instance_id is not None and machine.state in (
                State.FINDING_COORDINATOR,
                State.JOINING,
                State.ASSIGNING,
                State.SYNCING,
                State.STABLE,
            )
            if revoke_last:
                self._callbacks_open.clear()
            self._feed(machine.close(monotonic_ms()))
            if revoke_last:
                try:
                    await self._stop_requests()
                    await self._connection.close()
                finally:
                    self._callbacks_open.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._close_timeout_s):
                    await self._closed.wait()
        self._closed.set()
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

    async def _stop_requests(self) -> None:
        """Cancel the lookups, requests and assignor runs in flight."""
        requests = [t for t in self._tasks if not t.done() and t not in self._services]
        for task in requests:
            task.cancel()
        await asyncio.gather(*requests, return_exceptions=True)

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
                log.error("member.failed", error=str(action.error))
            elif isinstance(action, Closed):
                self._closed.set()
        self._wake.set()
        self._changed.set()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=f"workgroup-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- actions ------------------------------------------------------------

    async def _find_coordinator(self) -> None:
        machine = self._machine
        assert machine is not None
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(_retriable),
                stop=stop_after_attempt(3),
                wait=wait_exponential(multiplier=self.config.retry_backoff_ms / 1000, max=1.0),
                reraise=True,
            ):
                with attempt:
                    await self._lookup()
        except WorkgroupError as exc:
            self._feed(machine.find_coordinator_failed(monotonic_ms(), exc))
            return
        self._feed(machine.coordinator_found(monotonic_ms()))

    async def _lookup(self) -> int:
        what = f"finding the coordinator of group {self.config.group_id!r}"
        try:
            node_id = await self._connection.find(self.config.group_id)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise map_kafka_error(exc, what) from exc
        log.debug("member.coordinator", node=node_id, group=self.config.group_id)
        return node_id

    async def _send(self, action: SendRequest) -> None:
        machine = self._machine
        assert machine is not None
        what = type(action.request).__name__
        request = KioRequest(action.request)
        try:
            async with asyncio.timeout(action.timeout_ms / 1000):
                response = await self._connection.send(request)
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
            await self._callbacks_open.wait()
            callback = self._callbacks.get(action.kind)
            if callback is not None:
                try:
                    outcome = callback(action.resources, action.generation)
                    if inspect.isawaitable(outcome):
                        await outcome
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # Kafka's clients log callback failures and carry on; the
                    # ownership change has happened either way.
                    log.exception(
                        "member.callback_failed", callback=action.kind, generation=action.generation
                    )
            self._feed(machine.callback_done(monotonic_ms(), action.callback_id))

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
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.refresh_resources()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("member.resource_source_failed")
