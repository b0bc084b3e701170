"""How far a member has come in leaving its group: one stage, moved by a table.

Sans-I/O.  The member machine's rules 7 and 9 say when a member hands over,
when it leaves and what it sends; this part keeps where it stands.

Rules:

1. A member is STAYING until it is closed.  Closing moves it to one of:
   HANDING_OVER (rule 7: it rejoins tagged as leaving and takes nothing, and
   gives up by a deadline), RELEASING (rule 9, ``confirm_release``: everything
   was revoked at once and the member waits for the releases) or LEAVING
   (revoke what is left, then LeaveGroup).  Both hand-overs end in LEAVING.
2. LEAVING becomes LEFT when the LeaveGroup goes: from then on nothing is sent
   for the member (a commit is answered UNKNOWN_MEMBER_ID).
3. :data:`NEXT_STAGES` lists every move; any other raises
   :class:`~workgroup.member.errors.IllegalTransitionError`.  Closing again
   while departing changes nothing (the machine asks :attr:`Departure.closing`).
4. A member that hands over is *departing*: its metadata carries
   :data:`~workgroup.member.round_plan.LEAVING_TAG`, so the leader gives it nothing.
5. The only deadline is the hand-over's (rule 7), and only while the member is
   not finishing a round of its own: then the round's answer wakes it.
6. Whether closing sends LeaveGroup at all is a choice, not a stage: dynamic
   members always do, static ones only when told (scale-down, KIP-812).
"""

from __future__ import annotations

import enum

from workgroup.member.errors import IllegalTransitionError


class DepartureStage(enum.Enum):
    #: Not closing.
    STAYING = "staying"
    #: Closing by handing over in a round first (rule 7), until a deadline.
    HANDING_OVER = "handing_over"
    #: Closing with everything revoked, waiting for the releases (rule 9).
    RELEASING = "releasing"
    #: Revoking what is left; LeaveGroup (or close) once nothing runs.
    LEAVING = "leaving"
    #: LeaveGroup sent (or not needed and the member closed).
    LEFT = "left"


_D = DepartureStage

#: stage -> the stages it may move to (rule 3).
NEXT_STAGES: dict[DepartureStage, frozenset[DepartureStage]] = {
    _D.STAYING: frozenset({_D.HANDING_OVER, _D.RELEASING, _D.LEAVING}),
    _D.HANDING_OVER: frozenset({_D.LEAVING}),
    _D.RELEASING: frozenset({_D.LEAVING}),
    _D.LEAVING: frozenset({_D.LEFT}),
    _D.LEFT: frozenset(),
}


class Departure:
    """Where one member stands in leaving (rules 1-2), and whether it says so."""

    def __init__(self, *, dynamic: bool) -> None:
        self.stage = DepartureStage.STAYING
        #: The hand-over gives up by then (rule 7); set only while HANDING_OVER.
        self._until: int | None = None
        #: Closing sends LeaveGroup (rule 6).
        self.sends_leave = dynamic
        self._dynamic = dynamic

    def _move(self, target: DepartureStage) -> None:
        if target not in NEXT_STAGES[self.stage]:
            raise IllegalTransitionError(
                f"a member's departure may not move from {self.stage.name} to {target.name}"
            )
        self.stage = target

    # --- moves ------------------------------------------------------------------

    def hand_over(self, until: int) -> None:
        """Rule 7: hand over in a round, giving up at ``until``."""
        self._move(DepartureStage.HANDING_OVER)
        self._until = until

    def release_all(self) -> None:
        """Rule 9: everything revoked at once; leave once it is released."""
        self._move(DepartureStage.RELEASING)

    def leave(self) -> None:
        self._move(DepartureStage.LEAVING)
        self._until = None

    def left(self) -> None:
        self._move(DepartureStage.LEFT)

    def choose_leave(self, leave: bool) -> None:
        """Rule 6: send LeaveGroup on close (a static member gives up its place)."""
        self.sends_leave = leave or self._dynamic

    # --- views ------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        """Closed already: handing over, or leaving."""
        return self.stage is not DepartureStage.STAYING

    @property
    def departing(self) -> bool:
        """Handing over in a round (rule 4): tagged, takes nothing."""
        return self.stage in (DepartureStage.HANDING_OVER, DepartureStage.RELEASING)

    @property
    def handing_over(self) -> bool:
        """Rule 7's hand-over (a deadline, resources kept until the round revokes them)."""
        return self.stage is DepartureStage.HANDING_OVER

    @property
    def releasing_all(self) -> bool:
        """Rule 9's hand-over (everything revoked, waiting for the releases)."""
        return self.stage is DepartureStage.RELEASING

    @property
    def leave_sent(self) -> bool:
        return self.stage is DepartureStage.LEFT

    def out_of_time(self, now: int) -> bool:
        """The hand-over's deadline passed (rule 7)."""
        return self._until is not None and now >= self._until

    def next_deadline(self, *, finishing_round: bool) -> int | None:
        """Rule 5: the hand-over's deadline, unless a round of the member's own
        is being finished (its answer, not the clock, wakes the member)."""
        return None if finishing_round else self._until


__all__ = ["NEXT_STAGES", "Departure", "DepartureStage"]
