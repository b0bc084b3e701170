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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from workgroup.errors import ErrorCode, ProtocolError, WorkgroupError
from workgroup.kafka.messages import (
    CommitPartition,
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    OffsetCommitResult,
)
from workgroup.member.actions import CommitDone, CommitOutcome, Partition
from workgroup.member.generation import Generation


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


__all__ = ["Commits", "SentCommit", "commit_result", "split_by_generation"]
