"""Finding the group coordinator: when to ask, how often, and when to give up.

As Kafka's client: at most one lookup in flight; a lookup that failed with a
retriable error is asked again after the member's back-off (the only retry
policy, the driver does not retry on its own); ``connect_timeout_ms`` bounds the
search for the *first* coordinator (later outages follow the session rules).
Sans-I/O: times are milliseconds of the driver's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable

from workgroup.errors import WorkgroupError
from workgroup.member.errors import CoordinatorUnavailableError


class CoordinatorLookup:
    """The FindCoordinator bookkeeping of one member."""

    def __init__(self, connect_timeout_ms: int | None, backoff: Callable[[int], int]) -> None:
        self._connect_timeout_ms = connect_timeout_ms
        self._backoff = backoff
        #: A coordinator is known (found, and not lost since).
        self.known = False
        #: When the next lookup is due (``None``: none scheduled).
        self.next_at: int | None = None
        self.in_flight = False
        #: Failed lookups in a row (the back-off grows with them).
        self.failures = 0
        self._started_at: int | None = None
        self._ever_found = False
        self._attempts = 0
        self._last_error: WorkgroupError | None = None

    def start(self, now: int) -> None:
        """The member started: the connect deadline counts from now."""
        self._started_at = now

    def lost(self, now: int, *, immediately: bool) -> None:
        """The coordinator is unknown: look it up now or after a back-off."""
        self.known = False
        if not self.in_flight:
            self.next_at = now if immediately else now + self._backoff(self.failures + 1)

    def take_due(self, now: int) -> bool:
        """True (and the lookup counts as sent) when one is due and none is in flight."""
        if self.in_flight or self.next_at is None or now < self.next_at:
            return False
        self.in_flight = True
        self.next_at = None
        self._attempts += 1
        return True

    def found(self) -> None:
        self.in_flight = False
        self.failures = 0
        self.known = True
        self._ever_found = True

    def failed(self, now: int, error: WorkgroupError) -> int | None:
        """Record a failed lookup; when ``error`` is retriable, schedule the next
        one and return how long until then (``None``: not retriable)."""
        self.in_flight = False
        self._last_error = error
        if not error.retriable:
            return None
        self.failures += 1
        self.next_at = now + self._backoff(self.failures)
        return self.next_at - now

    def connect_deadline(self) -> int | None:
        """When to give up finding the first coordinator (``None``: never)."""
        if self._connect_timeout_ms is None or self._started_at is None or self._ever_found:
            return None
        return self._started_at + self._connect_timeout_ms

    def timeout_error(self) -> CoordinatorUnavailableError:
        """The error of a search that reached its connect deadline."""
        last = str(self._last_error) if self._last_error else "no lookup finished"
        attempts = self._attempts
        return CoordinatorUnavailableError(
            f"no coordinator reached within {self._connect_timeout_ms} ms "
            f"({attempts} attempt{'' if attempts == 1 else 's'}; last: {last})"
        )


__all__ = ["CoordinatorLookup"]
