"""SCRAM verifiers (RFC 5802, RFC 7677) and the file that stores them.

The coordinator never holds a password: a user's credential is, per SCRAM
mechanism, a random salt, an iteration count and two keys derived from the
password (``StoredKey = H(HMAC(Hi(password, salt, i), "Client Key"))`` and
``ServerKey = HMAC(Hi(password, salt, i), "Server Key")``), as Kafka stores
them in its ``kafka-configs --alter --add-config SCRAM-SHA-256=[...]``.  A
leaked file lets no one log in; it only allows an offline guessing attack
slowed by the iteration count.

The credentials file is TOML, written by ``workgroup credentials``::

    [users."alice"."SCRAM-SHA-256"]
    salt = "…base64…"
    iterations = 4096
    stored_key = "…base64…"
    server_key = "…base64…"

Passwords are UTF-8 bytes without SASLprep, as Kafka's and its clients'.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, get_args

from workgroup.errors import ConfigError

ScramMechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512"]
SCRAM_MECHANISMS: Final[tuple[ScramMechanism, ...]] = get_args(ScramMechanism)

#: Kafka's minimum (and ``kafka-configs``' default) iteration count.
MIN_ITERATIONS: Final = 4096
#: Above it verifying one PLAIN login would stall the coordinator for seconds.
MAX_ITERATIONS: Final = 1_000_000
DEFAULT_ITERATIONS: Final = 8192
_SALT_BYTES: Final = 32

_HASHES: Final[dict[str, str]] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def hash_name(mechanism: ScramMechanism) -> str:
    return _HASHES[mechanism]


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """``Hi(password, salt, i)``: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode(), salt, iterations)


def hmac_digest(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, hash_name(mechanism))


