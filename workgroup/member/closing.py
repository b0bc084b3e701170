"""How a member closes: a hand-over first where it helps, then revoking what is
left, heartbeating while the application stops, and LeaveGroup.  Sans-I/O.

The member machine's rules 7 and 9 in full; this part carries them out on the
member's parts, keeps :class:`~workgroup.member.departure.Departure` (how far
closing has come) moving, and returns the
:mod:`~workgroup.member.outcomes` that belong to the machine.

Rules:

1. Closing a member that never started, or failed, just closes
   (:class:`~workgroup.member.actions.Closed`); closing again changes nothing.
   Warm-ups end first, whatever follows.
2. With ``confirm_release``, a member that will leave (not alone, no
   reassignment delay, a valid generation, a known coordinator, a cooperative
   protocol) in STABLE or a round hands over by releasing: everything is
   revoked at once, and the member rejoins (at once if STABLE, after the round
   under way otherwise) tagged as leaving.
3. Without it, a member that will leave, STABLE, owning something, with the
   same conditions, hands over by a round: it rejoins tagged as leaving and
   takes nothing, and just leaves once the round revoked everything, or once
   three heartbeat intervals plus a second (at most a session) have passed —
   but never while a JoinGroup or SyncGroup of its own is in flight or its
   assignor runs while it still owns something (:meth:`Closing.awaiting_round`).
4. A member releasing everything leaves once nothing is owned, no callback
   runs and no round of its own is in flight.
5. Leaving: requests in flight are forgotten, what is owned is revoked (lost
   without a valid generation), the member is LEAVING and heartbeats on its
   schedule (never expedited) while a callback runs or anything is releasing;
   then a member that sends LeaveGroup (dynamic, or closed with ``leave=True``)
   with a member id and a coordinator sends it once, and closes at its answer
   or its failure; any other closes at once.
6. A session that ends while LEAVING (or an answer saying the group no longer
   knows the member) loses what is left, forgets the generation, and the member
   leaves as rule 5 says, without LeaveGroup if nothing was owned any more.
7. Failing: what is owned is lost, requests in flight are forgotten, the
   member is FATAL (the first error stands, logged once as ``member.fatal``)
   and a dynamic member told to leave sends LeaveGroup if it knows its
   coordinator; :class:`~workgroup.member.actions.Failed` goes last.
"""

from __future__ import annotations

from workgroup.errors import WorkgroupError
from workgroup.log import get_logger
from workgroup.member.actions import Action, Closed, Failed
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.membership import Membership
from workgroup.member.outcomes import Leave, Outcome, Rejoin
from workgroup.member.outgoing import Outgoing
from workgroup.member.transitions import State
from workgroup.types import sorted_resources

log = get_logger(__name__)

_HAND_OVER_REASON = "closing: handing resources over first"


