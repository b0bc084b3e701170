"""Errors raised by workgroup, and the Kafka error codes they come from.

Every exception the library raises derives from :class:`WorkgroupError` and says
whether retrying the same operation can succeed (``retriable``).  Exceptions of
third-party libraries (aiokafka, kio, sqlite3) are translated at the boundary
where they occur; they never leak to users.

Rules:

1. What an error code means is written once, in :data:`ERROR_MEANINGS`: whether
   it is retriable, what a group member does about it (:class:`MemberAction`,
   the member machine's rule 3) and what a lease commit does about it
   (:class:`LeaseAction`, the lease's rule 3), and what an answer says about
   the member that sent it (:class:`MemberCheck`, the member machine's rules 9
   and 11).  ``ErrorCode.retriable``, the member machine and the lease read it;
   none keeps a set of codes of its own: the sets below (:func:`codes_where`
   derives them) are the only ones.
2. Every :class:`ErrorCode` has a row (a unit test checks it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType


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
    def meaning(self) -> CodeMeaning:
        """What the code means (its row of :data:`ERROR_MEANINGS`)."""
        return ERROR_MEANINGS[self]

    @property
    def retriable(self) -> bool:
        return ERROR_MEANINGS[self].retriable


class MemberAction(enum.Enum):
    """What a group member does when a group request is answered with a code."""

    #: Success.
    NONE = "none"
    #: The coordinator moved or is not ready: find it again (a STABLE assignment is kept).
    FIND_COORDINATOR = "find_coordinator"
    #: Rejoin at once (JoinGroup: REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED).
    REJOIN = "rejoin"
    #: The generation is gone: resources lost, generation reset (member id kept), rejoin.
    RESET_GENERATION = "reset_generation"
    #: The membership is gone: resources lost, member id and generation reset, rejoin.
    RESET_MEMBER = "reset_member"
    #: This member cannot go on as configured: FATAL (``MemberFatalError``).
    FATAL = "fatal"
    #: Anything else: try again after the exponential back-off.
    BACK_OFF = "back_off"


#: The member actions that end a membership, the most severe first: of several
#: codes in one answer, the member acts on the first (the member's rules 3 and 11).
MEMBERSHIP_ENDINGS = (MemberAction.FATAL, MemberAction.RESET_MEMBER, MemberAction.RESET_GENERATION)


class MemberCheck(enum.Enum):
    """What an answer to a member's request says about the member itself."""

    #: The coordinator checked the member (id, generation, instance id) and
    #: knows it: the session was alive when the request was sent.
    PASSED = "passed"
    #: The coordinator does not know the member as it thinks it is.
    REFUSED = "refused"
    #: Nothing (the coordinator moved, a topic error): the heartbeats find out.
    UNSAID = "unsaid"


class LeaseAction(enum.Enum):
    """What a lease does when the coordinator answers one of its commits with a code."""

    #: Committed.
    NONE = "none"
    #: The member itself is gone: the lease is fenced and never commits again.
    FENCE = "fence"
    #: A rebalance is under way: tried again (with back-off) while the lease may
    #: commit, up to its commit timeout; it may still be held once the round ends.
    WAIT_FOR_REBALANCE = "wait_for_rebalance"
    #: Tried again like :attr:`WAIT_FOR_REBALANCE` if the code is retriable, else raised.
    RETRY_IF_RETRIABLE = "retry_if_retriable"


@dataclass(frozen=True, slots=True)
class CodeMeaning:
    """One row of :data:`ERROR_MEANINGS`."""

    #: The same request may succeed if sent again (after a back-off, a
    #: rediscovery or a rejoin): ``WorkgroupError.retriable``.
    retriable: bool
    member: MemberAction
    lease: LeaseAction = LeaseAction.RETRY_IF_RETRIABLE
    check: MemberCheck = MemberCheck.UNSAID

    @property
    def fatal(self) -> bool:
        """A member answered with it stops for good."""
        return self.member is MemberAction.FATAL

    @property
    def ends_membership(self) -> bool:
        """A member answered with it is no longer what it thinks it is."""
        return self.member in MEMBERSHIP_ENDINGS

    @property
    def ends_lease(self) -> bool:
        """A lease whose commit is answered with it ends (fenced)."""
        return self.lease is LeaseAction.FENCE


_C = ErrorCode
_M = MemberAction
_L = LeaseAction
_K = MemberCheck

