"""The leader's round as one pipeline of stages.  Sans-I/O.

The member machine hands a leader's JoinGroup answer here and sends what comes
back: the assignor's run (:class:`~workgroup.member.actions.RunAssignor`), then
the members' SyncGroup assignments.  ``workgroup assign`` plays the same
pipeline (:func:`simulate_rebalance`).

Rules:

1. A round begins with the members' metadata read (:func:`read_members`) and
   the assignor's input built from the leader's catalog (:func:`build_input`);
   unreadable metadata, catalog mismatches and ignored claims are logged.  The
   round remembers what it began with (:class:`LeaderRound`) until the
   assignor's answer comes, or the machine drops it (the member left the
   round: a rejoin, a lost coordinator, a failure, a close).
2. The stages, in order, each a function of typed, frozen values:

   - the assignor, the reassignment delay, refusals and balancing, which
     decide the round's target: :class:`RunAssignor` carries their frozen
     description (:class:`~workgroup.member.round_stages.RoundStages`: the
     assignor's input, the delay memory, the refusals, the balancing settings,
     pins and remembered loads, the plan carried out) and the driver runs
     :func:`~workgroup.member.round_stages.run_round_stages` off the event
     loop (the assignor and balancing are the expensive stages); it gives a
     :class:`~workgroup.member.round_stages.RoundResult`.  Balancing comes
     last of the four: it counts no resource the delay withholds and gives
     nothing to a member that refuses it, so no later stage undoes its plan;
   - the round's plan (what is withheld): :func:`plan_stage` gives a
     :class:`~workgroup.member.round_plan.RoundPlan`;
   - balancing's decision: :func:`decision_stage` gives the plan with what
     was decided and its premises;
   - warm-up staging: :func:`warmup_stage` gives a :class:`Warmed`; in a
     keyspace's group the next map then keeps each slice whose move is staged
     with its current owner and token
     (:func:`~workgroup.member.keyspace_stage.keep_staged_slices`);
   - the moves: :class:`~workgroup.member.moves.MoveCounter` counts them.

   The machine records the result (:meth:`LeaderPipeline.conclude`: the delay
   memory, the balancing memory and probe, the plan kept, the moves); the
   plan is encoded (:func:`encode_assignments`).
3. **One plan.**  What a round decided is one
   :class:`~workgroup.member.round_plan.RoundPlan`.  When the balancing stage
   changed the assignor's target and the plan withholds resources, the
   leader keeps it: the follow-up rounds carry it out (the assignor does not
   decide again) while its premises hold (the same members with the same
   kinds, racks and capacities, the same catalog, nobody owning what the plan
   neither gives nor hands it: the owner of a move that warms up keeps the
   resource until the cut-over).  It is dropped when they change or a round
   withholds nothing.  What a follow-up round carries out is the final target
   with the delayed resources where the assignor put them; the delay and
   refusals apply anew, balancing only measures.
4. Deadlines, for a STABLE leader only (the machine asks then): the end of a
   reassignment delay, and the balancing probe; each asks for a round
   (:meth:`LeaderPipeline.delay_over`, :meth:`LeaderPipeline.probe_due`).
5. A follower forgets the delays it kept while it led.
6. **The group's size.**  A Kafka broker keeps a group's state (every member's
   metadata and assignment) as one record of its ``__consumer_offsets`` topic,
   at most ``message.max.bytes`` (1 MiB by default), and fails SyncGroup
   (``UNKNOWN_SERVER_ERROR``) for a larger one.  The leader warns
   (``member.group_record_large``) when a round's metadata and assignments add
   up to more, and again each time they double.  A keyspace's map travels
   whole to and from two members only (:mod:`~workgroup.member.keyspace`
   rule 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from workgroup.assignors.balance import Balanced
from workgroup.assignors.base import Assignment, AssignmentInput, Assignor, MemberInfo
from workgroup.kafka.messages import JoinedMember
from workgroup.log import get_logger
from workgroup.member.actions import RunAssignor
from workgroup.member.delay import ReassignDelay
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace, keyspace_catalog
from workgroup.member.keyspace_stage import (
    KeyspacePlanned,
    KeyspaceRound,
    keep_staged_slices,
    member_maps,
    ranges_to_remember,
    read_keyspace,
    withhold_overlaps,
)
from workgroup.member.load_balancing import BalanceOutcome, BalanceSettings, LeaderBalancing
from workgroup.member.moves import Move, MoveCounter, count_moves
from workgroup.member.round_plan import (
    MAX_ROUNDS,
    Ignored,
    LeaderInput,
    MembersRead,
    Premises,
    RoundPlan,
    build_input,
    decode_refusals,
    encode_assignments,
    plan_round,
    read_members,
    withholding_claims,
)
from workgroup.member.round_stages import RoundResult, RoundStages, run_round_stages
from workgroup.member.warmup import Staged, stage_warmups
from workgroup.protocol.catalog import FrozenCatalog, freeze_catalog
from workgroup.protocol.metadata import MemberMetadata
from workgroup.protocol.protocol import Protocol, RebalanceMode
from workgroup.types import NO_GENERATION_ID, Resource, sorted_resources

log = get_logger(__name__)

#: The largest group state a Kafka broker stores with its defaults (rule 6).
KAFKA_GROUP_RECORD_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LeaderRound:
    """What a round began with (rule 1)."""

    run_id: int
    generation: int
    protocol: Protocol
    members: tuple[JoinedMember, ...]
    read: MembersRead
    resources: int
    catalog_hash: bytes
    #: The assignor's input (the members as it saw them: which kinds each takes).
    input: AssignmentInput
    #: The stages that decide the round's target, as the driver runs them.
    stages: RoundStages
    #: The plan this round carries out (rule 3; ``None``: the assignor decides).
    carried: RoundPlan | None = None
    #: The member leading the round (a keyspace's map goes to it whole).
    leader_id: str = ""

    @property
    def infos(self) -> Mapping[str, MemberInfo]:
        return self.input.members

    @property
    def member_ids(self) -> list[str]:
        return [m.member_id for m in self.members]


@dataclass(frozen=True, slots=True)
class Warmed:
    """The warm-up stage's output: the plan with its moves staged, and what was done."""

    plan: RoundPlan
    staged: Staged


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """A round through every stage: its plan and what to report."""

    plan: RoundPlan
    staged: Staged
    moves: tuple[Move, ...]
    #: The keyspace stage's next map (``None``: not a keyspace's group).
    keyspace: KeyspacePlanned | None = None


