"""The sans-I/O state machine of one group member (no sockets, no clock, no asyncio).

The driver feeds events (each with ``now`` in milliseconds of a monotonic clock)
and carries out the actions they return; it calls :meth:`MemberMachine.tick`
when :meth:`MemberMachine.next_deadline` passes.

States::

    UNJOINED ─start─▶ FINDING_COORDINATOR ─found─▶ JOINING ─JoinGroup─▶ SYNCING ─SyncGroup─▶ STABLE
                         ▲                           ▲   (leader: ASSIGNING ─▶ SYNCING)       │
                         └── coordinator lost ───────┴──── rejoin: rebalance, follow-up ◀─────┘
    any ─close─▶ LEAVING ─▶ CLOSED                any ─fatal error─▶ FATAL

The machine ties its parts together, each a module of its own with its rules
at its top: where the member stands in its group
(:mod:`~workgroup.member.membership`: the state and its legal moves from
:mod:`~workgroup.member.transitions`, the generation, the requests in flight
of :mod:`~workgroup.member.requests`, the coordinator lookup of
:mod:`~workgroup.member.lookup`, the heartbeat and session timing of
:mod:`~workgroup.member.heartbeat`, the metadata versions spoken, and the next
round it expects), the answers it reads (:mod:`~workgroup.member.responses`:
JoinGroup, SyncGroup, Heartbeat, failed requests and the errors they share),
the requests it sends (:mod:`~workgroup.member.outgoing`: JoinGroup with its
metadata, SyncGroup, Heartbeat, LeaveGroup, and what is due), what it holds
and the callbacks reporting it (:mod:`~workgroup.member.holdings`, on
:mod:`~workgroup.member.ownership`: releasing, the callback-error policy and
the foreign-resource filter), taking an assignment
(:mod:`~workgroup.member.assignment`), closing and failing
(:mod:`~workgroup.member.closing`, with how far closing has come in
:mod:`~workgroup.member.departure`), the catalog it reads
(:mod:`~workgroup.member.catalog`), its drain, refusals, warm-ups and restart
probe (:mod:`~workgroup.member.intents`), the generation each commit goes
under (:mod:`~workgroup.member.commits`) and the leader's round
(:mod:`~workgroup.member.pipeline`: the assignor, reassignment delay,
refusals, balancing, warm-up staging and moves; shared stages in
:mod:`~workgroup.member.round_plan`; when the round starts, what its answer
leads to and what a STABLE leader watches: :mod:`~workgroup.member.leading`),
and the application's requests (:mod:`~workgroup.member.application`: rounds,
catalogs, drain, refusals, warm-ups ready, releases).  The parts are built in
one place (:mod:`~workgroup.member.parts`), and what the machine shows of them
is :mod:`~workgroup.member.views`'.  The parts never call the machine: they
return typed :mod:`~workgroup.member.outcomes` (lose, fail, rejoin, find the
coordinator again, leave, lead, sync, take an assignment), which the machine
routes in order; the machine only routes between them.
:meth:`MemberMachine.next_deadline` is the earliest of its parts' deadlines.
Its settings are a :class:`~workgroup.member.config.MemberConfig`, its outputs
the :mod:`~workgroup.member.actions`.

Rules:

1. Every request is sent under the current :class:`Generation` (id and member
   id); a response whose request is no longer pending, or whose generation is
   no longer the current one, is stale and ignored.
2. At most one JoinGroup or SyncGroup is in flight, and at most one Heartbeat.
   Heartbeats are sent only with a valid generation and no JoinGroup/SyncGroup
   in flight (the coordinator holds those, and they keep the session alive),
   every ``heartbeat_interval_ms`` — also while callbacks run and while closing
   (rule 9): the machine never waits for a callback except before it sends a
   JoinGroup or LeaveGroup.  While
   the last assignment says a follow-up round is due, every 50 ms: the
   revoking members start it, the others must notice it to join it.
3. Errors, as Kafka's clients handle them (each code's ``MemberAction`` in
   :data:`workgroup.errors.ERROR_MEANINGS`):
   UNKNOWN_MEMBER_ID → resources lost, member id and generation reset, rejoin now;
   ILLEGAL_GENERATION → resources lost, generation reset (member id kept), rejoin now;
   REBALANCE_IN_PROGRESS → rejoin now (on a heartbeat: only while STABLE);
   MEMBER_ID_REQUIRED → rejoin now with the member id the coordinator gave;
   NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS,
   a disconnect or a timeout → find the coordinator again (keeping a STABLE
   assignment; an interrupted rebalance rejoins afterwards);
   other retriable errors → retry after an exponential back-off;
   FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT,
   GROUP_MAX_SIZE_REACHED, GROUP_AUTHORIZATION_FAILED (and malformed-request
   errors) → FATAL with a :class:`~workgroup.member.errors.MemberFatalError`
   saying what was expected; the machine logs ``member.fatal`` once.
   Finding the coordinator: each failed lookup is retried after the back-off
   (the machine's, the only retry policy); ``connect_timeout_ms`` bounds the
   search for the first coordinator (then FATAL, CoordinatorUnavailableError).
4. Session: if no request sent at time *t* proved the session (a heartbeat
   answered, or a commit: rule 11) and ``t + session timeout`` less the
   session margin passes, the coordinator may evict this
   member at any moment, so its resources are reported lost (a margin before
   anyone else can be handed them), and it rejoins to learn where it stands.
   A JoinGroup or SyncGroup in flight does not extend this: the coordinator
   keeps a member whose request it holds, but a request lost on its way (a
   partition) keeps nothing, and until an answer comes the member cannot tell
   which it was.  So while it owns something, the member keeps heartbeating
   beside the held request, on a second connection (a coordinator answers one
   connection's requests in order): a coordinator answers them
   (REBALANCE_IN_PROGRESS, or NONE once the round is complete) and restarts
   the session timer, as Kafka does.  A failed heartbeat there is only a
   missing proof.  If no answer proves the session in time, what is owned is
   reported lost and comes back with the new assignment; the request goes on.
   (The timing itself: :class:`~workgroup.member.heartbeat.HeartbeatTimer`.)
5. A member rejoins cooperatively only if every protocol it offers is
   cooperative (Kafka's rule: the group may pick any of them, and an eager
   leader withholds nothing); otherwise it is eager.
   Eager members revoke every owned resource before (re)joining, and report
   what they revoked in their metadata (sticky assignors keep it in place; it
   withholds nothing).  Cooperative members (KIP-429) keep them and report
   them in their metadata; the leader withholds any resource another member
   still owns, the owner revokes it when it sees its new assignment and then
   rejoins (the follow-up round), and the resource is handed out in that round.
   The leader's round is computed by :mod:`~workgroup.member.round_plan` (shared
   with ``workgroup assign``); every assignment of a round that withheld
   something carries the ``pending`` flag, and a member is *settled* only once
   it holds an assignment without it.
6. Version probing: the leader encodes assignments with the highest metadata
   version every member supports and says so; a member whose metadata used
   another version re-encodes with that one and rejoins.
7. Close (without ``confirm_release``; with it, rule 9): a member that will
   leave, stable under a cooperative protocol,
   owning something, not alone in the group and without a reassignment delay
   (which keeps its resources for a restart instead), first hands over: it
   rejoins tagged as leaving, takes nothing, keeps working until the round
   revokes its resources, then leaves (the others, expecting the follow-up
   round, notice it within 50 ms); if that takes longer than three heartbeat
   intervals plus a second, it just leaves, though never with a JoinGroup or
   SyncGroup of its own in flight: that answer may name it leader, and a group
   whose leader left before syncing waits on it (Tansu never recovers), so it
   waits for the answer, syncs if it leads, and leaves after (the session rules
   bound the wait by the rebalance timeout).  Otherwise owned resources are
   revoked (lost, if the generation is no longer valid); once released (rule
   9) dynamic members send LeaveGroup, static members do not (their instance id keeps their place
   until the session times out) unless closed with ``leave=True`` (scale-down:
   LeaveGroup with the instance id).  ``fail``: what is owned is lost, dynamic
   members send LeaveGroup, then FATAL.
8. Callbacks report a change already made: ``resources`` (never empty) is the
   change, ``owned`` everything owned afterwards.  The machine issues them in
   the order of the changes, and the driver runs them one after another in
   that order: a close's revocation comes after the callbacks issued before
   it, and the LeaveGroup only once the last has returned (rule 9).  ``release`` drops resources
   without a callback (the application gave them up) and rejoins so that the
   assignor hands them to another member.  An assignment is trusted only so
   far: resources of kinds the member does not take, or (when the leader used
   the same catalog) not in its catalog, are dropped and logged
   (``member.assignment_foreign``), never handed to the application.
9. Release: a revoked resource is *releasing* until the application's work on
   it has stopped — until its ``on_revoked`` callback returns, or, for a
   machine built with ``confirm_release=True`` (the runtime), until
   :meth:`MemberMachine.released` names it, each resource on its own.  A
   cooperative member reports releasing resources as owned, so the leader
   withholds them; its JoinGroup waits up to ``RELEASE_WINDOW_MS``
   (:mod:`~workgroup.member.holdings`) after a revocation for the releases (less
   once nothing is releasing), so that prompt
   handlers' resources go out in that round, and a release after the JoinGroup
   that reported it asks for another round, which hands it out.  A release
   that leaves others releasing holds that JoinGroup up to ``GATHER_MS`` for
   them (releases come in bunches; each round missed costs the others'
   heartbeat interval).  With
   ``confirm_release`` no round is asked for a resource while it is releasing
   (the leader would only withhold it again, round after round): its release
   asks for the round.  Eager members send no JoinGroup while anything is releasing (they heartbeat
   meanwhile; the rebalance timeout bounds the wait, so the runtime refuses a
   grace period that cannot fit).
   LEAVING heartbeats while a callback runs or anything is releasing, and sends
   LeaveGroup (or closes) only afterwards; if the session ends all the same,
   what is left is lost.  With ``confirm_release``, a
   member that will leave under a cooperative protocol (not alone, no
   reassignment delay) closes by revoking everything at once and rejoining
   tagged as leaving, taking nothing (its JoinGroup waits for releases like
   any other, so that prompt ones move in its round):
   each resource moves in the round after its own release, and the member
   leaves once nothing is releasing (never with a JoinGroup or SyncGroup of its
   own in flight, rule 7) — at once if everything was released in the window.  A loss drops
   what is releasing too (reported in ``on_lost`` with ``confirm_release``).
10. Refusal: :meth:`MemberMachine.refuse` releases resources (rule 8) and
   names them in the member's metadata (tag ``workgroup.refuses``) until the
   refusal ends.  The leader moves a refused resource from the assignor's
   target to the member taking its kind with the fewest resources that does
   not refuse it; if there is none, it stays (run rather than idle).
11. Commits (:meth:`MemberMachine.commit`; bookkeeping in
   :mod:`~workgroup.member.commits`): the machine chooses the generation each
   partition is committed under, here and nowhere else.  A partition committed
   for a resource the member owns goes under the current generation; for a
   resource it gave up and is still releasing (rule 9), under the generation it
   was given up in, or under the current one if the member joined that after
   giving it up with a cooperative protocol (it reported the resource as owned
   in that JoinGroup, so no other member holds it in that generation; under
   the generation it was given up in, a handler finishing its work could not
   commit once another round ran meanwhile, and waited out its grace period);
   a partition naming no resource goes under the current generation.  Nothing
   is sent, and the commit is answered at once, where it cannot be accepted: a
   member not started, CLOSED, FATAL or past its LeaveGroup gets
   UNKNOWN_MEMBER_ID; a member without a coordinator, a retriable
   :class:`~workgroup.member.errors.CoordinatorUnavailableError`; a partition
   for a resource neither owned nor releasing (lost, released),
   ILLEGAL_GENERATION; one that would go without a valid generation,
   ILLEGAL_GENERATION (UNKNOWN_MEMBER_ID without a member id).  One
   OffsetCommit goes per generation; the commit is answered
   (:class:`~workgroup.member.actions.CommitDone`) once every part is.
   An answer to an OffsetCommit sent under the current generation counts like
   a heartbeat's: NONE, REBALANCE_IN_PROGRESS or OFFSET_METADATA_TOO_LARGE on
   any partition (the coordinator checked the member) proves the session alive
   when it was sent (rule 4); UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and
   FENCED_INSTANCE_ID are handled as rule 3 says (while LEAVING, as a refused
   heartbeat: what is left is lost).  Other answers (the coordinator moved,
   a topic error) say nothing about the member: the heartbeats find out.
   Answers to older generations, or read after the coordinator was lost, only
   go to the caller.  A coordinator answers one connection in order: a commit
   sent after a JoinGroup is answered after it, when it is one of an older
   generation already.
12. Callback failures (:meth:`MemberMachine.callback_failed`): a callback that
   raised has still made its change.  ``on_callback_error="fail"`` fails the
   member (a :class:`~workgroup.member.errors.CallbackError` whose cause is the
   callback's exception; a dynamic member leaves) unless it is FATAL or CLOSED
   already; otherwise the machine logs ``member.callback_failed`` and, with
   ``"release"``, gives the resources of a failed ``on_assigned`` back as
   :meth:`MemberMachine.release` does (rule 8); ``"log"`` keeps the change.
13. Load balancing (:mod:`~workgroup.member.load_balancing`): the member's
   metadata carries the smoothed loads of what it owns; as leader, the
   balancing stage runs after the assignor, the reassignment delay and
   refusals (:mod:`~workgroup.member.round_stages`), and while a round ends over
   the tolerance a probing rebalance is requested ``balance_interval_ms``
   later (only while STABLE, with no other rejoin pending).
14. Warm-ups (``warm_up``; the leader's staging: :mod:`~workgroup.member.warmup`):
   resources in an assignment's ``warming`` that it does not assign are warmed
   up: ``on_warming`` starts them, and they are reported in the metadata as
   ``warming`` (and ``ready`` once :meth:`MemberMachine.ready` names them; that
   asks for a round, the cut-over, whose JoinGroup waits up to ``GATHER_MS``
   for warm-ups not ready yet, so that those ready together cut over together).
   A warming resource the assignment then assigns is simply added
   (``on_assigned``: the application promotes its warm work); one the
   assignment neither assigns nor warms, and every warm-up at a loss, a
   hand-over or a close, ends with ``on_warming_ended``.  Warming resources are
   never owned: they are not committed for, not reported owned, not revoked.
   A member without ``warm_up`` ignores ``warming``.
15. Drain (:meth:`MemberMachine.drain`): a draining member stays in the group
   and takes nothing (tag ``workgroup.draining``); the leader moves what it
   owns to others, with warm-ups where they can.  Undraining rejoins to take
   work again.  A static member restarted after draining to stop may be
   answered, without a rebalance, with the empty assignment it had drained to
   (Kafka's coordinator does not rebalance for a known static member): a static
   member whose first assignment in a process is empty, nothing withheld,
   while its catalog lists work of its kinds asks for one round, with a tag
   ``workgroup.asks`` counting such asks (a known member's JoinGroup with
   unchanged metadata gets the same generation back).
16. Moves by reason (:mod:`~workgroup.member.moves`): as leader, each round's
   final plan is classified (why each move begins, with a warm-up or plain),
   logged as ``member.moves`` and counted in :attr:`MemberMachine.moves_total`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from workgroup.assignors.base import Assignment
from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import (
    CommitTopic,
    GroupResult,
    HeartbeatResult,
    JoinGroupResult,
    LeaveGroupResult,
    OffsetCommitResult,
    SyncGroupResult,
)
from workgroup.log import get_logger
from workgroup.member.actions import Action, CallbackErrorPolicy, Partition
from workgroup.member.config import MemberConfig
from workgroup.member.errors import CallbackError
from workgroup.member.holdings import GiveBack
from workgroup.member.outcomes import (
    CoordinatorLost,
    Fail,
    Lead,
    Leave,
    Lose,
    LostWhileLeaving,
    Outcome,
    Rejoin,
    Sync,
    Take,
)
from workgroup.member.parts import build_parts
from workgroup.member.round_stages import RoundResult
from workgroup.member.transitions import State
from workgroup.member.views import MemberViews
from workgroup.protocol.catalog import Catalog
from workgroup.types import Resource

log = get_logger(__name__)


class MemberMachine(MemberViews):
    """One member's view of its group (see the module docstring for the rules)."""

    def __init__(
        self,
        config: MemberConfig,
        catalog: Catalog | None = None,
        *,
        confirm_release: bool = False,
        on_callback_error: CallbackErrorPolicy = "log",
    ) -> None:
        parts = build_parts(
            config, catalog, confirm_release=confirm_release, on_callback_error=on_callback_error
        )
        super().__init__(config, parts)
        self.error: WorkgroupError | None = None
        self._out = parts.out
        self._ids = parts.ids
        self._responses = parts.responses
        self._outgoing = parts.outgoing
        self._taker = parts.taker
        self._commit_router = parts.commit_router
        self._requests = parts.requests
        #: The newest ``now`` seen (refusals end by it).
        self._now = 0

    # --- events -------------------------------------------------------------

    def start(self, now: int) -> list[Action]:
        self._observe(now)
        if self.state is State.UNJOINED:
            self._membership.lookup.start(now)
            self._membership.starting()
            self._membership.to_finding(now, immediately=True)
        return self._drain(now)

    def coordinator_found(self, now: int) -> list[Action]:
        self._observe(now)
        self._route(now, self._membership.coordinator_found(now))
        return self._drain(now)

    def find_coordinator_failed(self, now: int, error: WorkgroupError) -> list[Action]:
        self._observe(now)
        self._route(now, self._membership.coordinator_not_found(now, error))
        return self._drain(now)

    def response(self, now: int, request_id: int, result: GroupResult) -> list[Action]:
        self._observe(now)
        pending = self._membership.pending.pop(request_id)
        if pending is None or self.state in (State.CLOSED, State.FATAL):
            log.debug("member.stale_response", request_id=request_id)
            return self._drain(now)
        if pending.kind == "join" and isinstance(result, JoinGroupResult):
            self._route(now, self._responses.join(now, pending, result))
        elif pending.kind == "sync" and isinstance(result, SyncGroupResult):
            self._route(now, self._responses.sync(now, pending, result))
        elif pending.kind == "heartbeat" and isinstance(result, HeartbeatResult):
            self._route(now, self._responses.heartbeat(now, pending, result))
        elif pending.kind == "leave" and isinstance(result, LeaveGroupResult):
            self._closing.finish()
        else:
            raise TypeError(f"{type(result).__name__} does not answer a {pending.kind} request")
        return self._drain(now)

    def request_failed(self, now: int, request_id: int, error: WorkgroupError) -> list[Action]:
        self._observe(now)
        pending = self._membership.pending.pop(request_id)
        if pending is None or self.state in (State.CLOSED, State.FATAL):
            return self._drain(now)
        if pending.kind == "leave":
            self._closing.finish()
        else:
            self._route(now, self._responses.failed(now, pending, error))
        return self._drain(now)

    def callback_done(self, now: int, callback_id: int) -> list[Action]:
        self._observe(now)
        self._membership.released(self._holdings.callback_done(callback_id))
        if self.state is State.LEAVING:
            self._closing.maybe_finish(now)
        return self._drain(now)

    def released(self, now: int, resources: Iterable[Resource]) -> list[Action]:
        """The application stopped working on revoked ``resources`` (rule 9): they
        may go to another member now.  Others are ignored."""
        self._observe(now)
        self._requests.released(now, resources)
        return self._drain(now)

    def assignment_done(
        self, now: int, run_id: int, result: RoundResult | Assignment | WorkgroupError
    ) -> list[Action]:
        """The answer to :class:`~workgroup.member.actions.RunAssignor` ``run_id``:
        what :func:`~workgroup.member.round_stages.run_round_stages` gave, or the
        assignor's answer alone (the stages after it then run here), or the
        failure."""
        self._observe(now)
        self._route(now, self._leading.assigned(now, run_id, result))
        return self._drain(now)

    def resources_changed(self, now: int, catalog: Catalog) -> list[Action]:
        self._observe(now)
        self._requests.catalog_read(catalog)
        return self._drain(now)

    def request_rejoin(self, now: int, reason: str) -> list[Action]:
        """Ask for a rebalance (e.g. the member's metadata changed)."""
        self._observe(now)
        self._requests.rejoin(reason)
        return self._drain(now)

    def ready(self, now: int, resources: Iterable[Resource]) -> list[Action]:
        """Warm-ups of ``resources`` are ready (rule 14): the next round may cut
        them over, so one is asked for.  An owned resource may be reported ready
        too (a standby holder ready to take over: the leader's assignor sees it
        in ``MemberInfo.ready``).  Other resources are ignored."""
        self._observe(now)
        self._requests.ready(now, resources)
        return self._drain(now)

    def drain(self, now: int, draining: bool = True) -> list[Action]:
        """Start (or end) draining (rule 15); a round follows the change."""
        self._observe(now)
        self._requests.drain(draining)
        return self._drain(now)

    def release(self, now: int, resources: Iterable[Resource], reason: str) -> list[Action]:
        """Stop owning ``resources`` without a callback (the application gave them
        up, e.g. its ``on_assigned`` failed) and rejoin so that the assignor hands
        them to another member.  Resources this member does not own are ignored."""
        self._observe(now)
        self._requests.give_up(resources, reason)
        return self._drain(now)

    def refuse(
        self, now: int, resources: Iterable[Resource], for_ms: int, reason: str
    ) -> list[Action]:
        """Give up ``resources`` as :meth:`release` does and refuse them for
        ``for_ms`` (rule 10): the leader hands them to another member."""
        self._observe(now)
        resources = tuple(resources)
        self._requests.refuse(resources, now + for_ms)
        return self.release(now, resources, reason)

    @property
    def refused(self) -> frozenset[Resource]:
        """What this member refuses now (rule 10)."""
        return self._intents.refused(self._now)

    def fail(self, now: int, error: WorkgroupError) -> list[Action]:
        """The application stops the member as failed: what it owns is reported
        lost, a dynamic member leaves the group, and the member enters FATAL."""
        self._observe(now)
        if self.state not in (State.CLOSED, State.FATAL):
            self._fail(now, error, leave=True)
        return self._drain(now)

    def tick(self, now: int) -> list[Action]:
        self._observe(now)
        return self._drain(now)

    def callback_failed(
        self, now: int, callback_id: int, error: BaseException, *, traceback: str | None = None
    ) -> list[Action]:
        """The callback ``callback_id`` raised ``error`` (its change stands): apply
        the callback-error policy (rule 12), then count it done.  ``traceback``:
        the callback's, to log with ``member.callback_failed``."""
        self._observe(now)
        verdict = self._holdings.callback_failed(
            callback_id,
            error,
            traceback,
            may_fail=self.state not in (State.FATAL, State.CLOSED),
        )
        if isinstance(verdict, CallbackError):
            self._fail(now, verdict, leave=True)  # logged as member.fatal
        elif isinstance(verdict, GiveBack):
            self._requests.give_up(verdict.resources, verdict.reason)
        return self.callback_done(now, callback_id)

    # --- commits (rule 11) ----------------------------------------------------

    def commit(
        self,
        now: int,
        commit_id: int,
        topics: Sequence[CommitTopic],
        resources: Mapping[Partition, Resource] | None = None,
    ) -> list[Action]:
        """Commit ``topics``' offsets; ``resources`` names the resource a partition's
        commit is for (its generation follows from it: rule 11).  Answered with
        :class:`~workgroup.member.actions.CommitDone` (at once for what is refused)."""
        self._observe(now)
        self._out += self._commit_router.commit(
            now,
            commit_id,
            topics,
            resources or {},
            refusal=self._membership.commit_refusal(),
            current=self._membership.generation,
            ownership=self._holdings.ownership,
            ids=self._ids,
            mode=self._membership.rebalance_mode,
        )
        return self._drain(now)

    def commit_answered(
        self, now: int, request_id: int, result: OffsetCommitResult | WorkgroupError
    ) -> list[Action]:
        """The coordinator answered an OffsetCommit (or its request failed): the
        commit's caller gets it, and the machine reads it as rule 11 says."""
        self._observe(now)
        # Sent to a coordinator the member has given up since: its session is
        # for the rediscovery to find out.
        reading = self.state not in (State.CLOSED, State.FATAL) and self._membership.lookup.known
        done, verdict = self._commit_router.answered(
            request_id, result, current=self._membership.generation if reading else None
        )
        if done is not None:
            self._out.append(done)
        self._route(now, self._responses.commit_verdict(now, verdict))
        return self._drain(now)

    def close(self, now: int, *, leave: bool | None = None) -> list[Action]:
        """Revoke, leave and close.  ``leave``: send LeaveGroup even as a static
        member (it then gives up its place at once); ``None``: only if dynamic."""
        self._observe(now)
        self._route(now, self._closing.close(now, leave=leave))
        return self._drain(now)

    def _leave_now(self, now: int) -> None:
        self._pipeline.drop()
        self._closing.leave_now(now)

    # --- progress -----------------------------------------------------------

    def _observe(self, now: int) -> None:
        """Notice when the machine ran long after its deadline (frozen process,
        starved event loop): answers that arrive now may be arbitrarily old."""
        self._now = max(self._now, now)
        late_ms = self._membership.heartbeat.observe(now)
        if late_ms is not None:
            log.warning("member.starved", late_ms=late_ms)

    def _drain(self, now: int) -> list[Action]:
        self._progress(now)
        out = list(self._out)
        self._out.clear()
        self._membership.heartbeat.expect(self.next_deadline())
        return out

    def _progress(self, now: int) -> None:
        if self.state is State.LEAVING:
            self._closing.progress(now)
            return
        if self.state in (State.CLOSED, State.FATAL, State.UNJOINED):
            return
        session = self._membership.session_check(now)
        self._route(now, session)
        lost = any(isinstance(outcome, CoordinatorLost) for outcome in session)
        if not lost:
            self._leading.catalog_check()
        # A hand-over out of time ends now, even in the tick that lost the
        # coordinator: its deadline is past and nothing else would wake it.
        if self._closing.handed_over(now):
            # Handed over (or out of time: revoke what is left), or all released.
            self._leave_now(now)
            return
        if lost:
            return
        self._leading.round_check(now)
        if (
            self.state is State.STABLE
            and not self._membership.rejoin_asked
            and self.loads.changed(self.owned, now, self.config.balance)
        ):
            self._membership.metadata_changed("loads changed since they were published")
        if (
            self.state is State.STABLE
            and self._membership.rejoin_asked
            and not self._holdings.callbacks_running
        ):
            self._to_joining(now, self._membership.take_rejoin(), immediately=True)
        if self.state is State.FINDING_COORDINATOR:
            self._route(now, self._outgoing.find_if_due(now))
            return
        if self.state is State.JOINING:
            due = self._outgoing.join_if_due(now, seen=self._now, catalog_hash=self._catalog.digest)
            self._route(now, due)
        self._outgoing.heartbeat_if_due(now)

    # --- transitions ----------------------------------------------------------

    def _enter(self, target: State) -> None:
        self._membership.enter(target)

    def _coordinator_lost(self, now: int, reason: str) -> None:
        self._pipeline.drop()
        self._membership.find_again(now, reason)

    def _to_joining(self, now: int, reason: str, *, immediately: bool) -> None:
        self._pipeline.drop()
        self._membership.to_joining(now, reason, immediately=immediately)

    def _send_sync(self, now: int, assignments: tuple[tuple[str, bytes], ...]) -> None:
        self._enter(State.SYNCING)
        self._outgoing.sync(now, assignments)

    def _fail(self, now: int, error: WorkgroupError, *, leave: bool = False) -> None:
        if self.state is State.FATAL:
            return  # the first error stands (and was logged)
        self._pipeline.drop()
        self.error = error
        self._closing.fail(now, error, leave=leave)

    def _lose(self, reason: str) -> None:
        self._closing.lose(reason)

    # --- outcomes of the parts (member/outcomes.py) ---------------------------

    def _route(self, now: int, outcomes: Sequence[Outcome]) -> None:
        """Carry out what a part asked for, in its order."""
        for outcome in outcomes:
            match outcome:
                case Lose(reason):
                    self._lose(reason)
                case Fail(error, leave):
                    self._fail(now, error, leave=leave)
                case Rejoin(reason, immediately, reset):
                    self._membership.forget(reset)
                    self._to_joining(now, reason, immediately=immediately)
                case CoordinatorLost(reason, void_generation):
                    if void_generation:
                        self._membership.generation = self._membership.generation.reset()
                    self._coordinator_lost(now, reason)
                case LostWhileLeaving():
                    self._closing.session_ended(now)
                case Leave():
                    self._leave_now(now)
                case Lead(protocol, result):
                    self._leading.lead(now, protocol, result)
                case Sync(follow, assignments):
                    if follow:
                        self._pipeline.follow()
                    self._send_sync(now, assignments)
                case Take(protocol, data):
                    self._taker.take(now, protocol, data, self._catalog)
                    self.loads.assigned(loads_known=data.loads_known)


__all__ = ["MemberMachine"]
