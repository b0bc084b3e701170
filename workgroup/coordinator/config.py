"""Settings of the embedded coordinator (defaults as Kafka's where Kafka has one)."""

from __future__ import annotations

from dataclasses import dataclass

from workgroup.errors import ConfigError

#: Kafka's default is 3 s, tuned for clusters where members start over minutes.
#: On one machine the members of a job start within a fraction of a second, so a
#: short delay still collects them into one first generation without making
#: every start-up wait three seconds.
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 100


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    #: Kafka's default (``Integer.MAX_VALUE``): no practical limit.
    group_max_size: int = 2**31 - 1
    max_request_bytes: int = 100 * 1024 * 1024
    #: Size limit of one committed offset's metadata string (Kafka: 4096).
    offset_metadata_max_bytes: int = 4096
    node_id: int = 0
    #: Kafka's ``max.connections``: connections beyond it are closed at once.
    max_connections: int = 2**31 - 1
    #: Kafka's ``connections.max.idle.ms``: a connection silent this long is closed.
    connections_max_idle_ms: int = 600_000
    #: Requests a second one connection may send (0: no limit; Kafka has request
    #: quotas instead, off by default).  Beyond it the connection's reading pauses.
    max_requests_per_second: float = 0.0
    #: Kafka's ``offsets.retention.minutes`` (7 days), in ms; -1: offsets never
    #: expire.  An Empty group's offsets go this long after it became Empty; a
    #: group that never had members (commits from outside) loses each offset this
    #: long after it was committed.  Checked every ``offsets_retention_check_interval_ms``.
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    #: Kafka's ``offsets.retention.check.interval.ms``.
    offsets_retention_check_interval_ms: int = 600_000
    #: ``HOST:PORT`` named in Metadata and FindCoordinator answers instead of the
    #: listening address (Kafka's ``advertised.listeners``): a proxy or a NAT in front.
    advertised_listener: str | None = None

    def advertised(self) -> tuple[str, int] | None:
        """The advertised ``(host, port)``, or ``None`` to name the listening address."""
        if self.advertised_listener is None:
            return None
        host, _, port = self.advertised_listener.rpartition(":")
        return host.strip("[]"), int(port)

    def __post_init__(self) -> None:
        if self.offsets_retention_ms < 1 and self.offsets_retention_ms != -1:
            raise ConfigError("offsets retention must be >= 1 ms, or -1 (never)")
        if self.offsets_retention_check_interval_ms < 1:
            raise ConfigError("offsets retention check interval must be >= 1 ms")
        if self.max_connections < 1:
            raise ConfigError("max connections must be >= 1")
        if self.connections_max_idle_ms < 1:
            raise ConfigError("connections max idle must be >= 1 ms")
        if self.max_requests_per_second < 0:
            raise ConfigError("max requests per second must be >= 0 (0: no limit)")
        if self.advertised_listener is not None:
            host, _, port = self.advertised_listener.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    f"advertised listener must be HOST:PORT, got {self.advertised_listener!r}"
                )
        if self.initial_rebalance_delay_ms < 0:
            raise ConfigError("initial rebalance delay must be >= 0 ms")
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ConfigError(
                "session timeouts must satisfy 0 < min <= max "
                f"(got min={self.min_session_timeout_ms}, max={self.max_session_timeout_ms})"
            )
        if self.group_max_size < 1:
            raise ConfigError("group max size must be >= 1")
        if self.max_request_bytes < 1024:
            raise ConfigError("max request bytes must be >= 1024")
