"""The leader's round as one pipeline of stages.  Sans-I/O.

The member machine hands a leader's JoinGroup answer here and sends what comes
back: the assignor's run (:class:`~workgroup.member.actions.RunAssignor`), then
the members' SyncGroup assignments.

Rules:

1. A round begins with the members' metadata read (:func:`read_members`) and
   the assignor's input built from the leader's catalog (:func:`build_input`);
   unreadable metadata, catalog mismatches and ignored claims are logged.  The
   round remembers what it began with (:class:`LeaderRound`) until the
   assignor's answer comes, or the machine drops it (the member left the
   round: a rejoin, a lost coordinator, a failure, a close).
2. The assignor's target then goes through the stages, in order: the
   reassignment delay (:mod:`~workgroup.member.delay`), refusals
   (:func:`apply_refusals`), the round's plan (:func:`plan_round`: what is
   withheld), balancing (:mod:`~workgroup.member.balancing`: the assignor
   runs wrapped, and its plan is finished here), warm-up staging
   (:mod:`~workgroup.member.warmup`, cooperative rounds only), and the moves
   (:mod:`~workgroup.member.moves`, counted and logged); the plan is encoded
   (:func:`encode_assignments`).
3. Deadlines, for a STABLE leader only (the machine asks then): the end of a
   reassignment delay, and the balancing probe; each asks for a round
   (:meth:`LeaderPipeline.delay_over`, :meth:`LeaderPipeline.probe_due`).
4. A follower forgets the delays it kept while it led.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from workgroup.assignors.base import Assignment, MemberInfo
from workgroup.kafka.messages import JoinedMember
from workgroup.log import get_logger
from workgroup.member.actions import RunAssignor
from workgroup.member.balancing import BalanceSettings, LeaderBalancing
from workgroup.member.delay import ReassignDelay
from workgroup.member.leader import (
    MembersRead,
    apply_refusals,
    build_input,
    decode_refusals,
    encode_assignments,
    plan_round,
    read_members,
    withholding_claims,
)
from workgroup.member.moves import MoveCounter, count_moves
from workgroup.member.warmup import stage_warmups
from workgroup.protocol.catalog import FrozenCatalog
from workgroup.protocol.protocol import Protocol

log = get_logger(__name__)


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
    #: The members as the assignor saw them (which kinds each takes).
    infos: Mapping[str, MemberInfo]


class LeaderPipeline:
    """The leader's rounds, one at a time, and what they keep between rounds:
    the reassignment delays, the balancing memory, the moves counted."""

    def __init__(
        self,
        group_id: str,
        *,
        reassign_delay_ms: int,
        balance: BalanceSettings,
        max_warmups: int,
    ) -> None:
        self._group_id = group_id
        self._max_warmups = max_warmups
        self._delay = ReassignDelay(reassign_delay_ms)
        self._balancing = LeaderBalancing(balance)
        self._moves = MoveCounter()
        self._round: LeaderRound | None = None

    @property
    def moves_total(self) -> Mapping[tuple[str, str], int]:
        return self._moves.totals

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
    ) -> RunAssignor:
        """Rule 1: read the members, remember the round, run the assignor."""
        read = read_members(protocol.codec, members, catalog_hash)
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
        prepared = build_input(members, read.metadata, catalog)
        if prepared.ignored:
            log.warning(
                "member.ignored",
                group=self._group_id,
                generation=generation,
                ignored={mid: found.as_dict() for mid, found in prepared.ignored.items()},
            )
        self._round = LeaderRound(
            run_id=run_id,
            generation=generation,
            protocol=protocol,
            members=tuple(members),
            read=read,
            resources=catalog.size,
            catalog_hash=catalog_hash,
            infos=prepared.input.members,
        )
        return RunAssignor(
            run_id,
            protocol.wire_name,
            self._balancing.wrap(run_id, protocol.assignor, now),
            prepared.input,
        )

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

    def finish(
        self, now: int, round_: LeaderRound, target: Assignment
    ) -> tuple[tuple[str, bytes], ...]:
        """The round's SyncGroup assignments from the assignor's ``target``: the
        stages after the assignor, in order (rule 2); raises a
        :class:`~workgroup.errors.WorkgroupError` the member fails with."""
        member_ids = [m.member_id for m in round_.members]
        claims = withholding_claims(round_.protocol.mode, round_.read.metadata)
        target = self._delay.apply(
            now,
            member_ids,
            target,
            (r for meta in round_.read.metadata.values() for r in meta.owned),
        )
        target = apply_refusals(  # rule 10
            target,
            round_.infos,
            {
                member_id: decode_refusals(meta.tags)
                for member_id, meta in round_.read.metadata.items()
            },
        )
        plan = plan_round(member_ids, target, claims)
        balanced = self._balancing.finished(round_.run_id, now, plan.withheld)
        if round_.protocol.mode == "cooperative":
            plan, staged = stage_warmups(
                plan,
                round_.read.metadata,
                max_warmups=self._max_warmups,
                common_version=min(
                    round_.read.common_version, round_.protocol.codec.latest_version
                ),
            )
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
        moves = self._moves.observe(
            plan,
            round_.read.metadata,
            balanced={m.resource for m in balanced.moves} if balanced is not None else (),
        )
        if moves:
            log.info(
                "member.moves",
                group=self._group_id,
                generation=round_.generation,
                warmup=sum(m.how == "warmup" for m in moves),
                **count_moves(moves),
            )
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
        out = encode_assignments(
            plan,
            round_.protocol.codec,
            round_.read,
            generation=round_.generation,
            catalog_hash=round_.catalog_hash,
        )
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

    # --- between rounds (rules 3 and 4) -------------------------------------------

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
        """Rule 4: this member follows; delays kept while leading are forgotten."""
        self._delay.forget()


__all__ = ["LeaderPipeline", "LeaderRound"]
