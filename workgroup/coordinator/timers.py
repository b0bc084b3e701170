"""Keyed deadlines for the sans-I/O coordinator: a heap with lazy cancellation.

The coordinator arms one timer per key (a member's session, a group's join
phase, ...).  Re-arming a key is the hot path: every heartbeat pushes its
member's session deadline forward.  So postponing a deadline only updates a
dict; the heap entry stays where it is, and when it surfaces it is either
dropped (cancelled), pushed back to the real deadline (postponed), or fired.
Only bringing a deadline *earlier* pushes a new heap entry.  The heap holds at
most one live entry per key plus stale ones that are discarded as they surface.

Time is whatever integer the caller passes (milliseconds); nothing here reads a
clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Timers(Generic[K]):
    """Deadlines keyed by ``K``; at most one pending deadline per key."""

    __slots__ = ("_deadlines", "_heap", "_queued", "_seq")

    def __init__(self) -> None:
        #: The deadline each armed key fires at.
        self._deadlines: dict[K, int] = {}
        #: The deadline of the one heap entry that stands for each key.
        self._queued: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._deadlines)

    def __contains__(self, key: object) -> bool:
        return key in self._deadlines

    def schedule(self, key: K, deadline_ms: int) -> None:
        """Arm ``key`` to fire at ``deadline_ms``, replacing any earlier arming."""
        self._deadlines[key] = deadline_ms
        queued = self._queued.get(key)
        if queued is None or deadline_ms < queued:
            self._push(key, deadline_ms)

    def cancel(self, key: K) -> None:
        self._deadlines.pop(key, None)

    def deadline(self, key: K) -> int | None:
        return self._deadlines.get(key)

    def clear(self) -> None:
        self._deadlines.clear()
        self._queued.clear()
        self._heap.clear()

    def next_deadline(self) -> int | None:
        """The earliest armed deadline (exact: stale heap entries are settled first)."""
        heap = self._heap
        while heap:
            due, _, key = heap[0]
            if self._queued.get(key) != due:
                heapq.heappop(heap)  # superseded by an earlier entry for the same key
                continue
            deadline = self._deadlines.get(key)
            if deadline is None:
                heapq.heappop(heap)
                del self._queued[key]
                continue
            if deadline > due:
                heapq.heappop(heap)
                self._push(key, deadline)
                continue
            return due
        return None

    def earliest_hint(self) -> int | None:
        """A lower bound of :meth:`next_deadline` in O(1): the heap is not settled.

        ``None`` when nothing is armed.  Otherwise no armed deadline is earlier
        than the result, which may be earlier than the real next deadline (a
        postponed or cancelled key's old entry).  It only moves earlier when a
        deadline is brought forward, so a driver whose timer is armed no later
        than this hint need not re-arm it.
        """
        if not self._deadlines:
            return None
        return self._heap[0][0]

    def pop_due(self, now_ms: int) -> K | None:
        """Disarm and return the key with the earliest deadline <= ``now_ms``, if any.

        Callers fire one key at a time because firing may arm or cancel others.
        """
        due = self.next_deadline()
        if due is None or due > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._queued[key]
        del self._deadlines[key]
        return key

    def due(self, now_ms: int) -> Iterator[K]:
        """Pop due keys one by one (re-evaluated after each, so firing may re-arm)."""
        while (key := self.pop_due(now_ms)) is not None:
            yield key

    def _push(self, key: K, deadline_ms: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        self._queued[key] = deadline_ms
