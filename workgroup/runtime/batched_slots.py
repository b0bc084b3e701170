"""Lease slots committed and read through a group member's coordinator.

Calls made in the same event-loop pass are sent together: one OffsetFetch and
one OffsetCommit carry every slot (up to :data:`MAX_BATCH` partitions each), so
taking 10,000 leases after a rebalance costs a handful of requests, not 20,000.
Per-partition errors come back to each caller.  Each commit names the resource
it is for; the member's state machine chooses the generation it goes under
(its rule 11), so a revoked lease's commits in its grace period are refused once
the group moved on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from workgroup.client.slots import fetch_topics
from workgroup.errors import CoordinatorError, ErrorCode, ProtocolError
from workgroup.kafka.messages import CommitPartition, CommitTopic
from workgroup.member.driver import GroupMember
from workgroup.runtime.lease import Committed, FenceOrigin, Slot
from workgroup.types import Resource

#: Most partitions in one batched request.
MAX_BATCH = 2_000
#: Callers woken per event-loop pass.
WAKE_SLICE = 500

#: A commit call: slot, offset, metadata, and the resource it is for.
_Commit = tuple[Slot, int, str | None, Resource | None]

K = TypeVar("K")
V = TypeVar("V")


class _Batcher(Generic[K, V]):
    """Collects calls made in one loop pass and sends them as one request."""

    def __init__(self, send: Callable[[list[K]], Awaitable[dict[K, V | BaseException]]]) -> None:
        self._send = send
        self._waiting: dict[K, list[asyncio.Future[V]]] = {}
        self._scheduled = False
        self._sending: set[asyncio.Future[None]] = set()

    async def call(self, key: K) -> V:
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, {}
        keys = list(waiting)
        for start in range(0, len(keys), MAX_BATCH):
            chunk = {k: waiting[k] for k in keys[start : start + MAX_BATCH]}
            task = asyncio.ensure_future(self._deliver(chunk))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
            task.add_done_callback(_no_result)

    async def _deliver(self, chunk: dict[K, list[asyncio.Future[V]]]) -> None:
        try:
            results = await self._send(list(chunk))
        except BaseException as exc:
            for futures in chunk.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for index, (key, futures) in enumerate(chunk.items()):
            if index and index % WAKE_SLICE == 0:
                # Waking thousands of callers in one loop pass would delay the
                # member's timers (heartbeats): let the loop run in between.
                await asyncio.sleep(0)
            result = results.get(key)
            for future in futures:
                if future.done():
                    continue
                if result is None:
                    future.set_exception(ProtocolError(f"no answer for {key} in the batch"))
                elif isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)


def _no_result(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()  # delivered to the callers already


class MemberSlotStore:
    """OffsetCommit and OffsetFetch of lease slots, as ``member`` (its generation,
    member id and instance id: the coordinator's fence), batched."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member
        self._fetches: _Batcher[Slot, Committed] = _Batcher(self._fetch_many)
        self._commits: _Batcher[_Commit, ErrorCode] = _Batcher(self._commit_many)

    async def commit(
        self, slot: Slot, offset: int, metadata: str | None, *, resource: Resource | None = None
    ) -> ErrorCode:
        return await self._commits.call((slot, offset, metadata, resource))

    async def fetch(self, slot: Slot) -> Committed:
        return await self._fetches.call(slot)

    def fence_origin(self) -> FenceOrigin:
        """Who commits, where and how: what a portable fence needs (``lease.fence()``)."""
        member = self._member
        return FenceOrigin(
            bootstrap=member.bootstrap,
            security=member.security,
            group_id=member.config.group_id,
            member_id=member.member_id,
            instance_id=member.config.instance_id,
            generation=member.generation,
        )

    async def _commit_many(self, calls: list[_Commit]) -> dict[_Commit, ErrorCode | BaseException]:
        # One commit per slot per request: a later call waits.
        first: dict[Slot, _Commit] = {}
        later = []
        for call in calls:
            if call[0] in first:
                later.append(call)
            else:
                first[call[0]] = call
        topics: dict[str, list[CommitPartition]] = {}
        resources: dict[tuple[str, int], Resource] = {}
        for slot, offset, metadata, resource in first.values():
            topics.setdefault(slot.topic, []).append(
                CommitPartition(slot.partition, offset, metadata)
            )
            if resource is not None:
                resources[(slot.topic, slot.partition)] = resource
        result = await self._member.commit_offsets(
            [CommitTopic(name, tuple(parts)) for name, parts in topics.items()],
            resources=resources,
        )
        errors = {
            Slot(topic.name, p.partition): p.error
            for topic in result.topics
            for p in topic.partitions
        }
        out: dict[_Commit, ErrorCode | BaseException] = {}
        for slot, call in first.items():
            error = errors.get(slot)
            out[call] = (
                error
                if error is not None
                else ProtocolError(f"OffsetCommit answered without {slot.topic}-{slot.partition}")
            )
        for call in later:
            try:
                out[call] = await self.commit(*call[:3], resource=call[3])
            except Exception as exc:
                out[call] = exc
        return out

    async def _fetch_many(self, slots: list[Slot]) -> dict[Slot, Committed | BaseException]:
        group = await self._member.fetch_offsets(list(fetch_topics(slots)))
        if group.error is not ErrorCode.NONE:
            error = CoordinatorError(group.error, f"reading leases: {group.error.name}")
            return dict.fromkeys(slots, error)
        out: dict[Slot, Committed | BaseException] = {}
        for topic in group.topics:
            for p in topic.partitions:
                slot = Slot(topic.name, p.partition)
                if p.error is not ErrorCode.NONE:
                    out[slot] = CoordinatorError(p.error, f"reading lease {slot}: {p.error.name}")
                else:
                    out[slot] = Committed(p.offset, p.metadata)
        return out


__all__ = ["MAX_BATCH", "MemberSlotStore"]
