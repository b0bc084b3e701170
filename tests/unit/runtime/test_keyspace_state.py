"""A slice's handler starts only once the kept state proves its token; the member
commits its map only under the generation whose assignment handed it the map."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    OffsetCommitResult,
)
from workgroup.keyspaces import SliceMap
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.keyspaces.report import KeyspaceReport, encode_report
from workgroup.member.driver import GroupMember
from workgroup.member.keyspace import KeyspaceConfig, MemberKeyspace
from workgroup.runtime.keyspace_slots import encode_persisted, token_key
from workgroup.runtime.keyspace_state import KeyspaceState
from workgroup.runtime.slots import slot_of
from workgroup.runtime.topics import LeaseTopics

GROUP = "app.users"


@dataclass
class Machine:
    keyspace: MemberKeyspace
    generation: int


@dataclass
class Member:
    """What the keyspace state uses of a GroupMember."""

    _machine: Machine
    answer: ErrorCode = ErrorCode.NONE
    #: Each commit: the generation it went under and what it held.
    commits: list[tuple[int, Sequence[CommitTopic]]] = field(default_factory=list)

    @property
    def generation(self) -> int:
        return self._machine.generation

    async def commit_offsets(self, topics: Sequence[CommitTopic]) -> OffsetCommitResult:
        self.commits.append((self.generation, topics))
        return OffsetCommitResult(
            tuple(
                CommitTopicResult(
                    t.name,
                    tuple(CommitPartitionResult(p.partition, self.answer) for p in t.partitions),
                )
                for t in topics
            )
        )


class NoTopics:
    """The embedded coordinator: no topic to create."""

    async def ensure(self, topics: Any) -> None:
        list(topics)


@dataclass
class Held:
    held: bool = True


class Clock:
    """Sleeps nothing; runs ``on_sleep`` each time (what happens meanwhile)."""

    def __init__(self, on_sleep: Any = None) -> None:
        self.sleeps = 0
        self.on_sleep = on_sleep

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)


def setup(
    generation: int, taken_in: int, clock: Clock
) -> tuple[SliceMap, MemberKeyspace, Member, KeyspaceState]:
    smap = SliceMap.uniform("users", 4, first_token=10)
    view = MemberKeyspace(KeyspaceConfig("users"))
    view.take(encode_report(KeyspaceReport(smap)), group_id=GROUP, generation=taken_in)
    view.persisted = PersistedKeyspace(9, 0)
    member = Member(Machine(view, generation))
    state = KeyspaceState(
        GROUP,
        "users",
        cast(GroupMember, member),
        cast(LeaseTopics, NoTopics()),
        clock=cast(Any, clock),
    )
    return smap, view, member, state


async def test_the_map_is_committed_before_a_token_it_issued_is_used() -> None:
    smap, view, member, state = setup(generation=5, taken_in=5, clock=Clock())
    assert await state.cover(12, Held())
    assert len(member.commits) == 1
    generation, topics = member.commits[0]
    assert generation == 5
    expected = {
        slot_of(GROUP, key).topic: value for key, value in encode_persisted(smap).slots.items()
    }
    assert {t.name: (t.partitions[0].offset, t.partitions[0].metadata) for t in topics} == expected
    assert view.persisted == PersistedKeyspace(smap.max_token, smap.epoch, smap)
    assert await state.cover(13, Held())  # proven already: no second commit
    assert len(member.commits) == 1
    token = slot_of(GROUP, token_key("users")).topic
    assert expected[token][0] == smap.max_token


async def test_a_token_the_kept_state_proves_needs_no_commit() -> None:
    _, _, member, state = setup(generation=5, taken_in=5, clock=Clock())
    assert await state.cover(9, Held())
    assert member.commits == []


async def test_no_commit_under_a_generation_that_did_not_hand_the_map() -> None:
    # The member joined generation 6 and waits for its assignment: the map it
    # holds is generation 5's, which it may not commit under 6.
    member_box: list[Member] = []

    def synced(sleeps: int) -> None:
        if sleeps == 3:  # the assignment of generation 6 arrives
            member = member_box[0]
            view = member._machine.keyspace
            assert view.map is not None
            view.take(encode_report(KeyspaceReport(view.map)), group_id=GROUP, generation=6)

    clock = Clock(synced)
    _, _, member, state = setup(generation=6, taken_in=5, clock=clock)
    member_box.append(member)
    assert await state.cover(12, Held())
    assert [generation for generation, _ in member.commits] == [6]
    assert clock.sleeps == 3


async def test_a_refused_commit_is_retried_until_the_lease_ends() -> None:
    lease = Held()

    def ends(sleeps: int) -> None:
        if sleeps == 2:
            lease.held = False

    _, view, member, state = setup(generation=5, taken_in=5, clock=Clock(ends))
    member.answer = ErrorCode.ILLEGAL_GENERATION  # the group moved on
    assert not await state.cover(12, lease)
    assert len(member.commits) == 2
    assert view.persisted == PersistedKeyspace(9, 0)  # nothing proven
