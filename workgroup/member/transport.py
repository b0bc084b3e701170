"""The member's transport: bootstrap addresses, the coordinator connection, and
aiokafka's errors as workgroup's.

Rules:

1. Bootstrap addresses are parsed by :func:`workgroup.client.bootstrap.parse_bootstrap`
   (named here too): an address that can never work is refused there; one that
   does not answer (yet) is the lookup's to retry.
2. :class:`CoordinatorConnection` carries every request of a member: one
   connection to the coordinator (a second one only for heartbeats beside a
   JoinGroup or SyncGroup the coordinator holds on the first), and a request
   that times out gives its connection up unless it may wait behind a held one.
3. Every exception of aiokafka, of the socket or of a timeout becomes a
   :class:`~workgroup.errors.WorkgroupError` in one place, :func:`kafka_errors`
   (:func:`map_kafka_error` says which): a disconnect or timeout is a retriable
   :class:`~workgroup.member.errors.CoordinatorUnavailableError`, refused
   credentials an :class:`~workgroup.errors.AuthenticationError`, anything
   unexpected (a malformed response) a :class:`~workgroup.errors.ProtocolError`.
   A cancellation passes through.  No bootstrap broker accepting a connection is
   a :class:`~workgroup.member.errors.NothingAnswersError`, the same for every
   command, with each address and the OS's reason.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from aiokafka import errors as aiokafka_errors
from aiokafka.client import CoordinationType
from aiokafka.conn import AIOKafkaConnection, CloseReason, create_conn
from aiokafka.errors import (
    CoordinatorNotAvailableError,
    IncompatibleBrokerVersion,
    KafkaError,
    NoError,
    NotCoordinatorError,
    for_code,
)
from aiokafka.protocol.coordination import FindCoordinatorRequest

from workgroup.client.bootstrap import parse_bootstrap
from workgroup.errors import (
    AuthenticationError,
    ProtocolError,
    UnsupportedVersionError,
    WorkgroupError,
)
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.messages import (
    DescribeGroups,
    GroupResult,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    OffsetCommit,
    OffsetFetch,
    SyncGroup,
)
from workgroup.member.errors import (
    CoordinatorUnavailableError,
    NothingAnswersError,
    connect_failure_reason,
    describe_group_summary,
)
from workgroup.security import PLAINTEXT, Security

#: How long closing a connection waits for its socket to close.
CLOSE_SOCKET_TIMEOUT_S = 1.0

#: The requests a member sends to its coordinator, as workgroup's messages.
MemberRequest = JoinGroup | SyncGroup | Heartbeat | LeaveGroup | OffsetCommit | OffsetFetch

#: aiokafka's ways of saying the credentials were refused.
AUTHENTICATION_ERRORS = (
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
    if isinstance(exc, AUTHENTICATION_ERRORS):
        return AuthenticationError(f"{what}: authentication failed: {exc}")
    if isinstance(exc, TimeoutError):
        return CoordinatorUnavailableError(f"{what}: timed out")
    if isinstance(exc, NotCoordinatorError | CoordinatorNotAvailableError):
        return CoordinatorUnavailableError(f"{what}: {type(exc).__name__}")
    if isinstance(exc, KafkaError | OSError):
        # Disconnects, unknown nodes, timeouts: the coordinator must be found again.
        return CoordinatorUnavailableError(f"{what}: {exc}")
    return WorkgroupError(f"{what}: unexpected {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def kafka_errors(what: str) -> Iterator[None]:
    """Raise what goes wrong inside as a :class:`~workgroup.errors.WorkgroupError`
    saying ``what`` failed (rule 3); a cancellation passes through."""
    try:
        yield
    except WorkgroupError:
        raise
    except (KafkaError, OSError, TimeoutError) as exc:
        raise map_kafka_error(exc, what) from exc
    except Exception as exc:  # a malformed response
        raise ProtocolError(f"{what}: {type(exc).__name__}: {exc}") from exc


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

    async def request(
        self,
        message: MemberRequest,
        timeout_s: float | None,
        *,
        beside_held: bool = False,
        may_wait_behind_held: bool = False,
    ) -> GroupResult:
        """Send ``message`` to the coordinator and return its result; every failure
        is a :class:`~workgroup.errors.WorkgroupError` (rule 3).  ``beside_held``:
        on the second connection; ``may_wait_behind_held``: a timeout keeps the
        connection (the request may wait behind one the coordinator holds)."""
        with kafka_errors(type(message).__name__):
            raw = KafkaRequest(message)
            if beside_held:
                response = await self.send_beside(raw, timeout_s)
            else:
                response = await self.send(
                    raw, timeout_s, give_up_on_timeout=not may_wait_behind_held
                )
            return to_result(message, response)

    async def describe(self, group_id: str, timeout_s: float) -> str | None:
        """What the group speaks, as a clause for an error message (one
        DescribeGroups; ``None`` if it says nothing useful)."""
        request = DescribeGroups((group_id,))
        async with asyncio.timeout(timeout_s):
            response = await self.send(KafkaRequest(request))
        return describe_group_summary(to_result(request, response), group_id)

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
        failures: list[tuple[str, str]] = []
        for _ in self._hosts:
            host, port = self._hosts[self._next_host]
            self._next_host = (self._next_host + 1) % len(self._hosts)
            try:
                conn = await self._connect(host, port)
            except AUTHENTICATION_ERRORS as exc:
                # Every broker of a cluster checks the same credentials.
                raise AuthenticationError(
                    f"{host}:{port} refused the credentials: {str(exc) or type(exc).__name__}"
                ) from exc
            except (KafkaError, OSError, TimeoutError) as exc:
                failures.append((f"{host}:{port}", connect_failure_reason(exc)))
                continue
            self._conn = conn
            return conn
        raise NothingAnswersError(failures)

    async def _connect(self, host: str, port: int) -> AIOKafkaConnection:
        conn: AIOKafkaConnection = await create_conn(
            host,
            port,
            client_id=self._client_id,
            request_timeout_ms=self._request_timeout_ms,
            **self._options,
        )
        return conn


__all__ = [
    "CoordinatorConnection",
    "MemberRequest",
    "kafka_errors",
    "map_kafka_error",
    "parse_bootstrap",
]
