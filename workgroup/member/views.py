"""What a member machine shows of its parts: read-only views.  Sans-I/O.

:class:`~workgroup.member.state.MemberMachine` is built on these views; they
read its parts (:mod:`~workgroup.member.parts`) and change nothing, so the
driver, the runtime and tests may ask them at any time.

Rules:

1. A view only reads: no view changes a part or logs.
2. :meth:`MemberViews.next_deadline` is the earliest of the parts' deadlines
   (none for a member not started, CLOSED or FATAL).
3. *Settled* (:attr:`MemberViews.settled`) means settled for the group: STABLE,
   no callback running, no round due, nothing releasing, nothing warming.
"""

from __future__ import annotations

from collections.abc import Mapping

from workgroup.member.config import MemberConfig
from workgroup.member.parts import MemberParts
from workgroup.member.transitions import State
from workgroup.protocol.protocol import Protocol
from workgroup.types import Resource


class MemberViews:
    """One member's state as its parts keep it (see the module docstring)."""

    def __init__(self, config: MemberConfig, parts: MemberParts) -> None:
        self.config = config
        #: Load balancing: what this member measures (the machine's rule 13).
        self.loads = parts.loads
        #: The keyspace map known and the hot keys sampled (``None``: no keyspace).
        self.keyspace = parts.keyspace
        self._membership = parts.membership
        self._holdings = parts.holdings
        self._intents = parts.intents
        self._catalog = parts.catalog
        self._pipeline = parts.pipeline
        self._departure = parts.departure
        self._closing = parts.closing
        self._leading = parts.leading

    @property
    def state(self) -> State:
        return self._membership.state

    @property
    def leader_id(self) -> str:
        return self._membership.leader_id

    @property
    def rebalances(self) -> int:
        """Generations joined so far."""
        return self._membership.rebalances

    @property
    def generation(self) -> int:
        """The current generation's id (``-1``: none)."""
        return self._membership.generation.generation_id

    @property
    def member_id(self) -> str:
        return self._membership.generation.member_id

    @property
    def protocol(self) -> Protocol | None:
        """The protocol the coordinator chose for the current generation."""
        return self._membership.generation.protocol

    @property
    def owned(self) -> frozenset[Resource]:
        """The resources this member owns."""
        return self._holdings.ownership.resources

    @property
    def releasing(self) -> frozenset[Resource]:
        """Revoked resources whose work has not stopped yet (rule 9)."""
        return self._holdings.ownership.releasing

    @property
    def owned_generation(self) -> int:
        """The generation :attr:`owned` was assigned in (``-1``: nothing owned)."""
        return self._holdings.ownership.generation

    @property
    def alive_since(self) -> int | None:
        """Send time (ms) of the newest request that proved the session alive."""
        return self._membership.heartbeat.alive_since

    @property
    def warming(self) -> frozenset[Resource]:
        """Resources warming up here (rule 14)."""
        return self._intents.warming

    @property
    def draining(self) -> bool:
        """The member takes nothing until undrained (rule 15)."""
        return self._intents.draining

    @property
    def moves_total(self) -> Mapping[tuple[str, str], int]:
        """``(reason, how) -> moves begun`` while this member led (member/moves.py)."""
        return self._pipeline.moves_total

    @property
    def is_leader(self) -> bool:
        return self._membership.is_leader

    @property
    def balance_probe_at(self) -> int | None:
        """When this leader's balancing probe asks for a round (``None``: none
        planned; a round ended above the tolerance that a later one may fix)."""
        return self._pipeline.probe_at

    @property
    def settled(self) -> bool:
        """Settled for the group: STABLE with no callback running, no rejoin pending,
        and no follow-up round due (the leader withheld resources from some member
        until their owner revokes them: the group's rebalance is not over)."""
        return (
            self.state is State.STABLE
            and not self._holdings.callbacks_running
            and not self._membership.round_due
            and not self._holdings.ownership.releasing
            and not self._intents.warming
        )

    @property
    def catalog_hash(self) -> bytes:
        """Digest of the catalog this member reads (sent in its metadata)."""
        return self._catalog.digest

    @property
    def catalog(self) -> Mapping[str, tuple[str | int, ...]]:
        return self._catalog.keys

    @property
    def used_versions(self) -> Mapping[str, int]:
        return dict(self._membership.used_versions)

    def next_deadline(self) -> int | None:
        """When :meth:`tick` must be called next (``None``: only on events): the
        earliest of its parts' deadlines."""
        if self.state in (State.CLOSED, State.FATAL, State.UNJOINED):
            return None
        candidates = (
            self._membership.next_deadline(),
            self._holdings.next_deadline(),
            self._intents.next_deadline(),
            # Out of time, the hand-over still waits for the JoinGroup or SyncGroup
            # in flight (rule 7): its answer, not the clock, wakes the member.
            self._departure.next_deadline(finishing_round=self._closing.awaiting_round()),
            self._leading.next_deadline(),
        )
        due = [deadline for deadline in candidates if deadline is not None]
        return min(due) if due else None


__all__ = ["MemberViews"]
