"""Where one member stands in its group: its state, generation, requests in
flight, coordinator, session and the next round it expects.  Sans-I/O.

The member machine reads and moves this part as its rules 1-6 say; this part
keeps the facts and answers the questions they decide (may a heartbeat go,
when does the session end, when may the next JoinGroup go, when must the
machine be woken).

Rules:

1. The state changes only through :meth:`Membership.enter`, checked against
   :mod:`~workgroup.member.transitions`.
2. The next round is one :class:`NextRound`: none due, a *follow-up* (the last
   assignment says the leader withheld resources: revoking members start it,
   this member must notice it), or *asked* by this member with a reason.  An
   asked round is taken (:meth:`Membership.take_rejoin`) once the member is
   STABLE with no callback running; the first reason stands until then.  A
   follow-up is settled by the next assignment.  Asking wins over a follow-up:
   either way a round is due, and the round taken settles both.
3. Losing the coordinator decides what its rediscovery leads to
   (:class:`AfterLookup`): back to STABLE, if the member was STABLE with no
   round asked (a rediscovery changes nothing in the group), otherwise a
   JoinGroup (a rebalance under way starts again).  Only the lookup under way
   is answered; a failed one is retried after the back-off
   (``member.coordinator_unavailable`` at attempts 1, 2, 4, 8...) until the
   connect deadline, then the member fails.
4. Heartbeats go only with a known coordinator, a valid generation and none in
   flight; beside a held JoinGroup/SyncGroup only while something is held
   (they alone prove the session then); while LEAVING only until the last
   callback returned and the last release came, before the LeaveGroup.
5. The session is bounded as :class:`~workgroup.member.heartbeat.HeartbeatTimer`
   says, while the member has a valid generation and, beside a held request,
   holds something; LEAVING keeps it only as long as it heartbeats.  Its end
   (:meth:`Membership.session_check`) loses what is owned; outside a held
   JoinGroup/SyncGroup it also ends the generation and the coordinator is
   looked for again.
6. :meth:`Membership.next_deadline` is the earliest of the coordinator lookup's
   retry, the connect deadline, the next JoinGroup, the next heartbeat, the
   session's end and, with a JoinGroup/SyncGroup in flight, the starvation
   watchdog.
7. Moves the machine's rules call for: JOINING (the next JoinGroup now or
   after the back-off, and not within the release or ready window of
   :mod:`~workgroup.member.holdings` and :mod:`~workgroup.member.intents` while
   what it waits for is outstanding; an eager member revokes everything
   first), finding the coordinator again, a round for changed metadata (only
   while in the group), a round after releases a cooperative JoinGroup already
   reported (with ``confirm_release``), and why a commit cannot be sent at all
   (not in the group or past its LeaveGroup: UNKNOWN_MEMBER_ID; no
   coordinator: retriable).
"""

from __future__ import annotations

import enum

from workgroup.errors import ErrorCode, WorkgroupError
from workgroup.log import get_logger
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.member.generation import NO_GENERATION, Generation
from workgroup.member.heartbeat import HeartbeatTimer
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.lookup import CoordinatorLookup
from workgroup.member.outcomes import CoordinatorLost, Fail, Lose, Outcome, Rejoin, Reset
from workgroup.member.requests import InFlight
from workgroup.member.transitions import State, check_transition
from workgroup.protocol.protocol import RebalanceMode
from workgroup.types import Resource

log = get_logger(__name__)


class NextRound(enum.Enum):
    """The round this member expects next (rule 2)."""

    #: None: settled as far as this member knows.
    NONE = "none"
    #: The last assignment withheld resources: a follow-up round is due.
    FOLLOW_UP = "follow_up"
    #: This member asks for a round (the reason is kept beside it).
    ASKED = "asked"


class AfterLookup(enum.Enum):
    """What finding the coordinator again leads to (rule 3)."""

    #: Back to STABLE with the assignment kept.
    RESUME = "resume"
    #: A JoinGroup.
    REJOIN = "rejoin"


#: States in which the member may still be in its group's session (rule 5).
_IN_SESSION = frozenset(
    {
        State.STABLE,
        State.ASSIGNING,
        State.JOINING,
        State.SYNCING,
        State.FINDING_COORDINATOR,
        State.LEAVING,
    }
)