#: Every error code's meaning (rule 1): retriable, the member's action, the lease's.
ERROR_MEANINGS: Mapping[ErrorCode, CodeMeaning] = MappingProxyType(
    {
        _C.UNKNOWN_SERVER_ERROR: CodeMeaning(False, _M.BACK_OFF),
        _C.NONE: CodeMeaning(False, _M.NONE, _L.NONE, _K.PASSED),
        _C.CORRUPT_MESSAGE: CodeMeaning(False, _M.BACK_OFF),
        _C.UNKNOWN_TOPIC_OR_PARTITION: CodeMeaning(True, _M.BACK_OFF),
        _C.INVALID_FETCH_SIZE: CodeMeaning(False, _M.BACK_OFF),
        _C.REQUEST_TIMED_OUT: CodeMeaning(True, _M.BACK_OFF),
        _C.OFFSET_METADATA_TOO_LARGE: CodeMeaning(False, _M.BACK_OFF, check=_K.PASSED),
        _C.COORDINATOR_LOAD_IN_PROGRESS: CodeMeaning(True, _M.FIND_COORDINATOR),
        _C.COORDINATOR_NOT_AVAILABLE: CodeMeaning(True, _M.FIND_COORDINATOR),
        _C.NOT_COORDINATOR: CodeMeaning(True, _M.FIND_COORDINATOR),
        _C.ILLEGAL_GENERATION: CodeMeaning(
            False, _M.RESET_GENERATION, _L.WAIT_FOR_REBALANCE, _K.REFUSED
        ),
        _C.INCONSISTENT_GROUP_PROTOCOL: CodeMeaning(False, _M.FATAL),
        _C.INVALID_GROUP_ID: CodeMeaning(False, _M.FATAL),
        _C.UNKNOWN_MEMBER_ID: CodeMeaning(False, _M.RESET_MEMBER, _L.FENCE, _K.REFUSED),
        _C.INVALID_SESSION_TIMEOUT: CodeMeaning(False, _M.FATAL),
        _C.REBALANCE_IN_PROGRESS: CodeMeaning(True, _M.REJOIN, _L.WAIT_FOR_REBALANCE, _K.PASSED),
        _C.INVALID_COMMIT_OFFSET_SIZE: CodeMeaning(False, _M.BACK_OFF),
        _C.TOPIC_AUTHORIZATION_FAILED: CodeMeaning(False, _M.BACK_OFF),
        _C.GROUP_AUTHORIZATION_FAILED: CodeMeaning(False, _M.FATAL),
        _C.UNSUPPORTED_SASL_MECHANISM: CodeMeaning(False, _M.BACK_OFF),
        _C.ILLEGAL_SASL_STATE: CodeMeaning(False, _M.BACK_OFF),
        _C.INVALID_REQUEST: CodeMeaning(False, _M.FATAL),
        _C.UNSUPPORTED_VERSION: CodeMeaning(False, _M.FATAL),
        _C.SASL_AUTHENTICATION_FAILED: CodeMeaning(False, _M.BACK_OFF),
        _C.NON_EMPTY_GROUP: CodeMeaning(False, _M.BACK_OFF),
        _C.GROUP_ID_NOT_FOUND: CodeMeaning(False, _M.BACK_OFF, _L.FENCE),
        _C.MEMBER_ID_REQUIRED: CodeMeaning(False, _M.REJOIN),
        _C.GROUP_MAX_SIZE_REACHED: CodeMeaning(False, _M.FATAL),
        _C.FENCED_INSTANCE_ID: CodeMeaning(False, _M.FATAL, _L.FENCE, _K.REFUSED),
        _C.UNSTABLE_OFFSET_COMMIT: CodeMeaning(True, _M.BACK_OFF),
        _C.STALE_MEMBER_EPOCH: CodeMeaning(False, _M.BACK_OFF),
        _C.UNKNOWN_TOPIC_ID: CodeMeaning(False, _M.BACK_OFF),
    }
)


def codes_where(test: Callable[[CodeMeaning], bool]) -> frozenset[ErrorCode]:
    """The codes whose meaning passes ``test`` (e.g. ``lambda m: m.fatal``)."""
    return frozenset(code for code, meaning in ERROR_MEANINGS.items() if test(meaning))


#: The codes that end a group member for good (``MemberAction.FATAL``: the member
#: machine's rule 3); each gets a :class:`~workgroup.member.errors.MemberFatalError`.
MEMBER_FATAL_CODES = codes_where(lambda meaning: meaning.fatal)
#: The coordinator moved or is not ready: ask where it is again
#: (``MemberAction.FIND_COORDINATOR``).
COORDINATOR_MOVED_CODES = codes_where(
    lambda meaning: meaning.member is MemberAction.FIND_COORDINATOR
)
#: The codes whose request may succeed if sent again (``CodeMeaning.retriable``).
RETRIABLE_CODES = codes_where(lambda meaning: meaning.retriable)
#: Answers to a lease's commit that mean the member itself is gone: the lease can
#: never be used again (``LeaseAction.FENCE``).
LEASE_FENCING_CODES = codes_where(lambda meaning: meaning.lease is LeaseAction.FENCE)
#: Answers to a lease's commit during a rebalance: the lease may still be held once
#: it completes (``LeaseAction.WAIT_FOR_REBALANCE``).
LEASE_REBALANCING_CODES = codes_where(
    lambda meaning: meaning.lease is LeaseAction.WAIT_FOR_REBALANCE
)


class WorkgroupError(Exception):
    """Root of every error workgroup raises.

    ``retriable`` tells the caller whether the same operation may succeed if
    tried again (after a back-off, a rediscovery or a rejoin).
    """

    retriable: bool = False
    #: Exit status used when the error ends a CLI command.
    exit_code: int = 1
    #: What to try, when there is one thing to say: the CLI prints it as a
    #: ``hint:`` line below the error.
    hint: str | None = None

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
