"""A lease's states, why a lease ends, and the moves between its states.

Rules:

1. An active lease starts ACQUIRING and is ACTIVE once its token is committed;
   a standby lease starts STANDBY (held, tokenless).  ACTIVE and STANDBY are
   *held*.
2. A lease ends once, with an :class:`EndReason`: REVOKED (the resource moves:
   a grace period to finish the step, during which a lease with a token may
   still commit), LOST (the session is gone: stop at once), FENCED (the
   coordinator refused a commit: the member is no longer in the group) or
   ENDED (the runtime gave it up itself: its handler kept failing, its token
   could not be taken, or it was closed).  Ending it again changes nothing:
   the first reason stays.
3. A REVOKED lease the coordinator refuses during its grace period becomes
   FENCED: a fenced member stops at once.  LOST, FENCED and ENDED are final and
   never commit.
4. :data:`NEXT_STATES` lists, for each state, every state it may move to; every
   change goes through :func:`check_transition`, and a move the table does not
   list is a bug that raises :class:`IllegalLeaseTransitionError` at once.  A
   new state is a row here and a line in :class:`LeaseState`.
5. A warming lease (a planned move: another member still holds the resource)
   starts WARMING: live, not held, tokenless, it never commits.  The cut-over
   promotes it to ACQUIRING, then ACTIVE as any active lease; a warm-up called
   off ends it (WARMUP_ENDED).
6. A leader's standby lease (``@app.leader(name, standbys=N)``) is promoted
   the same way when its process is handed the leadership: STANDBY to
   ACQUIRING, then ACTIVE.
"""

from __future__ import annotations

import enum

from workgroup.runtime.errors import IllegalLeaseTransitionError


class LeaseState(enum.Enum):
    #: An active lease taking its token (committed offset + 1); not held yet.
    ACQUIRING = "acquiring"
    #: The active holder, token committed: it works and commits checkpoints.
    ACTIVE = "active"
    #: A standby holder: held from its start, tokenless, never commits.
    STANDBY = "standby"
    #: Warming up before a cut-over (rule 5): not held, tokenless, never commits.
    WARMING = "warming"
    #: Ended with a hand-over: finish the step within the grace period.
    REVOKED = "revoked"
    #: Ended with the session: stop at once.
    LOST = "lost"
    #: Ended by the coordinator refusing a commit: stop at once.
    FENCED = "fenced"
    #: Ended by the runtime itself (given up, not taken, closed); final.
    ENDED = "ended"


class EndReason(enum.Enum):
    """Why a lease ends (``Lease.end``); the value is the state it ends in."""

    #: The resource moves (a rebalance, or this process stops): grace period.
    REVOKED = "revoked"
    #: The session expired or the member failed.
    LOST = "lost"
    #: The coordinator refused a commit (``detail``: the error code's name).
    FENCED = "fenced"
    #: Its handler failed ``max_failures`` times in a row under ``on_failure="release"``.
    RELEASED = "released"
    #: The token could not be taken (``detail``: the error).
    NOT_ACQUIRED = "not_acquired"
    #: Closed before it ended otherwise.
    CLOSED = "closed"
    #: A warm-up called off: the move went away, nothing was handed over.
    WARMUP_ENDED = "warmup_ended"

    @property
    def state(self) -> LeaseState:
        """The state a lease ending for this reason moves to (rule 2)."""
        return _END_STATES[self]

    def describe(self, detail: str | None = None) -> str:
        """The reason as ``Lease.end_reason`` says it (logs, handlers)."""
        text = _DESCRIPTIONS[self]
        return text.format(detail=detail) if "{detail}" in text else text


_END_STATES: dict[EndReason, LeaseState] = {
    EndReason.REVOKED: LeaseState.REVOKED,
    EndReason.LOST: LeaseState.LOST,
    EndReason.FENCED: LeaseState.FENCED,
    EndReason.RELEASED: LeaseState.ENDED,
    EndReason.NOT_ACQUIRED: LeaseState.ENDED,
    EndReason.CLOSED: LeaseState.ENDED,
    EndReason.WARMUP_ENDED: LeaseState.ENDED,
}

_DESCRIPTIONS: dict[EndReason, str] = {
    EndReason.REVOKED: "revoked",
    EndReason.LOST: "lost",
    EndReason.FENCED: "fenced by the coordinator ({detail})",
    EndReason.RELEASED: "released after failures",
    EndReason.NOT_ACQUIRED: "could not take the token: {detail}",
    EndReason.CLOSED: "closed",
    EndReason.WARMUP_ENDED: "warm-up called off",
}

_S = LeaseState

#: The states a lease is held in (rule 1).
HELD_STATES = frozenset({_S.ACTIVE, _S.STANDBY})
#: The states before a lease ended.
LIVE_STATES = frozenset({_S.ACQUIRING, _S.ACTIVE, _S.STANDBY, _S.WARMING})
#: Ended without a hand-over: the handler stops at once (``Lease.lost``).
LOST_STATES = frozenset({_S.LOST, _S.FENCED})

#: state -> the states it may move to (rule 4).
NEXT_STATES: dict[LeaseState, frozenset[LeaseState]] = {
    # token committed; ended while taking it (refused: fenced)
    _S.ACQUIRING: frozenset({_S.ACTIVE, _S.REVOKED, _S.LOST, _S.FENCED, _S.ENDED}),
    # ended; refused by the coordinator; given up
    _S.ACTIVE: frozenset({_S.REVOKED, _S.LOST, _S.FENCED, _S.ENDED}),
    # a standby never commits, so the coordinator never fences it; a leader's
    # standby is promoted (rule 6)
    _S.STANDBY: frozenset({_S.ACQUIRING, _S.REVOKED, _S.LOST, _S.ENDED}),
    # promoted by the cut-over (rule 5); called off, lost, closed
    _S.WARMING: frozenset({_S.ACQUIRING, _S.REVOKED, _S.LOST, _S.ENDED}),
    # a commit in the grace period refused (rule 3)
    _S.REVOKED: frozenset({_S.FENCED}),
    _S.LOST: frozenset(),
    _S.FENCED: frozenset(),
    _S.ENDED: frozenset(),
}


def check_transition(current: LeaseState, target: LeaseState) -> LeaseState:
    """Return ``target`` if a lease may move there from ``current`` (rule 4)."""
    if target not in NEXT_STATES[current]:
        raise IllegalLeaseTransitionError(
            f"a lease may not move from {current.name} to {target.name}; from "
            f"{current.name} it may move to "
            f"{sorted(s.name for s in NEXT_STATES[current]) or 'nothing (it ended)'}"
        )
    return target


__all__ = [
    "HELD_STATES",
    "LIVE_STATES",
    "LOST_STATES",
    "NEXT_STATES",
    "EndReason",
    "LeaseState",
    "check_transition",
]