class Membership:
    """One member's standing in its group (see the module docstring)."""

    def __init__(
        self, config: MemberConfig, holdings: Holdings, intents: Intents, departure: Departure
    ) -> None:
        self._config = config
        self._holdings = holdings
        self._intents = intents
        self._departure = departure
        self._state = State.UNJOINED
        self.generation: Generation = NO_GENERATION
        self.leader_id = ""
        #: Members of this generation (only the leader is told).
        self.group_size: int | None = None
        self.rebalances = 0
        self.pending = InFlight()
        self.lookup = CoordinatorLookup(config.connect_timeout_ms, self.backoff)
        self.heartbeat = HeartbeatTimer(
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            margin_ms=config.effective_session_margin_ms,
        )
        #: The next JoinGroup goes no earlier (the back-off after a failed one).
        self.join_at = 0
        self.join_failures = 0
        self._next_round = NextRound.NONE
        self._rejoin_reason = ""
        self._after_lookup = AfterLookup.REJOIN
        #: The metadata version spoken per protocol (version probing: the machine's rule 6).
        self.used_versions = {p.wire_name: p.codec.latest_version for p in config.protocols}

    # --- state (rule 1) ---------------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def enter(self, target: State) -> None:
        """The one place the state changes (checked against the transitions table)."""
        self._state = check_transition(self._state, target)

    @property
    def is_leader(self) -> bool:
        member_id = self.generation.member_id
        return bool(member_id) and member_id == self.leader_id

    @property
    def rebalance_mode(self) -> RebalanceMode:
        """How this member rejoins: cooperatively only if every protocol it offers
        is cooperative, as Kafka's consumer decides.  The group may choose any
        protocol the member offers, and an eager leader withholds nothing, so a
        member that kept its resources would then share them."""
        if all(p.mode == "cooperative" for p in self._config.protocols):
            return "cooperative"
        return "eager"

    def backoff(self, failures: int) -> int:
        base = self._config.retry_backoff_ms * (2 ** max(failures - 1, 0))
        return int(min(base, self._config.retry_backoff_max_ms))

    # --- the next round (rules 2 and 3) -----------------------------------------

    @property
    def rejoin_asked(self) -> bool:
        return self._next_round is NextRound.ASKED

    @property
    def round_due(self) -> bool:
        """A round is asked for or a follow-up is due: not settled."""
        return self._next_round is not NextRound.NONE

    def ask_rejoin(self, reason: str) -> bool:
        """Ask for a round; ``False`` if one was asked for already (its reason stands)."""
        if self._next_round is NextRound.ASKED:
            return False
        self._next_round = NextRound.ASKED
        self._rejoin_reason = reason
        log.info("member.rejoin_requested", group=self._config.group_id, reason=reason)
        return True

    def take_rejoin(self) -> str:
        """The asked round is being started: its reason (rule 2)."""
        reason, self._rejoin_reason = self._rejoin_reason, ""
        self._next_round = NextRound.NONE
        return reason

    def assigned(self, *, follow_up: bool) -> None:
        """An assignment settles the follow-up it does not announce (rule 2)."""
        if self._next_round is not NextRound.ASKED:
            self._next_round = NextRound.FOLLOW_UP if follow_up else NextRound.NONE

    def coordinator_lost(self) -> None:
        """Rule 3 (a lookup under way keeps what it was going to lead to)."""
        if self._state is not State.FINDING_COORDINATOR:
            resume = self._state is State.STABLE and not self.rejoin_asked
            self._after_lookup = AfterLookup.RESUME if resume else AfterLookup.REJOIN
        self.pending.clear()

    def starting(self) -> None:
        self._after_lookup = AfterLookup.REJOIN

    @property
    def resumes(self) -> bool:
        """The coordinator found again, the member goes back to STABLE (rule 3)."""
        return self._after_lookup is AfterLookup.RESUME and self.generation.is_valid

    def coordinator_found(self, now: int) -> list[Outcome]:
        """The lookup under way found the coordinator: back to STABLE (heartbeat
        now) or a JoinGroup, as rule 3 decided.  Outside a lookup: nothing."""
        if self._state is not State.FINDING_COORDINATOR or not self.lookup.in_flight:
            return []
        self.lookup.found()
        log.debug("member.coordinator_found", group=self._config.group_id)
        if not self.resumes:
            return [Rejoin("coordinator found", immediately=True)]
        self.enter(State.STABLE)
        self.heartbeat.due_now(now)
        return []

    def coordinator_not_found(self, now: int, error: WorkgroupError) -> list[Outcome]:
        """The lookup under way failed: retried after the back-off, or, past the
        connect deadline, FATAL."""
        if self._state is not State.FINDING_COORDINATOR or not self.lookup.in_flight:
            return []
        retry_in_ms = self.lookup.failed(now, error)
        if retry_in_ms is None:
            return [Fail(error)]
        attempt = self.lookup.failures
        # Attempts 1, 2, 4, 8...: an outage is said without a line per retry.
        report = log.warning if attempt & (attempt - 1) == 0 else log.debug
        report(
            "member.coordinator_unavailable",
            group=self._config.group_id,
            attempt=attempt,
            retry_in_ms=retry_in_ms,
            error=str(error),
        )
        return []

    # --- moves (the machine drops its leader's round first) ----------------------

    def find_again(self, now: int, reason: str) -> None:
        """The coordinator is lost: look for it again (rule 3 decides what follows)."""
        log.info("member.coordinator_lost", group=self._config.group_id, reason=reason)
        # Only a STABLE member keeps going after rediscovery; a rebalance in
        # progress is started again.
        self.coordinator_lost()
        self.to_finding(now, immediately=True)

    def forget(self, reset: Reset) -> None:
        """The machine's rule 3: the member id and generation, or the generation,
        are void, and so is what proved the session."""
        if reset is Reset.MEMBER:
            self.generation = NO_GENERATION
        elif reset is Reset.GENERATION:
            self.generation = self.generation.reset()
        else:
            return
        self.heartbeat.forget_proof()

    def to_finding(self, now: int, *, immediately: bool) -> None:
        self.enter(State.FINDING_COORDINATOR)
        self.lookup.lost(now, immediately=immediately)

    def to_joining(self, now: int, reason: str, *, immediately: bool) -> None:
        """Back to JOINING: the next JoinGroup goes now or after the back-off."""
        self.enter(State.JOINING)
        self.join_at = now if immediately else now + self.backoff(self.join_failures)
        if self.rebalance_mode == "eager" and self._holdings.owned:
            # Eager: nothing may be owned by anyone while the group rebalances.
            self._holdings.revoke_before_eager_join(self.heartbeat.last_seen)
        log.debug("member.joining", group=self._config.group_id, reason=reason)

    def metadata_changed(self, reason: str) -> None:
        """The leader must see the new metadata: a round follows, also after the
        round under way if its JoinGroup went without it.  A JoinGroup still to
        go (JOINING, held back by a window or a back-off) carries it: asking
        then would start a round that changes nothing."""
        if self._state in (State.UNJOINED, State.LEAVING, State.CLOSED, State.FATAL):
            return
        if self._state is State.JOINING and not self.pending.rebalancing:
            return
        self.ask_rejoin(reason)

    def released(self, done: tuple[Resource, ...]) -> None:
        """Revoked resources whose work stopped (the machine's rule 9).  A
        cooperative JoinGroup already sent reported them: the round after it hands
        them out (a JoinGroup not yet sent leaves them out anyway)."""
        if (
            done
            and self._holdings.confirm_release
            and self.rebalance_mode == "cooperative"
            and (
                self._state in (State.STABLE, State.ASSIGNING, State.SYNCING)
                or (self._state is State.JOINING and self.pending.rebalancing)
            )
        ):
            self.ask_rejoin(f"released {len(done)} revoked resources")

    def commit_refusal(self) -> ErrorCode | WorkgroupError | None:
        """Why no partition of a commit can be sent now (the machine's rule 11);
        ``None``: each partition is decided on its own."""
        inactive = self._state in (State.CLOSED, State.FATAL, State.UNJOINED)
        if inactive or self._departure.leave_sent:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not self.lookup.known:
            return CoordinatorUnavailableError("OffsetCommit: the coordinator is not known")
        return None

    # --- heartbeats and the session (rules 4 and 5) -----------------------------

    def may_heartbeat(self) -> bool:
        if not self.lookup.known or not self.generation.is_valid or self.pending.has("heartbeat"):
            return False
        if self.pending.rebalancing:
            # Beside a held JoinGroup/SyncGroup, only answered heartbeats prove the
            # session; they matter only while something is owned.
            return bool(self._holdings) and self._state in (State.JOINING, State.SYNCING)
        if self._state is State.LEAVING:
            return not self._departure.leave_sent and self._holding_on
        return self._state in (State.JOINING, State.ASSIGNING, State.STABLE)

    @property
    def _holding_on(self) -> bool:
        """LEAVING: a callback runs or something is releasing."""
        return self._holdings.callbacks_running or bool(self._holdings.releasing)

    def session_end(self) -> int | None:
        """When the coordinator may have evicted us, from what we know for sure."""
        if not self.generation.is_valid or self._state not in _IN_SESSION:
            return None
        if self._state is State.LEAVING and (self._departure.leave_sent or not self._holding_on):
            return None
        if self.pending.rebalancing and not self._holdings:
            return None  # the coordinator holds the request; nothing is at stake
        return self.heartbeat.session_end(rebalancing=self.pending.rebalancing)

    def session_over(self, now: int) -> bool:
        """The session may have ended by ``now`` (rule 5)."""
        session_end = self.session_end()
        return session_end is not None and now >= session_end

    def session_check(self, now: int) -> list[Outcome]:
        """What the session's end by ``now`` calls for (rule 5; the machine's rule 4)."""
        if not self.session_over(now):
            return []
        if self.pending.rebalancing:
            # Unanswered for a session (held, or lost on its way), or starved
            # meanwhile: what we own is no longer safe.  The request goes on; the
            # new assignment hands resources out again.
            return [Lose("no answer proved the session in time")]
        log.warning(
            "member.session_lost",
            group=self._config.group_id,
            member_id=self.generation.member_id,
            generation=self.generation.generation_id,
        )
        return [
            Lose("no heartbeat succeeded within the session timeout, less the margin"),
            CoordinatorLost("session timed out", void_generation=True),
        ]

    def connect_deadline(self) -> int | None:
        """When to give up finding the first coordinator (``connect_timeout_ms``)."""
        if self._state is not State.FINDING_COORDINATOR:
            return None
        return self.lookup.connect_deadline()

    # --- JoinGroup timing -------------------------------------------------------

    def join_ready_at(self) -> int:
        """When the next JoinGroup may go: after the back-off; within the release
        window only once nothing is releasing any more, and within the ready
        window only once every warm-up is ready."""
        at = self.join_at
        if self._holdings.releasing:
            at = max(at, self._holdings.release_window_until)
        if self._intents.unready:
            at = max(at, self._intents.ready_window_until)
        return at

    def join_may_go(self) -> bool:
        """Nothing but the clock holds the next JoinGroup back: a known coordinator,
        no callback running, no round in flight, and (eager) nothing releasing."""
        return (
            self.lookup.known
            and not self._holdings.callbacks_running
            and not self.pending.rebalancing
            and not (self.rebalance_mode == "eager" and self._holdings.releasing)
        )

    # --- timers (rule 6) --------------------------------------------------------

    def next_deadline(self) -> int | None:
        if self._state in (State.CLOSED, State.FATAL, State.UNJOINED):
            return None
        candidates: list[int] = []
        if self._state is State.FINDING_COORDINATOR and self.lookup.next_at is not None:
            candidates.append(self.lookup.next_at)
        connect_deadline = self.connect_deadline()
        if connect_deadline is not None:
            candidates.append(connect_deadline)
        if self._state is State.JOINING and self.join_may_go():
            candidates.append(self.join_ready_at())
        if self.heartbeat.next_at is not None and self.may_heartbeat():
            candidates.append(self.heartbeat.next_at)
        session_end = self.session_end()
        if session_end is not None:
            candidates.append(session_end)
        if self.pending.rebalancing:
            # A watchdog: being woken late tells us the process was frozen or starved,
            # so a held answer read afterwards may be old (heartbeat.py, rule 4).
            candidates.append(self.heartbeat.watchdog_at())
        return min(candidates) if candidates else None


__all__ = ["AfterLookup", "Membership", "NextRound"]
