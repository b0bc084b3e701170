"""SASL authentication of one coordinator connection (sans-I/O).

:class:`Authenticator` is the server side of Kafka's SASL exchange on one
connection: it takes the SaslHandshake and SaslAuthenticate requests and
returns what to answer; the driver (server.py) carries the answer, the delay
and the close out.  Mechanisms: PLAIN (RFC 4616), SCRAM-SHA-256 and
SCRAM-SHA-512 (RFC 5802, RFC 7677), checked against SCRAM verifiers
(scram.py), so the coordinator never holds a password.

Rules (Kafka's ``SaslServerAuthenticator`` with handshake v1; v0's raw
tokens without Kafka headers, used by clients older than Kafka 1.0, are not
spoken):

* A connection starts ``AWAITING_HANDSHAKE``.  Until it is ``AUTHENTICATED``
  only ApiVersions, SaslHandshake and SaslAuthenticate are answered; any other
  request closes the connection (Kafka: IllegalSaslState).
* A SaslHandshake naming an enabled mechanism moves to ``AWAITING_TOKEN``; one
  naming another mechanism is answered UNSUPPORTED_SASL_MECHANISM with the
  enabled list and the connection is closed.  A second handshake, or a
  SaslAuthenticate before the handshake, is answered ILLEGAL_SASL_STATE and
  closes.
* PLAIN: one token ``authzid NUL user NUL password``; the password is checked
  against one of the user's SCRAM verifiers.  An authorization id other than
  the user is refused, as Kafka does.
* SCRAM: client-first (``n,,n=user,r=nonce``), server-first (``r=…,s=salt,i=n``),
  client-final (``c=biws,r=…,p=proof``), server-final (``v=signature``).
  Channel binding, the reserved ``m=`` attribute and delegation tokens
  (``tokenauth``) are refused.  An unknown user gets a server-first message
  like a known one (a salt derived from a per-process secret and the name), so
  a client cannot tell unknown users from wrong passwords.
* Every failure is answered SASL_AUTHENTICATION_FAILED with a message naming
  the mechanism and never the reason a guesser could use; the driver answers
  after ``failed_authentication_delay_ms`` (Kafka's
  ``connection.failed.authentication.delay.ms``) and closes.  The reason goes to
  the coordinator's log, never a token, salt, proof or password.
* The principal of an authenticated connection is ``User:<name>``, Kafka's form.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from workgroup.coordinator.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    Credentials,
    ScramCredential,
    ScramMechanism,
    digest,
    hmac_digest,
)
from workgroup.errors import ConfigError, ErrorCode

SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_MECHANISMS: Final[tuple[SaslMechanism, ...]] = get_args(SaslMechanism)

#: Kafka's ``connection.failed.authentication.delay.ms`` default.
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS: Final = 100
#: Longest SASL token accepted (a SCRAM or PLAIN message is well under 1 KiB).
MAX_TOKEN_BYTES: Final = 16 * 1024


@dataclass(frozen=True)
class SaslSettings:
    """SASL on the embedded coordinator: who may connect, and how."""

    credentials: Credentials
    mechanisms: tuple[SaslMechanism, ...] = SASL_MECHANISMS
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    #: Secret from which unknown users' fake salts are derived (per process).
    fake_salt_key: bytes = field(default_factory=lambda: os.urandom(32), repr=False)

    def __post_init__(self) -> None:
        if not self.mechanisms:
            raise ConfigError("SASL needs at least one mechanism")
        for mechanism in self.mechanisms:
            if mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    f"unknown SASL mechanism {mechanism!r} ({', '.join(SASL_MECHANISMS)})"
                )
        if self.failed_authentication_delay_ms < 0:
            raise ConfigError("failed authentication delay must be >= 0 ms")


class AuthState(enum.Enum):
    #: Nothing yet: a SaslHandshake must come first (ApiVersions may precede it).
    AWAITING_HANDSHAKE = "awaiting_handshake"
    #: A mechanism is chosen; its first SaslAuthenticate token is due.
    AWAITING_TOKEN = "awaiting_token"
    #: SCRAM only: server-first sent, client-final due.
    AWAITING_FINAL = "awaiting_final"
    #: Done: the connection speaks for ``principal``.
    AUTHENTICATED = "authenticated"
    #: A failure was answered; the connection is to be closed.
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HandshakeAnswer:
    error: ErrorCode
    mechanisms: tuple[str, ...]

    @property
    def close(self) -> bool:
        """Close the connection once the answer is written (every refusal)."""
        return self.error is not ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class AuthenticateAnswer:
    error: ErrorCode
    token: bytes = b""
    #: For the client (SaslAuthenticate's error message); reveals nothing to a guesser.
    message: str | None = None
    #: For the coordinator's log only.
    reason: str | None = None

    @property
    def close(self) -> bool:
        """Close the connection once the answer is written (every failure, after the delay)."""
        return self.error is not ErrorCode.NONE


class Authenticator:
    """The SASL state of one connection."""

    def __init__(self, settings: SaslSettings, *, nonce: Callable[[], str] | None = None) -> None:
        self._settings = settings
        self._nonce = nonce or (lambda: secrets.token_urlsafe(24))
        self.state = AuthState.AWAITING_HANDSHAKE
        self.mechanism: SaslMechanism | None = None
        #: ``User:<name>`` once authenticated.
        self.principal: str | None = None
        # SCRAM exchange state between the two client messages.
        self._user = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce_value = ""
        self._gs2_header = ""

    @property
    def authenticated(self) -> bool:
        return self.state is AuthState.AUTHENTICATED

    # --- SaslHandshake ---------------------------------------------------------

    def handshake(self, mechanism: str) -> HandshakeAnswer:
        enabled = self._settings.mechanisms
        if self.state is not AuthState.AWAITING_HANDSHAKE:
            self.state = AuthState.FAILED
            return HandshakeAnswer(ErrorCode.ILLEGAL_SASL_STATE, enabled)
        if mechanism not in enabled:
            self.state = AuthState.FAILED
            return HandshakeAnswer(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled)
        self.mechanism = mechanism
        self.state = AuthState.AWAITING_TOKEN
        return HandshakeAnswer(ErrorCode.NONE, enabled)

    # --- SaslAuthenticate -------------------------------------------------------

    def authenticate(self, token: bytes) -> AuthenticateAnswer:
        if self.state not in (AuthState.AWAITING_TOKEN, AuthState.AWAITING_FINAL):
            self.state = AuthState.FAILED
            return AuthenticateAnswer(
                ErrorCode.ILLEGAL_SASL_STATE,
                message=f"SaslAuthenticate not expected in state {self.state.value}",
                reason="SaslAuthenticate out of order",
            )
        if len(token) > MAX_TOKEN_BYTES:
            return self._fail(f"token of {len(token)} bytes")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail("token is not UTF-8")
        if self.mechanism == "PLAIN":
            return self._plain(text)
        if self.state is AuthState.AWAITING_TOKEN:
            return self._scram_first(text)
        return self._scram_final(text)

    def _fail(self, reason: str) -> AuthenticateAnswer:
        self.state = AuthState.FAILED
        return AuthenticateAnswer(
            ErrorCode.SASL_AUTHENTICATION_FAILED,
            message=(
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.mechanism}"
            ),
            reason=reason,
        )

    def _succeed(self, user: str, token: bytes = b"") -> AuthenticateAnswer:
        self.state = AuthState.AUTHENTICATED
        self.principal = f"User:{user}"
        self._credential = None
        return AuthenticateAnswer(ErrorCode.NONE, token=token)

    # --- PLAIN -------------------------------------------------------------------

    def _plain(self, text: str) -> AuthenticateAnswer:
        parts = text.split("\x00")
        if len(parts) != 3:
            return self._fail("PLAIN token is not authzid NUL user NUL password")
        authzid, user, password = parts
        if not user or not password:
            return self._fail("PLAIN token without user or password")
        if authzid and authzid != user:
            return self._fail(f"authorization id {authzid!r} is not the user {user!r}")
        found = self._settings.credentials.any_credential(user)
        if found is None:
            return self._fail(f"unknown user {user!r}")
        mechanism, credential = found
        if not credential.matches_password(mechanism, password):
            return self._fail(f"wrong password for user {user!r}")
        return self._succeed(user)

    # --- SCRAM -------------------------------------------------------------------

    @property
    def _scram(self) -> ScramMechanism:
        assert self.mechanism in SCRAM_MECHANISMS
        return self.mechanism

    def _scram_first(self, text: str) -> AuthenticateAnswer:
        # gs2-header: cbind flag, authzid, then the bare message.
        pieces = text.split(",", 2)
        if len(pieces) != 3:
            return self._fail("SCRAM client-first message is malformed")
        cbind, authzid, bare = pieces
        if cbind not in ("n", "y"):
            return self._fail("SCRAM channel binding is not supported")
        attributes = _attributes(bare)
        if attributes is None or bare.startswith("m="):
            return self._fail("SCRAM client-first message is malformed")
        user = _sasl_name(attributes.get("n", ""))
        client_nonce = attributes.get("r", "")
        if not user or not client_nonce:
            return self._fail("SCRAM client-first message without user or nonce")
        if authzid and _sasl_name(authzid.removeprefix("a=")) != user:
            return self._fail(f"authorization id {authzid!r} is not the user {user!r}")
        if attributes.get("tokenauth", "false").lower() == "true":
            return self._fail("delegation tokens are not supported")
        credential = self._settings.credentials.lookup(user, self._scram)
        salt, iterations = (
            (credential.salt, credential.iterations)
            if credential is not None
            else (self._fake_salt(user), DEFAULT_ITERATIONS)
        )
        self._user = user
        self._credential = credential
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce_value = client_nonce + self._nonce()
        self._server_first = (
            f"r={self._nonce_value},s={base64.b64encode(salt).decode()},i={iterations}"
        )
        self.state = AuthState.AWAITING_FINAL
        return AuthenticateAnswer(ErrorCode.NONE, token=self._server_first.encode())

    def _scram_final(self, text: str) -> AuthenticateAnswer:
        without_proof, _, proof_attr = text.rpartition(",")
        attributes = _attributes(without_proof)
        if attributes is None or not proof_attr.startswith("p="):
            return self._fail("SCRAM client-final message is malformed")
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            return self._fail("SCRAM channel binding does not match the client-first message")
        if attributes.get("r") != self._nonce_value:
            return self._fail("SCRAM nonce does not match")
        try:
            proof = base64.b64decode(proof_attr[2:], validate=True)
        except (binascii.Error, ValueError):
            return self._fail("SCRAM proof is not base64")
        credential = self._credential
        if credential is None:
            return self._fail(f"unknown user {self._user!r}")
        mechanism = self._scram
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_digest(mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            return self._fail("SCRAM proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(digest(mechanism, client_key), credential.stored_key):
            return self._fail(f"wrong password for user {self._user!r}")
        server_signature = hmac_digest(mechanism, credential.server_key, auth_message)
        return self._succeed(self._user, b"v=" + base64.b64encode(server_signature))

    def _fake_salt(self, user: str) -> bytes:
        # Stable per user for this process: asking twice gives the same answer.
        return hmac.digest(self._settings.fake_salt_key, user.encode(), "sha256")


def _attributes(message: str) -> dict[str, str] | None:
    """``a=1,b=2`` as a dict; ``None`` if an attribute is malformed."""
    result: dict[str, str] = {}
    for item in message.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name:
            return None
        result.setdefault(name, value)
    return result


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma and ``=3D`` an equals sign."""
    if "=" not in name:
        return name
    out: list[str] = []
    i = 0
    while i < len(name):
        if name[i] == "=":
            escape = name[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                return ""  # malformed: treated as no user
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


__all__ = [
    "SASL_MECHANISMS",
    "AuthState",
    "AuthenticateAnswer",
    "Authenticator",
    "HandshakeAnswer",
    "SaslMechanism",
    "SaslSettings",
]
