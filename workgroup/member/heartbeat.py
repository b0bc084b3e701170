"""Heartbeat and session timing of one member (after Kafka's client ``Heartbeat``).

Pure: every method takes ``now`` (ms of a monotonic clock) or nothing; the
member machine decides *whether* heartbeats may be sent, this class says *when*.

Rules:

1. Heartbeats are due every ``heartbeat_interval_ms`` after the last one was
   sent (or the member joined / got its assignment); a failed one is retried
   after the back-off; after a rediscovery the next one is due at once.  While
   *expedited* (the member knows a follow-up round is due: the rest of the group
   must notice the rebalance its revoking members start; or it drains with
   resources left, whose cut-overs come in rounds others start), every
   ``min(heartbeat_interval_ms, EXPEDITED_INTERVAL_MS)``.
2. Proof of life: an answer from the coordinator proves the session was alive
   when the request was sent.  A JoinGroup/SyncGroup the coordinator held
   proves more: Kafka restarts the session timer when it answers, so its proof
   is the answer's time, taken as ``now`` minus one heartbeat interval — unless
   the process was starved since the request was sent (the answer may be old).
3. The session ends ``session_timeout_ms`` after the newest proof, whatever is
   in flight.  A JoinGroup or SyncGroup held by the coordinator keeps the
   session alive there, but one lost on its way (a partition) does not, and
   the member cannot tell the two apart until an answer comes: counting a
   request in flight as proof let a member keep resources the coordinator had
   already handed on (found by the network simulation).  Heartbeats sent
   beside the held request prove the session, but not that the request
   arrived: a coordinator completes a round without the members that did not
   rejoin (or sync) once the rebalance timeout has passed since the round
   began.  So while a request is in flight, the session also ends
   ``rebalance_timeout_ms`` after the *round floor*: the send time of the last
   heartbeat or SyncGroup answered NONE (no round had begun), or of the last
   JoinGroup answered (its round began after it).  A member that owns
   nothing has nothing at stake and is not bound by this (the machine's rule).
   Both bounds come ``margin_ms`` early (the session margin): the member's
   clock starts when it sends and the coordinator's when it receives, which is
   the right order but no gap; the margin is the gap, for a late timer, a
   starved event loop or a thread handler that is slow to stop.
4. Starvation: an event later than the machine's own deadline by more than
   ``min(heartbeat interval, session timeout / 3)`` means the process was
   frozen or its event loop starved; answers read from then on may be
   arbitrarily old, so requests sent before then prove nothing beyond rule 2's
   send time.  While a JoinGroup/SyncGroup is held, a watchdog deadline one
   heartbeat interval after the last event makes such a gap visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: Heartbeat interval while a follow-up round is due: the revoking members start
#: it at once, the others notice it at their next heartbeat (rule 1).
EXPEDITED_INTERVAL_MS = 50


@dataclass(slots=True)
class HeartbeatTimer:
    heartbeat_interval_ms: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: The session counts as over this long before it can end on the coordinator.
    margin_ms: int = 0
    #: When the next heartbeat is due (``None``: none planned).
    next_at: int | None = None
    #: Heartbeats failed in a row with a retriable error.
    failures: int = 0
    #: Send time of the newest request that proved the session alive (rule 2).
    alive_since: int | None = None
    #: No round that could drop this member began before this (rule 3).
    round_floor: int | None = None
    #: When the machine expected its next event at the latest (its deadline).
    expected_by: int | None = None
    #: Answers to requests sent before this time may be arbitrarily old (rule 4).
    starved_until: int = 0
    last_seen: int = 0
    #: Heartbeat at the short interval (rule 1).
    expedited: bool = False

    # --- rule 1: when to heartbeat --------------------------------------------

    @property
    def interval_ms(self) -> int:
        if self.expedited:
            return min(self.heartbeat_interval_ms, EXPEDITED_INTERVAL_MS)
        return self.heartbeat_interval_ms

    def schedule(self, now: int) -> None:
        """A heartbeat was sent, or the member joined or got its assignment."""
        self.next_at = now + self.interval_ms

    def due_now(self, now: int) -> None:
        self.next_at = now

    def succeeded(self) -> None:
        self.failures = 0

    def failed(self, now: int, backoff_ms: Callable[[int], int]) -> None:
        """Retry after ``backoff_ms(failures in a row)``."""
        self.failures += 1
        self.next_at = now + backoff_ms(self.failures)

    # --- rules 2 and 3: proof of life and the session's end ------------------------

    def proved_alive(self, now: int, sent_at: int, *, held: bool) -> None:
        """The coordinator answered a request sent at ``sent_at``; ``held``: a
        JoinGroup or SyncGroup, which the coordinator may have held."""
        proof = sent_at
        if held and sent_at >= self.starved_until:
            proof = max(proof, now - self.heartbeat_interval_ms)
        if self.alive_since is None or proof > self.alive_since:
            self.alive_since = proof

    def forget_proof(self) -> None:
        """A new generation or membership: older proofs say nothing about it."""
        self.alive_since = None
        self.round_floor = None

    def proved_stable(self, sent_at: int) -> None:
        """A heartbeat or SyncGroup sent at ``sent_at`` was answered NONE: no
        rebalance had begun when the coordinator read it (rule 3)."""
        if self.round_floor is None or sent_at > self.round_floor:
            self.round_floor = sent_at

    def round_began_after(self, sent_at: int) -> None:
        """A JoinGroup sent at ``sent_at`` was answered: the round it completed,
        and any later one, began after it (rule 3)."""
        self.round_floor = sent_at

    def session_end(self, *, rebalancing: bool = False) -> int | None:
        """When the coordinator may have evicted the member, from what is known for
        sure, less the margin (rule 3); ``rebalancing``: a JoinGroup or SyncGroup
        is in flight."""
        if self.alive_since is None:
            return None
        end = self.alive_since + self.session_timeout_ms
        if rebalancing and self.round_floor is not None:
            end = min(end, self.round_floor + self.rebalance_timeout_ms)
        return end - self.margin_ms

    # --- rule 4: starvation ---------------------------------------------------------

    @property
    def starvation_threshold_ms(self) -> int:
        """How late an event may come before the machine assumes it was starved."""
        return min(self.heartbeat_interval_ms, self.session_timeout_ms // 3)

    def observe(self, now: int) -> int | None:
        """An event at ``now``; returns how late it was if the machine was starved."""
        late: int | None = None
        if self.expected_by is not None and now - self.expected_by > self.starvation_threshold_ms:
            late = now - self.expected_by
            self.starved_until = now
        self.last_seen = max(self.last_seen, now)
        return late

    def expect(self, deadline: int | None) -> None:
        """The machine asked to be woken at ``deadline`` at the latest."""
        self.expected_by = deadline

    def watchdog_at(self) -> int:
        """Wake-up while a JoinGroup/SyncGroup is held, so that a gap shows (rule 4)."""
        return self.last_seen + self.heartbeat_interval_ms


__all__ = ["HeartbeatTimer"]
