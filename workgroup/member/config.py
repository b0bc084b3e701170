"""A member's settings (:class:`MemberConfig`), checked when they are made.

Rules:

* :class:`MemberConfig`'s fields are the one declaration of a member's
  settings; ``GroupMember`` takes them as keyword arguments
  (:class:`MemberSettings`, their static types, which a test keeps equal to the
  fields) and builds its config with :func:`member_config`;
* an unknown keyword is a :class:`TypeError` naming the closest setting, as a
  misspelt keyword argument of any function would be.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TypedDict

from workgroup.assignors.balance import DEFAULT_MAX_MOVES, DEFAULT_TOLERANCE
from workgroup.errors import ConfigError
from workgroup.member.keyspace import KeyspaceConfig
from workgroup.member.load_balancing import DEFAULT_BALANCE_INTERVAL_MS, BalanceSettings
from workgroup.protocol.protocol import DEFAULT_PROTOCOL_TYPE, Protocol

#: Warm-ups running in a group at once, by default: a few planned moves at a
#: time keep most of the group's work where it is while they prepare.
DEFAULT_MAX_WARMUPS = 4

#: Time between a request and its response that the coordinator may hold a JoinGroup
#: beyond the rebalance timeout (Kafka's client adds 5 s too).
JOIN_TIMEOUT_MARGIN_MS = 5_000
#: The default session margin: this share of the session, or at least
#: ``MIN_SESSION_MARGIN_MS`` where two heartbeat intervals of session remain.
SESSION_MARGIN_SHARE = 0.1
MIN_SESSION_MARGIN_MS = 500
#: The default request timeout is the session timeout, within these bounds.
MIN_REQUEST_TIMEOUT_MS = 1_000
MAX_REQUEST_TIMEOUT_MS = 30_000


def max_session_margin_ms(
    *, session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int
) -> int:
    """The largest session margin that leaves two heartbeat intervals of the session
    and of the rebalance timeout (:class:`MemberConfig`, rule 1)."""
    shortest = min(session_timeout_ms, rebalance_timeout_ms)
    return max(0, shortest - 2 * heartbeat_interval_ms)


def default_session_margin_ms(
    *, session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int
) -> int:
    """A tenth of the session or 500 ms, whichever is larger, within the largest
    margin allowed (:class:`MemberConfig`, rule 1)."""
    share = int(session_timeout_ms * SESSION_MARGIN_SHARE)
    largest = max_session_margin_ms(
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
    )
    return min(max(share, MIN_SESSION_MARGIN_MS), largest)


def check_session_margin(
    margin_ms: int,
    *,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    heartbeat_interval_ms: int,
) -> None:
    """:class:`ConfigError` unless ``margin_ms`` is allowed (:class:`MemberConfig`, rule 1)."""
    if margin_ms < 0:
        raise ConfigError(f"session margin must be >= 0, got {margin_ms} ms")
    largest = max_session_margin_ms(
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
    )
    if margin_ms > largest:
        raise ConfigError(
            f"session margin ({margin_ms} ms) must leave two heartbeat intervals "
            f"(2 x {heartbeat_interval_ms} ms) of the session ({session_timeout_ms} ms) "
            f"and of the rebalance timeout ({rebalance_timeout_ms} ms): at most {largest} ms"
        )


def default_request_timeout_ms(session_timeout_ms: int) -> int:
    """The session timeout, between 1 s and 30 s (:class:`MemberConfig`, rule 2)."""
    return min(max(session_timeout_ms, MIN_REQUEST_TIMEOUT_MS), MAX_REQUEST_TIMEOUT_MS)


@dataclass(frozen=True)
class MemberConfig:
    """What one member asks of its group: the group, its protocols (most preferred
    first), static membership, the timeouts it joins with, its retry back-off, and
    what it tells the leader about itself (kinds, rack, capacity, tags).

    Rules:

    1. The session margin: the member reports its resources lost this long
       before its session (or, with a JoinGroup/SyncGroup in flight, the
       rebalance timeout) can end on the coordinator, so that its handlers stop
       before anyone else's start even when its clock, its event loop or a
       thread handler runs a little late.  It must leave at least two heartbeat
       intervals of the session and of the rebalance timeout, so that in normal
       operation a heartbeat (and one retry) proves the session first.
       Default (``None``): a tenth of the session or 500 ms, whichever is
       larger, reduced to what leaves those two intervals.
    2. The request timeout bounds the coordinator lookup, OffsetCommit and
       OffsetFetch; a connection that silently lost a request is given up
       after it.  Default (``None``): the session timeout, between 1 s and 30 s.
       Heartbeats time out after the session, JoinGroup and SyncGroup after the
       rebalance timeout plus ``JOIN_TIMEOUT_MARGIN_MS``.
    """

    group_id: str
    #: Most preferred first, all of one protocol type.
    protocols: Sequence[Protocol]
    #: Static membership (KIP-345): a stable id per process; ``None``: dynamic.
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    #: How long a rebalance may wait for this member to rejoin (revocations included).
    rebalance_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 3_000
    #: The first back-off after a failed lookup or request; it doubles per failure
    #: up to ``retry_backoff_max_ms``.
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    #: Give up (FATAL, :class:`CoordinatorUnavailableError`) if no coordinator was
    #: found this long after ``start``; ``None``: keep looking.  Later outages
    #: follow the session rules instead.
    connect_timeout_ms: int | None = None
    #: Kinds of resources this member takes; ``None``: every kind.
    kinds: Iterable[str] | None = None
    rack: str | None = None
    capacity: float = 1.0
    user_data: bytes = b""
    tags: Mapping[str, str] = field(default_factory=dict)
    #: As leader, how long a departed member's resources wait before they are
    #: handed to others (:mod:`workgroup.member.delay`); 0: at once.
    reassign_delay_ms: int = 0
    #: Lose resources this long before the session can end (rule 1); ``None``: default.
    session_margin_ms: int | None = None
    #: Time limit of a lookup, OffsetCommit and OffsetFetch (rule 2); ``None``: default.
    request_timeout_ms: int | None = None
    #: As leader, load balancing after the assignor (:mod:`workgroup.member.load_balancing`):
    #: at most ``max_moves`` moves (0: off) bring the busiest member within
    #: ``imbalance_tolerance`` of the mean load; while a round ends above it, a
    #: probing rebalance follows every ``balance_interval_ms``.
    imbalance_tolerance: float = DEFAULT_TOLERANCE
    max_moves: int = DEFAULT_MAX_MOVES
    balance_interval_ms: int = DEFAULT_BALANCE_INTERVAL_MS
    #: Warm resources up before taking them in planned moves (the machine's rule
    #: 14): the application handles ``on_warming`` and calls ``ready``.
    warm_up: bool = False
    #: As leader, the most warm-ups running in the group at once (0: plain moves).
    max_warmups: int = DEFAULT_MAX_WARMUPS
    #: The keyspace the group serves (:mod:`workgroup.member.keyspace`): its slices
    #: are the resources, and the keyspace's planner decides each round.
    keyspace: KeyspaceConfig | None = None

    @property
    def balance(self) -> BalanceSettings:
        """The three balancing settings together (validated in ``__post_init__``)."""
        return BalanceSettings(self.imbalance_tolerance, self.max_moves, self.balance_interval_ms)

    def __post_init__(self) -> None:
        # Frozen copies of what the caller may change (or read once) afterwards.
        object.__setattr__(self, "protocols", tuple(self.protocols))
        if self.kinds is not None:
            object.__setattr__(self, "kinds", tuple(self.kinds))
        object.__setattr__(self, "tags", dict(self.tags or {}))
        if not self.group_id:
            raise ConfigError("group_id must not be empty")
        self.balance  # noqa: B018  (its checks: a bad tolerance, max_moves or interval)
        if not self.protocols:
            raise ConfigError("a member needs at least one protocol")
        names = [p.wire_name for p in self.protocols]
        if len(set(names)) != len(names):
            raise ConfigError(f"protocol names must be unique, got {names}")
        types = {p.type for p in self.protocols}
        if len(types) != 1:
            raise ConfigError(f"all protocols must share one protocol type, got {sorted(types)}")
        if self.instance_id == "":
            raise ConfigError("instance_id must be None or a non-empty string")
        if self.heartbeat_interval_ms <= 0 or self.session_timeout_ms <= 0:
            raise ConfigError("session timeout and heartbeat interval must be > 0")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat interval ({self.heartbeat_interval_ms} ms) must be lower than the "
                f"session timeout ({self.session_timeout_ms} ms)"
            )
        if self.rebalance_timeout_ms <= 0:
            raise ConfigError("rebalance timeout must be > 0")
        if self.capacity <= 0:
            raise ConfigError("capacity must be > 0")
        if isinstance(self.max_warmups, bool) or self.max_warmups < 0:
            raise ConfigError(f"max_warmups must be an integer >= 0, got {self.max_warmups!r}")
        if self.reassign_delay_ms < 0:
            raise ConfigError(f"reassign delay must be >= 0, got {self.reassign_delay_ms} ms")
        if self.connect_timeout_ms is not None and self.connect_timeout_ms <= 0:
            raise ConfigError(
                f"connect timeout must be > 0 or None, got {self.connect_timeout_ms} ms"
            )
        if self.request_timeout_ms is not None and self.request_timeout_ms <= 0:
            raise ConfigError(
                f"request timeout must be > 0 or None, got {self.request_timeout_ms} ms"
            )
        if self.session_margin_ms is not None:
            check_session_margin(
                self.session_margin_ms,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
            )

    @property
    def protocol_type(self) -> str:
        return self.protocols[0].type if self.protocols else DEFAULT_PROTOCOL_TYPE

    @property
    def effective_session_margin_ms(self) -> int:
        """The session margin in force (rule 1)."""
        if self.session_margin_ms is not None:
            return self.session_margin_ms
        return default_session_margin_ms(
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
        )

    @property
    def effective_request_timeout_ms(self) -> int:
        """The request timeout in force (rule 2)."""
        if self.request_timeout_ms is not None:
            return self.request_timeout_ms
        return default_request_timeout_ms(self.session_timeout_ms)

    @property
    def join_timeout_ms(self) -> int:
        """A JoinGroup may be held for the whole rebalance timeout."""
        return self.rebalance_timeout_ms + JOIN_TIMEOUT_MARGIN_MS


class MemberSettings(TypedDict, total=False):
    """:class:`MemberConfig`'s fields but ``group_id`` and ``protocols``, for the
    static types of ``GroupMember(**settings)`` (documented on the fields)."""

    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    connect_timeout_ms: int | None
    kinds: Iterable[str] | None
    rack: str | None
    capacity: float
    user_data: bytes
    tags: Mapping[str, str]
    reassign_delay_ms: int
    session_margin_ms: int | None
    request_timeout_ms: int | None
    imbalance_tolerance: float
    max_moves: int
    balance_interval_ms: int
    warm_up: bool
    max_warmups: int
    keyspace: KeyspaceConfig | None


def member_config(
    group_id: str, protocols: Sequence[Protocol], settings: MemberSettings, caller: str
) -> MemberConfig:
    """The :class:`MemberConfig` of ``caller``'s arguments (:class:`TypeError` for an
    unknown keyword, :class:`ConfigError` for a setting that cannot work)."""
    known = [f.name for f in fields(MemberConfig) if f.name not in ("group_id", "protocols")]
    for name in settings:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{caller} got an unexpected keyword argument {name!r}{hint}")
    return MemberConfig(group_id, protocols, **settings)


__all__ = [
    "DEFAULT_MAX_WARMUPS",
    "JOIN_TIMEOUT_MARGIN_MS",
    "MAX_REQUEST_TIMEOUT_MS",
    "MIN_REQUEST_TIMEOUT_MS",
    "MIN_SESSION_MARGIN_MS",
    "SESSION_MARGIN_SHARE",
    "MemberConfig",
    "MemberSettings",
    "check_session_margin",
    "default_request_timeout_ms",
    "default_session_margin_ms",
    "max_session_margin_ms",
    "member_config",
]
