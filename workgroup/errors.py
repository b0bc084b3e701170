"""Errors raised by workgroup, and the Kafka error codes they come from.

Every exception the library raises derives from :class:`WorkgroupError` and says
whether retrying the same operation can succeed (``retriable``).  Exceptions of
third-party libraries (aiokafka, kio, sqlite3) are translated at the boundary
where they occur; they never leak to users.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """The Kafka protocol error codes workgroup speaks (a subset of Kafka's)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    INVALID_REQUEST = 42
    UNSUPPORTED_VERSION = 35
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    STALE_MEMBER_EPOCH = 113
    UNKNOWN_TOPIC_ID = 100

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE_CODES


_RETRIABLE_CODES = frozenset(
    {
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


class WorkgroupError(Exception):
    """Root of every error workgroup raises.

    ``retriable`` tells the caller whether the same operation may succeed if
    tried again (after a back-off, a rediscovery or a rejoin).
    """

    retriable: bool = False
    #: Exit status used when the error ends a CLI command.
    exit_code: int = 1

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class ConfigError(WorkgroupError):
    """Configuration that cannot be used (unreadable file, bad value)."""

    exit_code = 2


class AuthenticationError(WorkgroupError):
    """The coordinator refused this client's credentials (SASL): trying again with
    the same ones cannot succeed."""

    retriable = False


class ProtocolError(WorkgroupError):
    """Bytes on the wire that do not follow the Kafka protocol."""


class UnsupportedVersionError(ProtocolError):
    """A request or metadata version this side does not implement."""


class MessageTooLargeError(ProtocolError):
    """A frame or metadata blob larger than the configured limit."""


class CoordinatorError(WorkgroupError):
    """An error code returned by a group coordinator."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = code
        super().__init__(
            message or f"coordinator returned {code.name} ({int(code)})", retriable=code.retriable
        )


class StoreError(WorkgroupError):
    """The coordinator's durable store cannot be read or written."""
