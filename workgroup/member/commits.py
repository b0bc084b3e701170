"""The member's offset commits: the generation each partition is committed under,
and the commits in flight until every part is answered.  Sans-I/O.

Rule 11 of the member machine (its module docstring) says what a commit may do
to the member; this module keeps the bookkeeping:

1. The machine names, for every partition of a commit, the generation it goes
   under, or the error code it answers at once without sending anything.
   :func:`split_by_generation` groups the partitions: one OffsetCommit per
   generation, the refused ones aside.
2. A commit is answered (:class:`~workgroup.member.actions.CommitDone`) once
   every OffsetCommit it sent is answered or failed: each partition gets its
   code from the coordinator, the machine's code, or the error its request
   failed with.  Commits are never dropped as stale: their callers wait.
3. :class:`CommitRouter` chooses each partition's generation: a partition for a
   resource owned, or naming none, goes under the current generation; for a
   resource still releasing, under the generation it was given up in, unless a
   cooperative member joined a later generation since (its JoinGroup reported
   the resource as owned: no other member holds it in the current generation),
   then under the current one; for any
   other resource, ILLEGAL_GENERATION; without a valid generation,
   ILLEGAL_GENERATION (UNKNOWN_MEMBER_ID without a member id).  The machine
   says first whether anything may be sent at all (its ``refusal``).
4. An answer read under the generation it was sent in says something about the
   member only through its codes' :class:`~workgroup.errors.MemberCheck`
   (:data:`~workgroup.errors.ERROR_MEANINGS`): a refusal
   (:class:`MembershipRefused`, the most severe code first) or a proof of the
   session at the send time (:class:`SessionProved`).  Commits keep no timer of
   their own: the driver's request timeout ends each OffsetCommit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from workgroup.errors import (
    MEMBERSHIP_ENDINGS,
    ErrorCode,
    MemberCheck,
    ProtocolError,
    WorkgroupError,
)
from workgroup.kafka.messages import (
    CommitPartition,
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    OffsetCommit,
    OffsetCommitResult,
)
from workgroup.log import get_logger
from workgroup.member.actions import Action, CommitDone, CommitOutcome, Partition, SendRequest
from workgroup.member.generation import NO_GENERATION_ID, Generation
from workgroup.member.ownership import Ownership
from workgroup.member.requests import RequestIds
from workgroup.protocol.protocol import RebalanceMode
from workgroup.types import Resource

log = get_logger(__name__)


def split_by_generation(
    topics: Sequence[CommitTopic], generation_of: Callable[[Partition], int | ErrorCode]
) -> tuple[dict[int, tuple[CommitTopic, ...]], dict[Partition, ErrorCode]]:
    """The partitions of ``topics`` by the generation ``generation_of`` names for
    each (in their order), and those it refuses with an error code (rule 1)."""
    by_generation: dict[int, dict[str, list[CommitPartition]]] = {}
    refused: dict[Partition, ErrorCode] = {}
    for topic in topics:
        for part in topic.partitions:
            chosen = generation_of((topic.name, part.partition))
            if isinstance(chosen, ErrorCode):
                refused[(topic.name, part.partition)] = chosen
            else:
                by_generation.setdefault(chosen, {}).setdefault(topic.name, []).append(part)
    return {
        generation: tuple(CommitTopic(name, tuple(parts)) for name, parts in names.items())
        for generation, names in by_generation.items()
    }, refused


@dataclass(frozen=True, slots=True)
class SentCommit:
    """One OffsetCommit sent for a commit."""

    commit_id: int
    #: The generation (and member id) it was sent under.
    generation: Generation
    sent_at: int
    partitions: tuple[Partition, ...]


@dataclass(slots=True)
class _Open:
    outcomes: dict[Partition, CommitOutcome] = field(default_factory=dict)
    waiting: int = 0


class Commits:
    """The commits not answered yet, by commit id, and their requests by request id."""

    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}
        self._sent: dict[int, SentCommit] = {}

    def open(self, commit_id: int, refused: Mapping[Partition, ErrorCode]) -> None:
        self._open[commit_id] = _Open(dict(refused))

    def sent(self, request_id: int, sent: SentCommit) -> None:
        self._sent[request_id] = sent
        self._open[sent.commit_id].waiting += 1

    def done_if_complete(self, commit_id: int) -> CommitDone | None:
        """The answer of ``commit_id`` once nothing of it is in flight (rule 2)."""
        open_ = self._open.get(commit_id)
        if open_ is None or open_.waiting:
            return None
        del self._open[commit_id]
        return CommitDone(commit_id, open_.outcomes)

    def answered(
        self, request_id: int, result: OffsetCommitResult | WorkgroupError
    ) -> tuple[SentCommit | None, CommitDone | None]:
        """Record the answer to ``request_id``: the request it answers (``None``:
        unknown) and the commit's answer if it was the last part (rule 2)."""
        sent = self._sent.pop(request_id, None)
        if sent is None:
            return None, None
        open_ = self._open[sent.commit_id]
        open_.waiting -= 1
        if isinstance(result, WorkgroupError):
            for partition in sent.partitions:
                open_.outcomes[partition] = result
        else:
            codes = {(t.name, p.partition): p.error for t in result.topics for p in t.partitions}
            for partition in sent.partitions:
                code = codes.get(partition)
                open_.outcomes[partition] = (
                    code
                    if code is not None
                    else ProtocolError(
                        f"OffsetCommit answered without {partition[0]}-{partition[1]}"
                    )
                )
        return sent, self.done_if_complete(sent.commit_id)


