"""A small stand-in for the sans-I/O group core, to test the driver on its own.

It answers like a one-member-per-group coordinator: JoinGroup is held for
``join_delay_ms`` (answered from ``expire``), so tests can check that delayed
replies keep their connection's order; OffsetCommit persists before replying.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from workgroup.coordinator import actions as a
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.errors import ErrorCode
from workgroup.kafka import messages as m


class CoreDouble:
    def __init__(self, join_delay_ms: int = 0) -> None:
        self.join_delay_ms = join_delay_ms
        self.parked: list[tuple[int, a.ReplyToken, m.JoinGroup]] = []
        self.offsets: dict[tuple[str, str, int], a.StoredOffset] = {}
        self.groups: dict[str, a.StoredGroup] = {}
        self.requests: list[m.GroupRequest] = []
        self.restored: tuple[list[a.StoredGroup], list[a.StoredOffset]] | None = None

    def handle(self, now_ms: int, token: a.ReplyToken, request: m.GroupRequest) -> list[a.Action]:
        self.requests.append(request)
        match request:
            case m.JoinGroup():
                if self.join_delay_ms:
                    self.parked.append((now_ms + self.join_delay_ms, token, request))
                    return []
                return self._joined(token, request)
            case m.Heartbeat():
                return [a.Reply(token, m.HeartbeatResult(ErrorCode.NONE))]
            case m.OffsetCommit():
                stored = tuple(
                    a.StoredOffset(
                        request.group_id,
                        t.name,
                        p.partition,
                        p.offset,
                        p.metadata,
                        p.leader_epoch,
                        now_ms,
                    )
                    for t in request.topics
                    for p in t.partitions
                )
                for s in stored:
                    self.offsets[(s.group_id, s.topic, s.partition)] = s
                result = m.OffsetCommitResult(
                    tuple(
                        m.CommitTopicResult(
                            t.name,
                            tuple(
                                m.CommitPartitionResult(p.partition, ErrorCode.NONE)
                                for p in t.partitions
                            ),
                        )
                        for t in request.topics
                    )
                )
                return [a.Persist(offsets=stored), a.Reply(token, result)]
            case m.OffsetFetch():
                groups = []
                for g in request.groups:
                    topics: dict[str, list[m.FetchedPartition]] = {}
                    for (gid, topic, part), s in sorted(self.offsets.items()):
                        if gid == g.group_id:
                            topics.setdefault(topic, []).append(
                                m.FetchedPartition(part, s.offset, s.metadata, s.leader_epoch)
                            )
                    groups.append(
                        m.FetchedGroup(
                            g.group_id,
                            tuple(m.FetchedTopic(name, tuple(ps)) for name, ps in topics.items()),
                        )
                    )
                return [a.Reply(token, m.OffsetFetchResult(tuple(groups)))]
            case _:
                return [a.Reply(token, _error_for(request))]

    def _joined(self, token: a.ReplyToken, request: m.JoinGroup) -> list[a.Action]:
        member_id = request.member_id or "member-1"
        group = a.StoredGroup(
            request.group_id,
            1,
            request.protocol_type,
            request.protocols[0][0] if request.protocols else None,
            member_id,
            (),
        )
        self.groups[request.group_id] = group
        return [
            a.Persist(groups=(group,)),
            a.Reply(
                token,
                m.JoinGroupResult(
                    ErrorCode.NONE,
                    1,
                    request.protocol_type,
                    group.protocol_name,
                    member_id,
                    member_id,
                    tuple(
                        m.JoinedMember(member_id, request.group_instance_id, md)
                        for _, md in request.protocols[:1]
                    ),
                ),
            ),
        ]

    def expire(self, now_ms: int) -> list[a.Action]:
        due = [p for p in self.parked if p[0] <= now_ms]
        self.parked = [p for p in self.parked if p[0] > now_ms]
        actions: list[a.Action] = []
        for _, token, request in due:
            actions += self._joined(token, request)
        return actions

    def unload(self, now_ms: int) -> list[a.Action]:
        parked, self.parked = self.parked, []
        return [
            a.Reply(token, m.JoinGroupResult(ErrorCode.NOT_COORDINATOR)) for _, token, _ in parked
        ]

    def next_deadline_ms(self) -> int | None:
        return min((p[0] for p in self.parked), default=None)

    def restore(
        self, now_ms: int, groups: Iterable[a.StoredGroup], offsets: Iterable[a.StoredOffset]
    ) -> None:
        self.restored = (list(groups), list(offsets))
        for s in self.restored[1]:
            self.offsets[(s.group_id, s.topic, s.partition)] = s


def _error_for(request: m.GroupRequest) -> m.GroupResult:
    from workgroup.coordinator.wire import error_result

    result = error_result(request, ErrorCode.NONE)
    assert not isinstance(result, tuple)
    return result  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def serving_double(join_delay_ms: int) -> AsyncIterator[tuple[CoordinatorServer, CoreDouble]]:
    """A running server whose core is a double holding each JoinGroup ``join_delay_ms``."""
    core = CoreDouble(join_delay_ms=join_delay_ms)
    server = CoordinatorServer(CoordinatorConfig(), core=core)
    await server.start()
    try:
        yield server, core
    finally:
        await server.stop()