# --- the stages (rule 2) -------------------------------------------------------------


def plan_stage(round_: LeaderRound, target: Assignment) -> RoundPlan:
    """What each member is handed and revokes; what is withheld."""
    claims = withholding_claims(round_.protocol.mode, round_.read.metadata)
    return plan_round(round_.member_ids, target, claims)


def decision_stage(
    round_: LeaderRound, plan: RoundPlan, decided: Assignment, outcome: BalanceOutcome
) -> RoundPlan:
    """The plan with what the assignor and the balancing stage decided; with its
    premises when the follow-up rounds are to carry it out (rule 3)."""
    keep = outcome.decided and plan.pending
    return replace(
        plan,
        decided={mid: tuple(rs) for mid, rs in decided.items()},
        balanced=outcome.balanced,
        premises=Premises.of(round_.input) if keep else None,
    )


def warmup_stage(round_: LeaderRound, plan: RoundPlan, max_warmups: int) -> Warmed:
    """Planned moves staged as warm-ups (cooperative rounds only)."""
    if round_.protocol.mode != "cooperative":
        return Warmed(plan, Staged())
    staged_plan, staged = stage_warmups(
        plan,
        round_.read.metadata,
        max_warmups=max_warmups,
        common_version=min(round_.read.common_version, round_.protocol.codec.latest_version),
    )
    return Warmed(staged_plan, staged)


