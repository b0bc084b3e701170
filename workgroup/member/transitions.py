"""The member's states and the moves between them.

Rules:

1. :data:`NEXT_STATES` lists, for each state, every state it may move to; a
   state may move to itself only where it says so (JOINING restarts its
   JoinGroup, FINDING_COORDINATOR restarts its search).
2. Every change of state goes through :func:`check_transition`; a move the
   table does not list is a bug in the machine and raises
   :class:`~workgroup.member.errors.IllegalTransitionError` at once, instead of
   leaving the member in a state its rules do not cover.
3. CLOSED and FATAL are final.
"""

from __future__ import annotations

import enum

from workgroup.member.errors import IllegalTransitionError


class State(enum.Enum):
    #: Created or not yet started; nothing is owned, nothing is sent.
    UNJOINED = "unjoined"
    #: Waiting for the driver to locate the group coordinator (or for the back-off
    #: before asking again).  A STABLE assignment is kept meanwhile.
    FINDING_COORDINATOR = "finding_coordinator"
    #: Preparing or awaiting a JoinGroup: eager protocols first wait for their
    #: revocation callbacks; retriable errors wait for the back-off.
    JOINING = "joining"
    #: The leader's assignor runs (RunAssignor is out); heartbeats keep flowing.
    ASSIGNING = "assigning"
    #: SyncGroup in flight; the coordinator answers once the leader has assigned.
    SYNCING = "syncing"
    #: Member of the current generation with its assignment; heartbeating.  A
    #: cooperative follow-up round starts here once revocations are done.
    STABLE = "stable"
    #: Closing: revocation callbacks, then LeaveGroup for dynamic members.
    LEAVING = "leaving"
    #: Closed; every later event is ignored.
    CLOSED = "closed"
    #: A non-retriable error (``MemberMachine.error``); nothing more is sent.
    FATAL = "fatal"


_S = State

#: state -> the states it may move to.
NEXT_STATES: dict[State, frozenset[State]] = {
    # start; close before start; fail()
    _S.UNJOINED: frozenset({_S.FINDING_COORDINATOR, _S.CLOSED, _S.FATAL}),
    # found (rejoin, or back to STABLE after an outage); session ran out while looking
    _S.FINDING_COORDINATOR: frozenset(
        {_S.FINDING_COORDINATOR, _S.JOINING, _S.STABLE, _S.LEAVING, _S.FATAL}
    ),
    # joined (leader: ASSIGNING, follower: SYNCING); retry or new member id; coordinator lost
    _S.JOINING: frozenset(
        {_S.JOINING, _S.ASSIGNING, _S.SYNCING, _S.FINDING_COORDINATOR, _S.LEAVING, _S.FATAL}
    ),
    # assignment done; a heartbeat error sends the leader back to JoinGroup or rediscovery
    _S.ASSIGNING: frozenset({_S.SYNCING, _S.JOINING, _S.FINDING_COORDINATOR, _S.LEAVING, _S.FATAL}),
    # assignment received; SyncGroup errors rejoin or rediscover
    _S.SYNCING: frozenset({_S.STABLE, _S.JOINING, _S.FINDING_COORDINATOR, _S.LEAVING, _S.FATAL}),
    # a rebalance; an outage
    _S.STABLE: frozenset({_S.JOINING, _S.FINDING_COORDINATOR, _S.LEAVING, _S.FATAL}),
    # LeaveGroup answered (or not needed); fail() while closing
    _S.LEAVING: frozenset({_S.CLOSED, _S.FATAL}),
    _S.CLOSED: frozenset(),
    _S.FATAL: frozenset(),
}


def check_transition(current: State, target: State) -> State:
    """Return ``target`` if the member may move there from ``current`` (rule 2)."""
    if target not in NEXT_STATES[current]:
        raise IllegalTransitionError(
            f"a member may not move from {current.name} to {target.name}; from "
            f"{current.name} it may move to "
            f"{sorted(s.name for s in NEXT_STATES[current]) or 'nothing (final state)'}"
        )
    return target


__all__ = ["NEXT_STATES", "State", "check_transition"]
