"""The stages of the leader's round that decide its target, as one pure function
run off the event loop.  Sans-I/O.

The leader's pipeline (:mod:`~workgroup.member.pipeline`) describes the round
in a :class:`RoundStages` (frozen: the assignor, its input and what the later
stages need, read from the leader's memory when the round begins); the driver
runs :func:`run_round_stages` in a worker thread (the assignor and balancing
are the expensive stages: balancing alone costs about 0.3 s at 2,000 members
and a million resources) and hands the :class:`RoundResult` back to the
machine, which records it.

Rules:

1. The stages run in this order, each on the previous one's output:

   - the assignor (or, when the round carries out an earlier decision, that
     decision: :class:`~workgroup.member.round_plan.RoundPlan`);
   - the reassignment delay (:func:`delay_stage`): what it withholds is not
     handed out, nor counted by the stages after it;
   - refusals (:func:`refusal_stage`);
   - balancing (:func:`~workgroup.member.load_balancing.balance_stage`), which
     gives nothing to a member that refuses it.

   A later stage never undoes an earlier one's work.  In a keyspace's group
   the keyspace stage (:mod:`~workgroup.member.keyspace_stage`) is the only
   stage here: its planner places, moves and balances the slices, and its map
   is the target (the pipeline's warm-up staging, after this, may keep a moved
   slice with its owner: the map follows, the keyspace stage's rule 6).
2. The delay's memory records where the final target put each resource (after
   refusals and balancing): a resource is delayed when the member it was
   really handed to leaves.
3. What the round decided, for follow-up rounds to carry out, is the final
   target plus the delayed resources where the assignor put them: a delay
   that ends while the decision is carried out then hands them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from workgroup.assignors.base import Assignment, AssignmentInput, Assignor
from workgroup.assignors.standby import StandbyAssignor
from workgroup.member.delay import Delayed, DelayMemory, delay_target
from workgroup.member.keyspace_stage import KeyspacePlanned, KeyspaceRound, run_keyspace_stage
from workgroup.member.load_balancing import BalanceResult, BalanceStage, balance_stage
from workgroup.member.round_plan import apply_refusals
from workgroup.types import Resource


@dataclass(frozen=True, slots=True)
class RoundStages:
    """One round's stages as the leader describes them when the round begins."""

    assignor: Assignor
    input: AssignmentInput
    #: The members of the round, in their JoinGroup order.
    member_ids: tuple[str, ...]
    #: When the round began (the delay's deadlines count from it).
    now: int
    #: What each member reports owning (a resource owned is not delayed); per
    #: member, so that the event loop does not walk every resource.
    claimed: tuple[tuple[Resource, ...], ...] = ()
    #: The leader's delay memory and the delay (0: no delay).
    delay: DelayMemory = field(default_factory=DelayMemory)
    delay_ms: int = 0
    #: ``member id -> the resources it refuses``.
    refusals: Mapping[str, frozenset[Resource]] = field(default_factory=dict)
    #: The balancing stage (``None``: balancing is off).
    balance: BalanceStage | None = None
    #: An earlier round's decision to carry out instead of the assignor's.
    carry: Mapping[str, tuple[Resource, ...]] | None = None
    #: The keyspace stage, in a keyspace's group (``None``: the assignor decides).
    keyspace: KeyspaceRound | None = None


@dataclass(frozen=True, slots=True)
class RoundResult:
    """What the stages decided: the round's target, and what the leader records."""

    #: The target after every stage.
    target: Assignment
    #: What follow-up rounds carry out (rule 3).
    decided: Assignment
    #: The delay memory for the next round (rule 2).
    delay: DelayMemory
    #: What balancing did (``None``: balancing is off).
    balance: BalanceResult | None
    #: The keyspace stage's next map (``None``: not a keyspace's group).
    keyspace: KeyspacePlanned | None = None


def delay_stage(stages: RoundStages, target: Assignment) -> Delayed:
    """The target without the resources whose reassignment is delayed."""
    claimed = (r for owned in stages.claimed for r in owned)
    return delay_target(
        stages.delay, stages.delay_ms, stages.now, stages.member_ids, target, claimed
    )


def refusal_stage(stages: RoundStages, target: Assignment) -> Assignment:
    """The target with refused resources moved to members that take them."""
    return apply_refusals(target, stages.input.members, stages.refusals)


def run_round_stages(stages: RoundStages, target: Assignment | None = None) -> RoundResult:
    """The round's stages in order (rule 1); ``target``: the assignor's answer,
    when the caller ran it (unused when the round carries out an earlier
    decision).  Raises what the assignor raises."""
    data = stages.input
    if stages.keyspace is not None:
        planned = run_keyspace_stage(stages.keyspace, data, stages.refusals)
        return RoundResult(planned.target, planned.target, stages.delay, None, planned)
    if stages.carry is not None:
        target = {mid: list(stages.carry.get(mid, ())) for mid in data.members}
    elif target is None:
        target = stages.assignor.assign(data)
    delayed = delay_stage(stages, target)
    final = refusal_stage(stages, delayed.target)
    balanced: BalanceResult | None = None
    if stages.balance is not None:
        base = stages.assignor
        balanced = balance_stage(
            stages.balance,
            final,
            data,
            refused=stages.refusals,
            carried=stages.carry is not None,
            exclusive=bool(getattr(base, "exclusive", True)) or isinstance(base, StandbyAssignor),
        )
        final = balanced.assignment
    until = delayed.memory.until
    decided = final
    if until:
        decided = {
            mid: [*final.get(mid, ()), *(r for r in rs if r in until)] for mid, rs in target.items()
        }
        for mid, rs in final.items():
            decided.setdefault(mid, list(rs))
    memory = delayed.memory
    if stages.delay_ms > 0:
        memory = replace(memory, handed=final)
    return RoundResult(final, decided, memory, balanced)


__all__ = ["RoundResult", "RoundStages", "delay_stage", "refusal_stage", "run_round_stages"]