class LeaderPipeline:
    """The leader's rounds, one at a time, and what they keep between rounds:
    the reassignment delays, the balancing memory, the plan being carried out,
    the moves counted."""

    def __init__(
        self,
        group_id: str,
        *,
        reassign_delay_ms: int,
        balance: BalanceSettings,
        max_warmups: int,
        keyspace: KeyspaceConfig | None = None,
        keyspace_view: MemberKeyspace | None = None,
    ) -> None:
        self._group_id = group_id
        self._keyspace = keyspace
        #: This member's view of the keyspace: the state kept across restarts.
        self._keyspace_view = keyspace_view
        #: Ranges of slices the map retired, for the rounds their claims outlast.
        self._slice_ranges: dict[int, tuple[int, int]] = {}
        self._max_warmups = max_warmups
        self._delay = ReassignDelay(reassign_delay_ms)
        self._balancing = LeaderBalancing(balance)
        self._moves = MoveCounter()
        self._round: LeaderRound | None = None
        #: What the last round decided, while the follow-up rounds carry it out.
        self._plan: RoundPlan | None = None
        #: The group's size last warned about (rule 6): warned again once it doubles.
        self._warned_group_bytes = 0

    @property
    def moves_total(self) -> Mapping[tuple[str, str], int]:
        return self._moves.totals

    @property
    def plan(self) -> RoundPlan | None:
        """The plan the next round carries out if its premises hold (rule 3)."""
        return self._plan

    @property
    def balancing(self) -> LeaderBalancing:
        return self._balancing

    def begin(
        self,
        now: int,
        run_id: int,
        protocol: Protocol,
        members: Sequence[JoinedMember],
        *,
        generation: int,
        catalog: FrozenCatalog,
        catalog_hash: bytes,
        leader_id: str = "",
    ) -> RunAssignor:
        """Rule 1: read the members, remember the round, run the assignor.  In a
        keyspace's group the round's catalog is the newest map's slices
        (:func:`~workgroup.member.keyspace_stage.read_keyspace`)."""
        keyspace: KeyspaceRound | None = None
        if self._keyspace is None:
            read = read_members(protocol.codec, members, catalog_hash)
        else:
            read = read_members(protocol.codec, members, b"")
            view = self._keyspace_view
            keyspace = read_keyspace(
                self._keyspace,
                read.metadata,
                group_id=self._group_id,
                persisted=view.persisted if view is not None else None,
            )
            keyspace = replace(keyspace, ranges=self._slice_ranges)
            catalog = freeze_catalog(keyspace_catalog(keyspace.current, self._keyspace.standbys))
            catalog_hash = keyspace.catalog_hash
            # A member with an older map (or none yet) is not a mismatch: it
            # adopts the round's map with its assignment.
            read = replace(read, catalog_mismatches={})
        for member_id, error in read.unreadable.items():
            # The member gets nothing this round; the group keeps working.
            log.error(
                "member.metadata_unreadable",
                group=self._group_id,
                member=member_id,
                error=error,
            )
        for member_id, theirs in read.catalog_mismatches.items():
            log.warning(
                "member.catalog_mismatch",
                group=self._group_id,
                member=member_id,
                generation=generation,
                leader_catalog=catalog_hash.hex(),
                member_catalog=theirs.hex(),
            )
        run, prepared = self.start(
            now,
            run_id,
            protocol,
            members,
            read,
            generation=generation,
            catalog=catalog,
            catalog_hash=catalog_hash,
            keyspace=keyspace,
            leader_id=leader_id,
        )
        if prepared.ignored:
            log.warning(
                "member.ignored",
                group=self._group_id,
                generation=generation,
                ignored={mid: found.as_dict() for mid, found in prepared.ignored.items()},
            )
        return run

    def start(
        self,
        now: int,
        run_id: int,
        protocol: Protocol,
        members: Sequence[JoinedMember],
        read: MembersRead,
        *,
        generation: int,
        catalog: FrozenCatalog,
        catalog_hash: bytes,
        keyspace: KeyspaceRound | None = None,
        leader_id: str = "",
    ) -> tuple[RunAssignor, LeaderInput]:
        """:meth:`begin` with the metadata already read, reporting nothing."""
        prepared = build_input(members, read.metadata, catalog)
        if keyspace is not None:
            prepared = replace(prepared, ignored=_unexpected(prepared.ignored, keyspace.releasing))
        plan = self._plan
        if keyspace is not None:
            plan = None  # the keyspace stage decides every round (its rule 3)
        if plan is not None and not plan.carries(prepared.input):
            plan = self._plan = None  # its premises changed (rule 3)
        carry: dict[str, tuple[Resource, ...]] | None = None
        stopped_early = False
        if plan is not None:
            carry = {mid: tuple(rs) for mid, rs in plan.decided.items()}
            stopped_early = plan.balanced is not None and plan.balanced.stopped_early
        stages = RoundStages(
            assignor=protocol.assignor,
            input=prepared.input,
            member_ids=tuple(m.member_id for m in members),
            now=now,
            claimed=tuple(meta.owned for meta in read.metadata.values()),
            delay=self._delay.memory,
            delay_ms=self._delay.delay_ms,
            refusals={mid: decode_refusals(meta.tags) for mid, meta in read.metadata.items()},
            balance=(
                None
                if keyspace is not None
                else self._balancing.stage(now, carry_stopped_early=stopped_early)
            ),
            carry=carry,
            keyspace=keyspace,
        )
        self._round = LeaderRound(
            run_id=run_id,
            generation=generation,
            protocol=protocol,
            members=tuple(members),
            read=read,
            resources=catalog.size,
            catalog_hash=catalog_hash,
            input=prepared.input,
            stages=stages,
            carried=plan,
            leader_id=leader_id,
        )
        return RunAssignor(run_id, protocol.wire_name, stages), prepared

    def take(self, run_id: int) -> LeaderRound | None:
        """The round the assignor's run ``run_id`` answers, no longer under way
        (``None``: not the round under way)."""
        round_ = self._round
        if round_ is None or round_.run_id != run_id:
            return None
        self._round = None
        return round_

    def drop(self) -> None:
        """The member left the round (rule 1): a late answer is ignored."""
        self._round = None

    def conclude(
        self, now: int, round_: LeaderRound, result: RoundResult | Assignment
    ) -> RoundOutcome:
        """The round's result recorded and the stages after it, in order (rule
        2), reporting nothing.  ``result``: what the round's stages gave
        (:func:`~workgroup.member.round_stages.run_round_stages`), or the
        assignor's answer alone, whose later stages then run here.  Raises a
        :class:`~workgroup.errors.WorkgroupError` the member fails with."""
        if not isinstance(result, RoundResult):
            result = run_round_stages(round_.stages, result)
        self._delay.record(result.delay, now)
        plan = plan_stage(round_, result.target)
        keyspace_round = round_.stages.keyspace
        if result.keyspace is not None and keyspace_round is not None:
            next_map = result.keyspace.plan.map
            claims = withholding_claims(round_.protocol.mode, round_.read.metadata)
            plan = withhold_overlaps(plan, keyspace_round, next_map, claims)
            self._slice_ranges = ranges_to_remember(keyspace_round, next_map)
        outcome = self._balancing.finished(
            now, result.balance, carried=round_.stages.carry is not None
        )
        if result.keyspace is not None:
            planned = result.keyspace.plan
            self._balancing.keyspace_planned(now, changed=planned.changed, waited=planned.waited)
        plan = decision_stage(round_, plan, result.decided, outcome)
        warmed = warmup_stage(round_, plan, self._max_warmups)
        plan = warmed.plan
        keyspace = result.keyspace
        if keyspace is not None and keyspace_round is not None:
            # A slice whose move is staged stays with its owner in the map too.
            keyspace = keep_staged_slices(keyspace, keyspace_round, plan)
        self._plan = plan if plan.premises is not None else None
        balanced = outcome.balanced
        moves = self._moves.observe(
            plan,
            round_.read.metadata,
            balanced={m.resource for m in balanced.moves} if balanced is not None else (),
        )
        return RoundOutcome(plan, warmed.staged, moves, keyspace)

    def finish(
        self, now: int, round_: LeaderRound, result: RoundResult | Assignment
    ) -> tuple[tuple[str, bytes], ...]:
        """The round's SyncGroup assignments from its ``result`` (see
        :meth:`conclude`), reported and encoded."""
        outcome = self.conclude(now, round_, result)
        plan, staged, moves = outcome.plan, outcome.staged, outcome.moves
        if staged.warming or staged.waiting:
            log.info(
                "member.warmups_staged",
                group=self._group_id,
                generation=round_.generation,
                started=staged.started,
                continuing=staged.continuing,
                cut_over=staged.cut_over,
                waiting=staged.waiting,
            )
        if moves:
            log.info(
                "member.moves",
                group=self._group_id,
                generation=round_.generation,
                warmup=sum(m.how == "warmup" for m in moves),
                **count_moves(moves),
            )
        balanced = plan.balanced
        if balanced is not None and (balanced.moves or balanced.returned):
            log.info(
                "member.load_balanced",
                group=self._group_id,
                generation=round_.generation,
                moves=len(balanced.moves),
                returned=len(balanced.returned),
                max_over_mean_before=round(balanced.ratio_before, 3),
                max_over_mean_after=round(balanced.ratio(), 3),
                probe_in_ms=(
                    None if self._balancing.probe_at is None else self._balancing.probe_at - now
                ),
            )
        metadata = round_.read.metadata
        keyspace = outcome.keyspace
        keyspace_round = round_.stages.keyspace
        user_data: bytes | Mapping[str, bytes] = b""
        if keyspace is not None and keyspace_round is not None:
            _log_keyspace(self._group_id, round_.generation, keyspace)
            user_data = member_maps(keyspace, keyspace_round, plan, round_.leader_id, round_.infos)
        out = encode_assignments(
            plan,
            round_.protocol.codec,
            round_.read,
            generation=round_.generation,
            catalog_hash=round_.catalog_hash if keyspace is None else keyspace.catalog_hash,
            user_data=user_data,
            loads_known=self._balancing.loads_known(
                plan.assigned, {mid for mid, meta in metadata.items() if meta.loads}
            ),
        )
        self._check_group_bytes(round_, out)
        log.info(
            "member.assignment_computed",
            group=self._group_id,
            generation=round_.generation,
            members=len(round_.members),
            resources=round_.resources,
            withheld=plan.withheld_count,
            delayed=len(self._delay.delayed),
            common_version=round_.read.common_version,
        )
        return out

    def _check_group_bytes(
        self, round_: LeaderRound, assignments: Sequence[tuple[str, bytes]]
    ) -> None:
        """Rule 6: warn when the members' metadata and assignments would not fit
        in one record of a Kafka broker's default size."""
        size = sum(len(m.metadata) for m in round_.members) + sum(len(b) for _, b in assignments)
        if size <= KAFKA_GROUP_RECORD_BYTES or size < 2 * self._warned_group_bytes:
            return
        self._warned_group_bytes = size
        log.warning(
            "member.group_record_large",
            group=self._group_id,
            generation=round_.generation,
            members=len(round_.members),
            bytes=size,
            limit=KAFKA_GROUP_RECORD_BYTES,
            why="a Kafka broker stores a group's metadata and assignments as one record "
            "of at most message.max.bytes (1 MiB by default) and fails SyncGroup above it",
            fix="raise message.max.bytes on the brokers, or give members fewer resources "
            "(a keyspace: fewer slices per member)",
        )

    # --- between rounds (rules 4 and 5) -------------------------------------------

    @property
    def probe_at(self) -> int | None:
        """When the balancing probe is due (``None``: no probe planned)."""
        return self._balancing.probe_at

    def next_deadline(self) -> int | None:
        due = [t for t in (self._delay.next_at, self._balancing.probe_at) if t is not None]
        return min(due) if due else None

    def delay_over(self, now: int) -> bool:
        due = self._delay.next_at
        return due is not None and now >= due

    def probe_due(self, now: int) -> bool:
        """The balancing probe is due; asking says it was taken."""
        if not self._balancing.due(now):
            return False
        self._balancing.probed()
        return True

    def follow(self) -> None:
        """Rule 5: this member follows; delays kept while leading are forgotten."""
        self._delay.forget()


