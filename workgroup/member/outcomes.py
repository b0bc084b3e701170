"""What a part of the member machine asks the machine to do next.  Sans-I/O.

A part (answers read, requests built, an assignment applied) changes its own
state and returns, in order, the moves that belong to the machine: losing what
is owned, failing, starting a round again, finding the coordinator again,
syncing, leading a round, taking an assignment, leaving.  The machine routes each (its
``_route``), so no part calls back into it.

Rules:

1. Outcomes are carried out in the order returned; a part returns them only
   after the changes of its own that must come first (a loss is reported under
   the generation it happened in, so :class:`Lose` comes before the
   :class:`Rejoin` that resets the generation).
2. :class:`Fail` and :class:`CoordinatorLost` end what a part had to say: none
   follows them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import JoinGroupResult
from workgroup.protocol.metadata import AssignmentData
from workgroup.protocol.protocol import Protocol


class Reset(enum.Enum):
    """What a :class:`Rejoin` forgets first (the machine's rule 3)."""

    #: Nothing: the generation stands.
    NOTHING = "nothing"
    #: UNKNOWN_MEMBER_ID: the member id and the generation.
    MEMBER = "member"
    #: ILLEGAL_GENERATION: the generation (the member id is kept).
    GENERATION = "generation"


@dataclass(frozen=True, slots=True)
class Lose:
    """What is owned is lost (reported in ``on_lost``), with the warm-ups."""

    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    """The member fails with ``error`` (a dynamic one leaves, if ``leave``)."""

    error: WorkgroupError
    leave: bool = False


@dataclass(frozen=True, slots=True)
class Rejoin:
    """Back to JOINING: the next JoinGroup goes now or after the back-off."""

    reason: str
    immediately: bool
    reset: Reset = Reset.NOTHING


@dataclass(frozen=True, slots=True)
class CoordinatorLost:
    """Find the coordinator again (a STABLE member keeps its assignment);
    ``void_generation``: the session ended, the generation with it (the member id
    is kept)."""

    reason: str
    void_generation: bool = False


@dataclass(frozen=True, slots=True)
class LostWhileLeaving:
    """LEAVING, the group no longer knows the member: what is left is lost."""


@dataclass(frozen=True, slots=True)
class Leave:
    """Closing: revoke what is left and leave (the machine's rules 7 and 9)."""


@dataclass(frozen=True, slots=True)
class Lead:
    """The member leads this round: run the assignor on the members' metadata."""

    protocol: Protocol
    result: JoinGroupResult


@dataclass(frozen=True, slots=True)
class Sync:
    """Send SyncGroup (``follow``: as a follower) with the leader's ``assignments``
    (none from a follower)."""

    follow: bool
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Take:
    """Apply the assignment the SyncGroup answered."""

    protocol: Protocol
    data: AssignmentData


Outcome = Lose | Fail | Rejoin | CoordinatorLost | LostWhileLeaving | Leave | Lead | Sync | Take

__all__ = [
    "CoordinatorLost",
    "Fail",
    "Lead",
    "Leave",
    "Lose",
    "LostWhileLeaving",
    "Outcome",
    "Rejoin",
    "Reset",
    "Sync",
    "Take",
]