def digest(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(hash_name(mechanism), data).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of one password for one SCRAM mechanism."""

    salt: bytes = field(repr=False)
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)

    @classmethod
    def from_password(
        cls,
        mechanism: ScramMechanism,
        password: str,
        *,
        iterations: int = DEFAULT_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        check_iterations(iterations)
        salt = os.urandom(_SALT_BYTES) if salt is None else salt
        salted = salted_password(mechanism, password, salt, iterations)
        return cls(
            salt=salt,
            iterations=iterations,
            stored_key=digest(mechanism, hmac_digest(mechanism, salted, b"Client Key")),
            server_key=hmac_digest(mechanism, salted, b"Server Key"),
        )

    def matches_password(self, mechanism: ScramMechanism, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (constant time)."""
        salted = salted_password(mechanism, password, self.salt, self.iterations)
        stored = digest(mechanism, hmac_digest(mechanism, salted, b"Client Key"))
        return hmac.compare_digest(stored, self.stored_key)


def verifiers(
    password: str,
    *,
    mechanisms: tuple[ScramMechanism, ...] = SCRAM_MECHANISMS,
    iterations: int = DEFAULT_ITERATIONS,
) -> dict[ScramMechanism, ScramCredential]:
    """One user's credentials: a verifier of ``password`` for each mechanism."""
    return {
        mechanism: ScramCredential.from_password(mechanism, password, iterations=iterations)
        for mechanism in mechanisms
    }


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(
            f"SCRAM iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, "
            f"got {iterations}"
        )


@dataclass(frozen=True)
class Credentials:
    """Every user's SCRAM credentials, by user name and mechanism."""

    users: Mapping[str, Mapping[ScramMechanism, ScramCredential]] = field(default_factory=dict)

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def any_credential(self, user: str) -> tuple[ScramMechanism, ScramCredential] | None:
        """One of ``user``'s credentials (to check a PLAIN password against)."""
        for mechanism in SCRAM_MECHANISMS:
            credential = self.lookup(user, mechanism)
            if credential is not None:
                return mechanism, credential
        return None

    def with_user(
        self, user: str, credentials: Mapping[ScramMechanism, ScramCredential]
    ) -> Credentials:
        check_user_name(user)
        users = dict(self.users)
        users[user] = dict(credentials)
        return Credentials(users)

    def without_user(self, user: str) -> Credentials:
        users = dict(self.users)
        users.pop(user, None)
        return Credentials(users)

    # --- the file ----------------------------------------------------------------

    @classmethod
    def load(cls, path: Path) -> Credentials:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read credentials file {path}: {exc}") from exc
        return cls.parse(text, source=str(path))

    @classmethod
    def parse(cls, text: str, *, source: str = "<credentials>") -> Credentials:
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
        unknown = set(document) - {"users"}
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {sorted(unknown)} (expected [users.NAME])")
        users_table = document.get("users", {})
        if not isinstance(users_table, dict):
            raise ConfigError(f"{source}: 'users' must be a table of users")
        users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        for user, mechanisms in users_table.items():
            where = f"{source}: user {user!r}"
            try:
                check_user_name(user)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from exc
            if not isinstance(mechanisms, dict) or not mechanisms:
                raise ConfigError(f"{where}: needs one table per SCRAM mechanism")
            parsed: dict[ScramMechanism, ScramCredential] = {}
            for mechanism, values in mechanisms.items():
                if mechanism not in SCRAM_MECHANISMS:
                    raise ConfigError(
                        f"{where}: unknown mechanism {mechanism!r} ({', '.join(SCRAM_MECHANISMS)})"
                    )
                parsed[mechanism] = _parse_credential(values, f"{where} {mechanism}")
            users[user] = parsed
        return cls(users)

    def dumps(self) -> str:
        """The TOML text of these credentials (what :meth:`parse` reads)."""
        lines = [
            "# workgroup SASL credentials: SCRAM verifiers, never passwords.",
            "# Edit with `workgroup credentials add|remove|list`.",
        ]
        for user in sorted(self.users):
            for mechanism in SCRAM_MECHANISMS:
                credential = self.users[user].get(mechanism)
                if credential is None:
                    continue
                # A JSON string is a valid TOML basic string (same escapes).
                lines.append("")
                lines.append(f"[users.{json.dumps(user)}.{json.dumps(mechanism)}]")
                lines.append(f'salt = "{_b64(credential.salt)}"')
                lines.append(f"iterations = {credential.iterations}")
                lines.append(f'stored_key = "{_b64(credential.stored_key)}"')
                lines.append(f'server_key = "{_b64(credential.server_key)}"')
        return "\n".join(lines) + "\n"

    def save(self, path: Path) -> None:
        """Write atomically, readable by the owner only."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(self.dumps())
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise ConfigError(f"cannot write credentials file {path}: {exc}") from exc


def check_user_name(user: str) -> None:
    if not user or any(ord(c) < 0x20 or c == "\x7f" for c in user):
        raise ConfigError(f"a user name must be non-empty printable text, got {user!r}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _parse_credential(values: Any, where: str) -> ScramCredential:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: must be a table")
    expected = {"salt", "iterations", "stored_key", "server_key"}
    if set(values) != expected:
        missing, extra = expected - set(values), set(values) - expected
        raise ConfigError(
            f"{where}: "
            + "; ".join(
                part
                for part in (
                    f"missing {sorted(missing)}" if missing else "",
                    f"unknown {sorted(extra)}" if extra else "",
                )
                if part
            )
        )
    iterations = values["iterations"]
    if not isinstance(iterations, int) or isinstance(iterations, bool):
        raise ConfigError(f"{where}: iterations must be an integer")
    try:
        check_iterations(iterations)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    decoded: dict[str, bytes] = {}
    for key in ("salt", "stored_key", "server_key"):
        value = values[key]
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a base64 string")
        try:
            decoded[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ConfigError(f"{where}: {key} is not valid base64") from exc
        if not decoded[key]:
            raise ConfigError(f"{where}: {key} is empty")
    return ScramCredential(
        salt=decoded["salt"],
        iterations=iterations,
        stored_key=decoded["stored_key"],
        server_key=decoded["server_key"],
    )


__all__ = [
    "DEFAULT_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "Credentials",
    "ScramCredential",
    "ScramMechanism",
    "verifiers",
]
