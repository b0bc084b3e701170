"""A blocking connection to a group's coordinator: plain sockets, no event loop.

For code that runs where no daemon and no event loop are (a Spark worker, a
subprocess, a thread of someone else's program): :class:`workgroup.fence.Fence`
sends its OffsetCommit, OffsetFetch, Heartbeat and DescribeGroups through it.

Rules:

1. One request at a time, each bounded by the caller's deadline (connect,
   TLS and SASL handshakes included; seconds on the monotonic clock of
   :data:`~workgroup.clock.SYSTEM_CLOCK`, which the sockets' timeouts are
   measured against): past it, :class:`CoordinatorUnavailableError`
   naming the address and what was under way.  A request that timed out closes
   the connection (its answer could still arrive and be read as the next one's).
2. ApiVersions first; every group request then uses the highest version both
   sides speak (the member's own choice, :func:`workgroup.kafka.adapter.choose_version`).
3. FindCoordinator goes to the bootstrap servers in turn; the connection moves
   to the coordinator it names, unless that is the server already connected.
4. TLS with the system's or the given CA bundle and client certificate; SASL
   PLAIN and SCRAM-SHA-256/512 (aiokafka's authenticators, driven by hand).
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
from collections.abc import Sequence
from typing import Any

import workgroup.kafka  # noqa: F401  (first: it loads kio without hypothesis, kio_loading)

# isort: split
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v1.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32

from workgroup.client.errors import (
    CoordinatorUnavailableError,
    NothingAnswersError,
    connect_failure_reason,
)
from workgroup.client.security import PASSWORD_ENV, PASSWORD_FILE_ENV, Security
from workgroup.clock import SYSTEM_CLOCK
from workgroup.errors import AuthenticationError, ErrorCode, ProtocolError
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.apis import response_schema
from workgroup.kafka.codec import error_code
from workgroup.kafka.messages import FENCE_CLIENT_ID, GroupRequest, GroupResult

_SIZE = struct.Struct(">i")
#: Largest answer read (a DescribeGroups of a big group is the largest).
MAX_RESPONSE_BYTES = 100 * 1024 * 1024


class BlockingCoordinator:
    """One blocking connection to ``group_id``'s coordinator (see the module's rules)."""

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        group_id: str,
        security: Security,
        *,
        client_id: str = FENCE_CLIENT_ID,
    ) -> None:
        self._bootstrap = list(bootstrap)
        self._group_id = group_id
        self._security = security.with_password_from_environment()
        self._client_id = client_id
        self._sock: socket.socket | None = None
        self._address: tuple[str, int] | None = None
        self._versions: dict[int, tuple[int, int]] = {}
        self._correlation = 0
        self._coordinator_found = False

    def close(self) -> None:
        sock, self._sock, self._coordinator_found = self._sock, None, False
        if sock is not None:
            sock.close()

    def __enter__(self) -> BlockingCoordinator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(self, request: GroupRequest, deadline: float) -> GroupResult:
        """Send one group request to the coordinator and return its result record."""
        self._find_coordinator(deadline)
        assert self._sock is not None
        prepared = KafkaRequest(request).prepare(self._versions)
        response_type = response_schema(prepared.API_KEY, prepared.API_VERSION)
        response = self._roundtrip(prepared.entity, response_type, deadline)
        return to_result(request, response)

    # --- connection ----------------------------------------------------------------

    def _find_coordinator(self, deadline: float) -> None:
        if self._sock is not None and self._coordinator_found:
            return
        failures: list[tuple[str, str]] = []
        other: CoordinatorUnavailableError | None = None
        if self._sock is None:
            for host, port in self._bootstrap:
                try:
                    self._connect(host, port, deadline)
                    break
                except NothingAnswersError as exc:
                    failures.extend(exc.failures)
                except CoordinatorUnavailableError as exc:  # connected, then failed
                    other = exc
            else:
                raise other if other is not None else NothingAnswersError(failures)
        answer = self._roundtrip(
            FindCoordinatorRequest(key=self._group_id, key_type=i8(0)),
            FindCoordinatorResponse,
            deadline,
        )
        code = error_code(answer.error_code)
        if code is not ErrorCode.NONE:
            self.close()
            raise CoordinatorUnavailableError(
                f"FindCoordinator for group {self._group_id!r}: {code.name}"
            )
        where = (str(answer.host), int(answer.port))
        if where != self._address:
            self.close()
            self._connect(*where, deadline)
        self._coordinator_found = True

    def _connect(self, host: str, port: int, deadline: float) -> None:
        self.close()
        try:
            sock = socket.create_connection((host, port), timeout=_left(deadline))
        except OSError as exc:
            raise NothingAnswersError([(f"{host}:{port}", connect_failure_reason(exc))]) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._security.protocol in ("SSL", "SASL_SSL"):
                sock = self._tls(sock, host)
        except BaseException:
            sock.close()
            raise
        self._sock, self._address = sock, (host, port)
        answer = self._roundtrip(ApiVersionsRequest(), ApiVersionsResponse, deadline)
        self._versions = {
            int(api.api_key): (int(api.min_version), int(api.max_version))
            for api in answer.api_keys
        }
        if self._security.protocol.startswith("SASL_"):
            self._authenticate(deadline)

    def _tls(self, sock: socket.socket, host: str) -> socket.socket:
        security = self._security
        context = ssl.create_default_context(cafile=security.ssl_cafile)
        if security.ssl_certfile is not None:
            context.load_cert_chain(security.ssl_certfile, security.ssl_keyfile)
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except (ssl.SSLError, OSError) as exc:
            raise CoordinatorUnavailableError(f"TLS with {host}: {exc}") from None

    def _authenticate(self, deadline: float) -> None:
        from aiokafka.conn import SaslPlainAuthenticator, ScramAuthenticator

        security = self._security
        mechanism = security.sasl_mechanism or "PLAIN"
        if security.sasl_password is None:
            raise AuthenticationError(
                f"no SASL password: set {PASSWORD_ENV} or {PASSWORD_FILE_ENV} in this "
                "process (see workgroup.fence)"
            )
        answer = self._roundtrip(
            SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, deadline
        )
        if error_code(answer.error_code) is not ErrorCode.NONE:
            raise AuthenticationError(
                f"the coordinator does not offer SASL {mechanism} "
                f"(it offers {', '.join(answer.mechanisms) or 'none'})"
            )
        options = {
            "loop": None,
            "sasl_plain_username": security.sasl_username,
            "sasl_plain_password": security.sasl_password,
        }
        authenticator: Any = (
            SaslPlainAuthenticator(**options)
            if mechanism == "PLAIN"
            else ScramAuthenticator(**options, sasl_mechanism=mechanism)
        )
        steps = authenticator._authenticator
        try:
            token, _ = next(steps)
            while True:
                reply = self._roundtrip(
                    SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse, deadline
                )
                if error_code(reply.error_code) is not ErrorCode.NONE:
                    raise AuthenticationError(
                        f"the coordinator refused the credentials of "
                        f"{security.sasl_username!r}: {reply.error_message or 'no reason'}"
                    )
                token, _ = steps.send(bytes(reply.auth_bytes))
        except StopIteration:
            return
        except (ValueError, AssertionError) as exc:
            raise AuthenticationError(f"SASL {mechanism}: {exc}") from None

    # --- framing ---------------------------------------------------------------------

    def _roundtrip(self, entity: Any, response_type: Any, deadline: float) -> Any:
        sock, address = self._sock, self._address
        assert sock is not None
        assert address is not None
        self._correlation += 1
        header = entity.__header_schema__(
            request_api_key=i16(int(entity.__api_key__)),
            request_api_version=i16(int(entity.__version__)),
            correlation_id=i32(self._correlation),
            client_id=self._client_id,
        )
        body = _write(header) + _write(entity)
        what = f"{type(entity).__name__} v{int(entity.__version__)} to {address[0]}:{address[1]}"
        try:
            sock.settimeout(_left(deadline))
            sock.sendall(_SIZE.pack(len(body)) + body)
            (size,) = _SIZE.unpack(self._read(sock, _SIZE.size, deadline))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise ProtocolError(f"{what}: answer of {size} bytes")
            payload = self._read(sock, size, deadline)
        except (TimeoutError, OSError) as exc:
            self.close()
            why = "timed out" if isinstance(exc, TimeoutError) else str(exc) or "closed"
            raise CoordinatorUnavailableError(f"{what}: {why}") from None
        except BaseException:
            self.close()
            raise
        header_type = response_type.__header_schema__
        answer_header, used = entity_reader(header_type)(payload, 0)
        if int(answer_header.correlation_id) != self._correlation:
            self.close()
            raise ProtocolError(f"{what}: answer to another request")
        try:
            answer, _ = entity_reader(response_type)(payload, used)
        except Exception as exc:
            self.close()
            raise ProtocolError(f"{what}: malformed answer: {exc}") from None
        return answer

    def _read(self, sock: socket.socket, size: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while size:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(min(size, 1 << 20))
            if not chunk:
                raise OSError("connection closed by the coordinator")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


def _left(deadline: float) -> float:
    left = deadline - SYSTEM_CLOCK.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _write(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


__all__ = ["BlockingCoordinator"]