class Closing:
    """Closes one member (see the module docstring)."""

    def __init__(
        self,
        config: MemberConfig,
        out: list[Action],
        membership: Membership,
        holdings: Holdings,
        intents: Intents,
        departure: Departure,
        outgoing: Outgoing,
    ) -> None:
        self._config = config
        self._out = out
        self._membership = membership
        self._holdings = holdings
        self._intents = intents
        self._departure = departure
        self._outgoing = outgoing

    # --- losing (also the machine's) --------------------------------------------

    def lose(self, reason: str) -> None:
        """Everything is gone: warm-ups end, what is owned or releasing is lost."""
        self.end_warmups(reason)
        self._holdings.lose(reason)

    def end_warmups(self, reason: str) -> None:
        ended = self._intents.end_warmups()
        self._holdings.warmups_ended(ended, reason, self._membership.generation.generation_id)

    # --- closing (rules 1-3) ----------------------------------------------------

    def close(self, now: int, *, leave: bool | None) -> list[Outcome]:
        """``leave``: send LeaveGroup even as a static member; ``None``: only if dynamic."""
        membership, departure, holdings = self._membership, self._departure, self._holdings
        if leave is not None:
            departure.choose_leave(leave)
        if membership.state in (State.CLOSED, State.LEAVING):
            return []
        self.end_warmups("closing")
        if membership.state in (State.UNJOINED, State.FATAL):
            self.finish()
            return []
        if departure.closing:
            return []  # already handing over
        if holdings.confirm_release and self._may_hand_over_releasing():
            # Rule 2: revoke everything now; each resource goes to another member
            # in the round after its work stopped, the slowest holds back no other.
            departure.release_all()
            self._log_handing_over()
            if holdings.owned:
                self._revoke_all()
            if membership.state is State.STABLE:
                return [Rejoin(_HAND_OVER_REASON, immediately=True)]
            membership.ask_rejoin(_HAND_OVER_REASON)
            return []
        if not holdings.confirm_release and self._may_hand_over():
            # Rule 3: a rebalance in which this member takes nothing, so that the
            # others get its resources (cooperatively) while it still works on them.
            departure.hand_over(now + self._hand_over_ms())
            self._log_handing_over()
            membership.ask_rejoin(_HAND_OVER_REASON)
            return []
        return [Leave()]

    def _log_handing_over(self) -> None:
        log.info(
            "member.handing_over",
            group=self._config.group_id,
            member_id=self._membership.generation.member_id,
            count=len(self._holdings.owned),
        )

    def _revoke_all(self) -> None:
        generation = self._membership.generation.generation_id
        last_seen = self._membership.heartbeat.last_seen
        self._holdings.revoke(sorted_resources(self._holdings.owned), generation, last_seen)

    def _may_leave_by_round(self) -> bool:
        """Rules 2 and 3: someone to hand over to, and a group to do it in."""
        membership = self._membership
        alone = membership.is_leader and membership.group_size == 1
        return (
            self._departure.sends_leave
            and not alone  # nobody to hand over to (a follower is never alone)
            and self._config.reassign_delay_ms == 0  # the leader holds them back instead
            and membership.generation.is_valid
            and membership.lookup.known
            and membership.rebalance_mode == "cooperative"
        )

    def _may_hand_over(self) -> bool:
        return (
            self._may_leave_by_round()
            and self._membership.state is State.STABLE
            and bool(self._holdings.owned)
            and self._membership.generation.protocol is not None
        )

    def _may_hand_over_releasing(self) -> bool:
        rebalancing_or_stable = (State.STABLE, State.JOINING, State.ASSIGNING, State.SYNCING)
        return (
            self._may_leave_by_round()
            and self._membership.state in rebalancing_or_stable
            and bool(self._holdings)
        )

    def _hand_over_ms(self) -> int:
        """How long a hand-over may take before the member just leaves: enough for
        the others to notice the rebalance at a heartbeat, and the two rounds."""
        config = self._config
        return min(config.session_timeout_ms, 3 * config.heartbeat_interval_ms + 1_000)

    def awaiting_round(self) -> bool:
        """Out of time, a hand-over still finishes the round it is in (JoinGroup or
        SyncGroup in flight, or its leader's assignor running) while it owns
        something (rule 3); losing it all ends the wait."""
        membership = self._membership
        in_round = membership.pending.rebalancing or membership.state is State.ASSIGNING
        return in_round and bool(self._holdings.owned)

    def handed_over(self, now: int) -> bool:
        """Rules 3 and 4: the hand-over is over (or out of time): leave now."""
        membership, departure, holdings = self._membership, self._departure, self._holdings
        if departure.handing_over:
            return (departure.out_of_time(now) and not self.awaiting_round()) or (
                membership.state is State.STABLE
                and not holdings.owned
                and not holdings.callbacks_running
            )
        # Everything released; never with a round of its own in flight (its answer
        # may name this member leader: rule 3).
        return (
            departure.releasing_all
            and not holdings
            and not holdings.callbacks_running
            and not membership.pending.rebalancing
            and membership.state is not State.ASSIGNING
        )

    # --- failing (rule 7) -------------------------------------------------------

    def fail(self, now: int, error: WorkgroupError, *, leave: bool) -> None:
        """Rule 7 (the machine keeps the error and drops its leader's round)."""
        membership = self._membership
        member_id = membership.generation.member_id
        log.error(
            "member.fatal",
            group=self._config.group_id,
            member_id=member_id,
            error=str(error),
            error_type=type(error).__name__,
        )
        if self._holdings.owned:
            self.lose(f"fatal error: {error}")
        dynamic = self._config.instance_id is None
        leave_member = member_id if (leave and dynamic and membership.lookup.known) else ""
        membership.pending.clear()
        membership.enter(State.FATAL)
        if leave_member:
            # Let the rest of the group rebalance now instead of after our session.
            self._outgoing.leave(now, leave_member, None, str(error))
        self._out.append(Failed(error))

    # --- leaving (rules 5 and 6) ------------------------------------------------

    def leave_now(self, now: int) -> None:
        """Rule 5 (the machine drops its leader's round)."""
        membership, holdings = self._membership, self._holdings
        self._departure.leave()
        membership.pending.clear()
        if holdings:
            if membership.generation.is_valid:
                self._revoke_all()
            else:
                self.lose("closing without a valid generation")
        membership.enter(State.LEAVING)
        # Heartbeats go on while anything is releasing, on their schedule.
        heartbeat = membership.heartbeat
        heartbeat.expedited = False
        if heartbeat.next_at is None:
            heartbeat.schedule(now)
        self.maybe_finish(now)
        self.progress(now)

    def maybe_finish(self, now: int) -> None:
        """LEAVING: leave (or close) once no callback runs and nothing is releasing."""
        if not self._holdings.callbacks_running and not self._holdings.releasing:
            self._leave_or_close(now)

    def progress(self, now: int) -> None:
        """LEAVING: heartbeat while callbacks run or resources are releasing, so
        that the session outlives them; a session that ends all the same loses
        what is left and closes without LeaveGroup (rule 6)."""
        membership = self._membership
        if self._departure.leave_sent or membership.state is not State.LEAVING:
            return
        session_end = membership.session_end()
        if session_end is not None and now >= session_end:
            log.warning(
                "member.session_lost",
                group=self._config.group_id,
                member_id=membership.generation.member_id,
                generation=membership.generation.generation_id,
                while_closing=True,
            )
            self.session_ended(now)
            return
        self._outgoing.heartbeat_if_due(now)

    def session_ended(self, now: int) -> None:
        """Rule 6."""
        membership = self._membership
        self.lose("the session ended while closing")
        membership.generation = membership.generation.reset()
        membership.heartbeat.forget_proof()
        self.maybe_finish(now)

    def _leave_or_close(self, now: int) -> None:
        member_id = self._membership.generation.member_id
        departure = self._departure
        if (
            departure.sends_leave
            and member_id
            and self._membership.lookup.known
            and not departure.leave_sent
        ):
            departure.left()
            self._outgoing.leave(now, member_id, self._config.instance_id, "the member is closing")
        else:
            self.finish()

    def finish(self) -> None:
        """Closed (a FATAL member stays FATAL); answers still due are stale."""
        membership = self._membership
        if membership.state is State.CLOSED:
            return
        if membership.state is not State.FATAL:
            membership.enter(State.CLOSED)
        membership.pending.clear()
        self._out.append(Closed())
        log.info(
            "member.closed",
            group=self._config.group_id,
            member_id=membership.generation.member_id,
        )


__all__ = ["Closing"]