@dataclass(frozen=True, slots=True)
class MembershipRefused:
    """A commit under the current generation was refused for the member itself."""

    code: ErrorCode


@dataclass(frozen=True, slots=True)
class SessionProved:
    """The coordinator checked the member: its session was alive at ``sent_at``."""

    sent_at: int


CommitVerdict = MembershipRefused | SessionProved


class CommitRouter:
    """Sends each commit under the generations rule 3 names and reads the answers
    (rule 4); the machine acts on what they say about the member."""

    def __init__(self, group_id: str, instance_id: str | None, timeout_ms: int) -> None:
        self._group_id = group_id
        self._instance_id = instance_id
        self._timeout_ms = timeout_ms
        #: Commits not answered yet: never dropped, their callers wait.
        self._commits = Commits()

    def commit(
        self,
        now: int,
        commit_id: int,
        topics: Sequence[CommitTopic],
        resources: Mapping[Partition, Resource],
        *,
        refusal: ErrorCode | WorkgroupError | None,
        current: Generation,
        ownership: Ownership,
        ids: RequestIds,
        mode: RebalanceMode,
    ) -> list[Action]:
        """The requests for a commit, and its answer when nothing of it is sent;
        ``refusal``: why nothing may be sent (an error answers every partition)."""
        if isinstance(refusal, WorkgroupError):
            outcomes = {(t.name, p.partition): refusal for t in topics for p in t.partitions}
            return [CommitDone(commit_id, outcomes)]
        member_id = current.member_id

        def generation_of(partition: Partition) -> int | ErrorCode:
            if refusal is not None:
                return refusal
            resource = resources.get(partition)
            if resource is None or resource in ownership.resources:
                generation = current.generation_id
            else:
                given_up_in = ownership.given_up_in(resource)
                if given_up_in is None:
                    return ErrorCode.ILLEGAL_GENERATION  # lost or released: not ours
                generation = given_up_in
                if mode == "cooperative" and current.generation_id > given_up_in:
                    generation = current.generation_id  # claimed in the join since (rule 3)
            if generation != NO_GENERATION_ID:
                return generation
            return ErrorCode.ILLEGAL_GENERATION if member_id else ErrorCode.UNKNOWN_MEMBER_ID

        by_generation, refused = split_by_generation(topics, generation_of)
        if refused:
            log.debug("member.commit_refused", group=self._group_id, partitions=len(refused))
        self._commits.open(commit_id, refused)
        out: list[Action] = []
        for generation, parts in by_generation.items():
            request = OffsetCommit(
                group_id=self._group_id,
                generation_id=generation,
                member_id=member_id,
                topics=parts,
                group_instance_id=self._instance_id,
            )
            request_id = ids.take()
            under = Generation(generation, member_id, None)
            partitions = tuple((t.name, p.partition) for t in parts for p in t.partitions)
            self._commits.sent(request_id, SentCommit(commit_id, under, now, partitions))
            out.append(
                SendRequest(request_id, request, self._timeout_ms, may_wait_behind_held=True)
            )
        done = self._commits.done_if_complete(commit_id)
        if done is not None:
            out.append(done)
        return out

    def answered(
        self,
        request_id: int,
        result: OffsetCommitResult | WorkgroupError,
        *,
        current: Generation | None,
    ) -> tuple[CommitDone | None, CommitVerdict | None]:
        """Record an answer: the commit's answer once complete, and what it says
        about the member (rule 4) when ``current`` (the generation the machine
        reads answers under; ``None``: none) is the one it was sent in."""
        sent, done = self._commits.answered(request_id, result)
        if (
            sent is None
            or current is None
            or not isinstance(result, OffsetCommitResult)
            or not current.answers_to(sent.generation)
        ):
            return done, None
        checks = {p.error: p.error.meaning.check for t in result.topics for p in t.partitions}
        refused = [code for code, check in checks.items() if check is MemberCheck.REFUSED]
        if refused:
            code = min(refused, key=lambda c: MEMBERSHIP_ENDINGS.index(c.meaning.member))
            log.warning(
                "member.commit_fenced",
                group=self._group_id,
                member_id=current.member_id,
                generation=current.generation_id,
                error=code.name,
            )
            return done, MembershipRefused(code)
        if MemberCheck.PASSED in checks.values():
            return done, SessionProved(sent.sent_at)
        return done, None


def commit_result(
    topics: Sequence[CommitTopic], outcomes: Mapping[Partition, CommitOutcome]
) -> OffsetCommitResult:
    """A commit's answer as OffsetCommit's result, for its caller; raises the
    error a request of it failed with, if any."""
    codes: dict[Partition, ErrorCode] = {}
    for partition, outcome in outcomes.items():
        if isinstance(outcome, WorkgroupError):
            raise outcome
        codes[partition] = outcome
    return OffsetCommitResult(
        tuple(
            CommitTopicResult(
                topic.name,
                tuple(
                    CommitPartitionResult(p.partition, codes[(topic.name, p.partition)])
                    for p in topic.partitions
                ),
            )
            for topic in topics
        )
    )


__all__ = [
    "CommitRouter",
    "CommitVerdict",
    "Commits",
    "MembershipRefused",
    "SentCommit",
    "SessionProved",
    "commit_result",
    "split_by_generation",
]
