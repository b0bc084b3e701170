"""The callers of ``commit_offsets`` waiting for the member machine's answer
(asyncio).

Rules:

1. Each commit gets its own id and future; the machine's
   :class:`~workgroup.member.actions.CommitDone` answers it by id (an answer
   for a caller gone is dropped).
2. A caller's entry goes once it has its answer or gave up waiting; when the
   member closes, every caller still waiting gets a
   :class:`~workgroup.member.errors.MemberClosedError` (their requests were
   cancelled).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

from workgroup.member.actions import CommitDone, CommitOutcome, Partition
from workgroup.member.errors import MemberClosedError

Outcomes = Mapping[Partition, CommitOutcome]


class CommitWaiters:
    """Commits whose answers are awaited, by commit id."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Outcomes]] = {}

    def open(self) -> tuple[int, asyncio.Future[Outcomes]]:
        """A new commit's id and the future its answer goes to (rule 1)."""
        commit_id = next(self._ids)
        answer: asyncio.Future[Outcomes] = asyncio.get_running_loop().create_future()
        self._waiting[commit_id] = answer
        return commit_id, answer

    def done(self, commit_id: int) -> None:
        """Rule 2: the caller has its answer, or gave up."""
        self._waiting.pop(commit_id, None)

    def answer(self, done: CommitDone) -> None:
        """Rule 1."""
        waiter = self._waiting.get(done.commit_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(done.outcomes)

    def closed(self) -> None:
        """Rule 2: the member closed."""
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(MemberClosedError("the member closed before the commit"))


__all__ = ["CommitWaiters"]