def _unexpected(
    ignored: Mapping[str, Ignored], releasing: frozenset[Resource]
) -> dict[str, Ignored]:
    """``ignored`` without the claims of slices being released (a merge or a
    split took them away and their handlers are stopping): those are expected."""
    if not releasing:
        return dict(ignored)
    out: dict[str, Ignored] = {}
    for member_id, found in ignored.items():
        kept = replace(found, owned=tuple(r for r in found.owned if r not in releasing))
        if kept:
            out[member_id] = kept
    return out


def _log_keyspace(group_id: str, generation: int, keyspace: KeyspacePlanned) -> None:
    plan = keyspace.plan
    if plan.changed:
        log.info(
            "member.keyspace_planned",
            group=group_id,
            generation=generation,
            epoch=plan.map.epoch,
            slices=len(plan.map.slices),
            splits=plan.splits,
            merges=plan.merges,
            moves=plan.moves,
            moved_share=round(plan.moved, 4),
            max_token=plan.map.max_token,
            waited=plan.waited,
        )


# --- the what-if -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rebalance:
    """A rebalance played to its end by :func:`simulate_rebalance`."""

    #: Every round played; the first is what the leader hands out now.
    rounds: tuple[RoundPlan, ...]
    #: The last round withheld nothing (False: :data:`MAX_ROUNDS` were not enough).
    converged: bool
    #: What the members' metadata had that the catalog does not (see
    #: :func:`build_input`), owned resources included even under eager protocols.
    ignored: dict[str, Ignored]
    #: The first round's assignor input: the group before the rebalance, with
    #: what every member reported owning.
    input: AssignmentInput

    @property
    def first(self) -> RoundPlan:
        return self.rounds[0]

    @property
    def target(self) -> dict[str, tuple[Resource, ...]]:
        """The assignment once the follow-up rounds are done (the last round's target)."""
        return self.rounds[-1].target

    @property
    def balanced(self) -> tuple[Balanced | None, ...]:
        """What the load balancing stage did in each round (``None``: it did not run)."""
        return tuple(plan.balanced for plan in self.rounds)


