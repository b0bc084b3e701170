"""The machine's side of the leader's round: when it starts, what the assignor's
answer leads to, and what a STABLE leader watches between rounds.  Sans-I/O.

The stages of the round itself are :mod:`~workgroup.member.pipeline`'s; this
part only decides when the machine calls them and what follows.

Rules:

1. A round starts on the JoinGroup answer that names this member leader (the
   :class:`~workgroup.member.outcomes.Lead` outcome): the member enters
   ASSIGNING and the assignor's run goes out
   (:class:`~workgroup.member.actions.RunAssignor`).
2. Only the answer to the run under way counts, and only while ASSIGNING.  An
   assignor that failed, or a stage after it that refused its result, fails the
   member (a dynamic one leaves); otherwise the leader syncs with the round's
   assignments.
3. A STABLE leader asks for a round, while none is asked for already, when its
   catalog changed since its last assignment (:meth:`Leading.catalog_check`),
   and when a reassignment delay is over or the balancing probe is due
   (:meth:`Leading.round_check`), in that order.
4. Its deadline is the pipeline's, for a STABLE leader only.
"""

from __future__ import annotations

from workgroup.assignors.base import Assignment
from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import JoinGroupResult
from workgroup.member.actions import Action
from workgroup.member.catalog import MemberCatalog
from workgroup.member.errors import AssignorError
from workgroup.member.membership import Membership
from workgroup.member.outcomes import Fail, Outcome, Sync
from workgroup.member.pipeline import LeaderPipeline
from workgroup.member.requests import RequestIds
from workgroup.member.round_stages import RoundResult
from workgroup.member.transitions import State
from workgroup.protocol.protocol import Protocol


class Leading:
    """When the leader's round runs, and what it asks of the machine."""

    def __init__(
        self,
        membership: Membership,
        pipeline: LeaderPipeline,
        catalog: MemberCatalog,
        ids: RequestIds,
        out: list[Action],
    ) -> None:
        self._membership = membership
        self._pipeline = pipeline
        self._catalog = catalog
        self._ids = ids
        self._out = out

    @property
    def _stable_leader(self) -> bool:
        membership = self._membership
        return membership.state is State.STABLE and membership.is_leader

    def lead(self, now: int, protocol: Protocol, result: JoinGroupResult) -> None:
        """Rule 1: the round begins; the assignor's run goes out."""
        membership = self._membership
        run = self._pipeline.begin(
            now,
            self._ids.take(),
            protocol,
            result.members,
            generation=membership.generation.generation_id,
            catalog=self._catalog.frozen,
            catalog_hash=self._catalog.digest,
            leader_id=result.leader,
        )
        membership.enter(State.ASSIGNING)
        self._out.append(run)

    def assigned(
        self, now: int, run_id: int, result: RoundResult | Assignment | WorkgroupError
    ) -> list[Outcome]:
        """Rule 2: what the answer to the run ``run_id`` leads to (the round's
        stages' result, or the assignor's answer alone: see
        :meth:`~workgroup.member.pipeline.LeaderPipeline.conclude`)."""
        pipeline = self._pipeline
        round_ = pipeline.take(run_id) if self._membership.state is State.ASSIGNING else None
        if round_ is None:
            return []
        if isinstance(result, WorkgroupError):
            name = round_.protocol.assignor.name
            return [Fail(AssignorError(f"assignor {name!r} failed: {result}"), leave=True)]
        try:
            assignments = pipeline.finish(now, round_, result)
        except WorkgroupError as exc:
            return [Fail(exc, leave=True)]
        return [Sync(follow=False, assignments=assignments)]

    def catalog_check(self) -> None:
        """Rule 3: the catalog changed since this leader's last assignment."""
        membership = self._membership
        if (
            self._stable_leader
            and self._catalog.changed_since_assignment
            and not membership.rejoin_asked
        ):
            membership.ask_rejoin("resources changed")

    def round_check(self, now: int) -> None:
        """Rule 3: a reassignment delay is over, or the balancing probe is due."""
        membership, pipeline = self._membership, self._pipeline
        if self._stable_leader and pipeline.delay_over(now) and not membership.rejoin_asked:
            membership.ask_rejoin("reassignment delay over")
        if self._stable_leader and not membership.rejoin_asked and pipeline.probe_due(now):
            membership.ask_rejoin("load over the imbalance tolerance: probing rebalance")

    def next_deadline(self) -> int | None:
        """Rule 4."""
        due = self._pipeline.next_deadline()
        return due if self._stable_leader else None
