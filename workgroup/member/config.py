"""A member's settings (:class:`MemberConfig`), checked when they are made."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from workgroup.errors import ConfigError
from workgroup.protocol.protocol import DEFAULT_PROTOCOL_TYPE, Protocol

#: Time between a request and its response that the coordinator may hold a JoinGroup
#: beyond the rebalance timeout (Kafka's client adds 5 s too).
JOIN_TIMEOUT_MARGIN_MS = 5_000


@dataclass(frozen=True)
class MemberConfig:
    """What one member asks of its group: the group, its protocols (most preferred
    first), static membership, the timeouts it joins with, its retry back-off, and
    what it tells the leader about itself (kinds, rack, capacity, tags)."""

    group_id: str
    protocols: Sequence[Protocol]
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 3_000
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

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ConfigError("group_id must not be empty")
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
        if self.reassign_delay_ms < 0:
            raise ConfigError(f"reassign delay must be >= 0, got {self.reassign_delay_ms} ms")
        if self.connect_timeout_ms is not None and self.connect_timeout_ms <= 0:
            raise ConfigError(
                f"connect timeout must be > 0 or None, got {self.connect_timeout_ms} ms"
            )

    @property
    def protocol_type(self) -> str:
        return self.protocols[0].type if self.protocols else DEFAULT_PROTOCOL_TYPE

    @property
    def join_timeout_ms(self) -> int:
        """A JoinGroup may be held for the whole rebalance timeout."""
        return self.rebalance_timeout_ms + JOIN_TIMEOUT_MARGIN_MS


__all__ = ["JOIN_TIMEOUT_MARGIN_MS", "MemberConfig"]