def simulate_rebalance(
    assignor: Assignor,
    members: Sequence[JoinedMember],
    metadata: Mapping[str, MemberMetadata],
    catalog: FrozenCatalog,
    mode: RebalanceMode,
    *,
    max_rounds: int = MAX_ROUNDS,
    balance: BalanceSettings | None = None,
    loads: Mapping[Resource, float] | None = None,
) -> Rebalance:
    """Play a rebalance of ``members`` through the leader's pipeline
    (:class:`LeaderPipeline`, the same stages as the live leader) until nothing
    is withheld.

    ``metadata`` is what each member would send if it joined holding what it
    owns now.  Under ``"eager"`` members revoke everything before joining (the
    first round's ``revoked`` lists it all) and report it as their previous
    assignment, which sticky assignors keep in place; nothing is withheld, so
    one round settles.  Under ``"cooperative"``, each follow-up round, members
    have given up what they revoked and rejoin owning what they were handed (in
    the previous round's generation); the pipeline runs again, and carries out
    what the first round decided while its premises hold.  At most
    ``max_rounds`` rounds are played.

    ``balance``: the load balancing settings (``None``: no balancing);
    ``loads``: the leader's view of the loads, besides those in the metadata.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    protocol = Protocol(name=assignor.name, assignor=assignor, rebalance=mode)
    pipeline = LeaderPipeline(
        "what-if",
        reassign_delay_ms=0,
        balance=balance if balance is not None else BalanceSettings(max_moves=0),
        max_warmups=0,
    )
    if loads:
        pipeline.balancing.loads = dict(loads)
    current = dict(metadata)
    owned_before = {mid: sorted_resources(set(meta.owned)) for mid, meta in metadata.items()}
    generation = max([meta.owned_generation for meta in metadata.values()] + [0]) + 1
    version = protocol.codec.latest_version
    rounds: list[RoundPlan] = []
    first: LeaderInput | None = None
    converged = False
    while len(rounds) < max_rounds:
        read = MembersRead(current, {mid: version for mid in current}, version, {}, {})
        run, prepared = pipeline.start(
            0,
            len(rounds),
            protocol,
            members,
            read,
            generation=generation,
            catalog=catalog,
            catalog_hash=b"",
        )
        if first is None:
            first = prepared
        round_ = pipeline.take(run.run_id)
        assert round_ is not None
        plan = pipeline.conclude(0, round_, run_round_stages(run.stages)).plan
        if mode == "eager" and not rounds:
            plan = replace(plan, revoked={mid: owned_before.get(mid, ()) for mid in plan.assigned})
        rounds.append(plan)
        if not plan.pending:
            converged = True
            break
        current = {
            mid: replace(
                meta,
                owned=plan.assigned[mid],
                owned_generation=generation if plan.assigned[mid] else NO_GENERATION_ID,
            )
            for mid, meta in current.items()
        }
        generation += 1
    assert first is not None
    return Rebalance(tuple(rounds), converged, first.ignored, first.input)


__all__ = [
    "LeaderPipeline",
    "LeaderRound",
    "Rebalance",
    "RoundOutcome",
    "Warmed",
    "decision_stage",
    "plan_stage",
    "simulate_rebalance",
    "warmup_stage",
]
