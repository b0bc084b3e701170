"""The member's requests in flight: what was sent, under which generation, when.

Rule 2 of the member machine: at most one JoinGroup or SyncGroup is in flight,
and at most one Heartbeat.  The machine asks here before it sends; every answer
is looked up by its request id, and an answer whose request is no longer here
(dropped when the coordinator was lost, the member closed or failed) is stale.
Sans-I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workgroup.member.generation import Generation

RequestKind = Literal["join", "sync", "heartbeat", "leave"]
#: The requests a coordinator may hold for up to the rebalance timeout.
REBALANCE_KINDS: frozenset[RequestKind] = frozenset({"join", "sync"})


@dataclass(frozen=True, slots=True)
class Pending:
    """One request sent and not answered yet."""

    kind: RequestKind
    #: The generation (and member id) the request was sent under (rule 1).
    generation: Generation
    sent_at: int
    #: Sent on the second connection, beside a held JoinGroup/SyncGroup.
    beside_held: bool = False

    @property
    def held(self) -> bool:
        """The coordinator may hold it (JoinGroup, SyncGroup) until the rebalance ends."""
        return self.kind in REBALANCE_KINDS


class RequestIds:
    """The one counter of the ids a machine hands its driver (requests, callbacks,
    assignor runs): no two of its actions share an id."""

    def __init__(self) -> None:
        self.last = 0

    def take(self) -> int:
        self.last += 1
        return self.last


class InFlight:
    """The requests sent and not answered, by request id."""

    def __init__(self) -> None:
        self._by_id: dict[int, Pending] = {}

    def add(self, request_id: int, pending: Pending) -> None:
        self._by_id[request_id] = pending

    def pop(self, request_id: int) -> Pending | None:
        """The request ``request_id`` answers (``None``: stale), now answered."""
        return self._by_id.pop(request_id, None)

    def clear(self) -> None:
        """Forget every request: their answers will be stale."""
        self._by_id.clear()

    def has(self, *kinds: RequestKind) -> bool:
        return any(p.kind in kinds for p in self._by_id.values())

    @property
    def rebalancing(self) -> bool:
        """A JoinGroup or SyncGroup is in flight."""
        return any(p.held for p in self._by_id.values())


__all__ = ["REBALANCE_KINDS", "InFlight", "Pending", "RequestIds", "RequestKind"]
