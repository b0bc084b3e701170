"""Drain requests (runtime/drains.py): the record codec, who is drained, and the
follower that drains a runner's member as the requests say; the pure parts of
``workgroup drain`` (cli/drain.py): refusals and progress."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from workgroup.admin import GroupDescription, MemberDescription, decode_warming
from workgroup.cli import main
from workgroup.cli.drain import (
    DrainTimeoutError,
    LastMemberError,
    Progress,
    UnknownMemberError,
    check_not_last,
    drained_members,
    find_member,
    progress_of,
    wait_for,
)
from workgroup.coordinator.acl import DRAIN_GROUP_PREFIX, drained_group_of
from workgroup.errors import ConfigError, ErrorCode, WorkgroupError
from workgroup.kafka.messages import FetchedGroup, FetchedPartition, FetchedTopic
from workgroup.member.round_plan import DRAINING_TAG
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.runtime.drains import (
    DRAINED,
    UNDRAINED,
    DrainFollower,
    DrainTarget,
    decode_request,
    drain_group,
    drain_slot,
    encode_request,
    fetch_topics,
    is_drained,
    requests_in,
    targets_of,
)
from workgroup.runtime.slots import MAX_GROUP_ID_LENGTH, MAX_TOPIC_LENGTH
from workgroup.testing import capture_logs
from workgroup.testing.clock import FakeClock

A = DrainTarget("instance", "a")
M = DrainTarget("member", "a-1")
ids = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)


# --- the record ----------------------------------------------------------------------


@given(by=st.sampled_from(["instance", "member"]), id_=ids, drained=st.booleans())
def test_a_request_round_trips(by: str, id_: str, drained: bool) -> None:
    target = DrainTarget(by, id_)  # type: ignore[arg-type]
    offset, metadata = encode_request(target, drained)
    assert offset == (DRAINED if drained else UNDRAINED)
    assert decode_request(target, offset, metadata) is drained
    # Tansu keeps no metadata: the offset alone decides.
    assert decode_request(target, offset, "") is drained
    assert decode_request(target, offset, None) is drained


def test_nothing_committed_or_another_targets_header_asks_nothing() -> None:
    assert decode_request(A, -1, "") is None
    offset, metadata = encode_request(M, True)
    assert decode_request(A, offset, metadata) is None
    assert decode_request(A, 1, "garbage") is None
    assert decode_request(A, 1, "wg-drain:{not json\n") is None


def test_an_instance_and_a_member_of_the_same_id_are_different_targets() -> None:
    assert drain_slot("g", DrainTarget("instance", "x")) != drain_slot(
        "g", DrainTarget("member", "x")
    )
    assert drain_slot("g", A) != drain_slot("h", A)
    assert drain_slot("g", A) == drain_slot("g", DrainTarget("instance", "a"))


def test_the_companion_group_and_topics_are_valid_names() -> None:
    group = "g" * MAX_GROUP_ID_LENGTH
    assert drain_group("orders") == DRAIN_GROUP_PREFIX + "orders"
    assert drained_group_of(drain_group("orders")) == "orders"
    slot = drain_slot(group, A)
    assert len(slot.topic) <= MAX_TOPIC_LENGTH
    assert slot.topic.startswith(drain_group(group) + ".")
    with pytest.raises(ConfigError):
        drain_group("bad group")
    with pytest.raises(ValueError, match="empty"):
        DrainTarget("instance", "")
    with pytest.raises(ValueError, match="instance or a member"):
        DrainTarget("process", "x")  # type: ignore[arg-type]


def fetched(group: str, answers: dict[DrainTarget, tuple[int, str, ErrorCode]]) -> FetchedGroup:
    topics = []
    for target, (offset, metadata, error) in answers.items():
        slot = drain_slot(group, target)
        partition = FetchedPartition(slot.partition, offset, metadata, error=error)
        topics.append(FetchedTopic(slot.topic, (partition,)))
    return FetchedGroup(drain_group(group), tuple(topics))


def test_who_is_drained_from_an_offset_fetch() -> None:
    _, meta = encode_request(A, True)
    answer = fetched(
        "g",
        {
            A: (DRAINED, meta, ErrorCode.NONE),
            M: (DRAINED, "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        },
    )
    requests = requests_in(answer, "g", [A, M, DrainTarget("instance", "b")])
    assert requests == {A: True, M: None, DrainTarget("instance", "b"): None}
    assert is_drained(requests)
    assert not is_drained({A: False, M: None})
    assert is_drained({A: False, M: True})  # either slot drains it
    assert not is_drained({})


def test_targets_and_fetch_topics() -> None:
    assert targets_of("a", "a-1") == (A, M)
    assert targets_of(None, "a-1") == (M,)
    assert targets_of("a", "") == (A,)
    assert targets_of(None, None) == ()
    topics = fetch_topics("g", [A, M, A])
    assert sorted(t.name for t in topics) == sorted(
        {drain_slot("g", A).topic, drain_slot("g", M).topic}
    )
    assert all(t.partitions == (0,) for t in topics)


# --- the follower --------------------------------------------------------------------


class FakeMember:
    def __init__(self) -> None:
        self.member_id = ""
        self.draining = False
        self.calls: list[bool] = []

    def drain(self, draining: bool = True) -> None:
        self.calls.append(draining)
        self.draining = draining


class FakeRequests:
    group_id = "g"

    def __init__(self) -> None:
        self.drained: set[DrainTarget] = set()
        self.failing = False
        self.reads: list[tuple[DrainTarget, ...]] = []

    async def read(self, targets: Iterable[DrainTarget]) -> dict[DrainTarget, bool | None]:
        targets = tuple(targets)
        self.reads.append(targets)
        if self.failing:
            raise WorkgroupError("coordinator unavailable", retriable=True)
        return {t: (t in self.drained) or None for t in targets}

    async def close(self) -> None:
        pass


async def test_the_follower_drains_and_undrains_as_the_requests_say() -> None:
    clock = FakeClock()
    member, requests = FakeMember(), FakeRequests()
    follower = DrainFollower(member, requests, instance_id="a", interval_s=1.0, clock=clock)
    requests.drained.add(A)
    await follower.before_start()  # before the member joins: its instance id only
    assert requests.reads == [(A,)]
    assert member.calls == [True]
    task = asyncio.create_task(follower.follow())
    await clock.wait_for_sleepers()
    try:
        member.member_id = "a-1"
        requests.drained.clear()
        await clock.run_for(1.0)
        assert requests.reads[-1] == (A, M)
        assert member.calls == [True, False]
        # Drained by member id: the same.
        requests.drained.add(M)
        await clock.run_for(1.0)
        assert member.calls == [True, False, True]
        # Unchanged requests call nothing.
        await clock.run_for(3.0)
        assert member.calls == [True, False, True]
        # Failing reads leave the member as it is, and are logged once.
        requests.failing = True
        with capture_logs() as logs:
            await clock.run_for(3.0)
            requests.failing = False
            requests.drained.clear()
            await clock.run_for(1.0)
        events = [e["event"] for e in logs if e["event"].startswith("drain.")]
        assert events == ["drain.read_failed", "drain.read_recovered", "drain.request_withdrawn"]
        assert member.calls == [True, False, True, False]
        # Drained to stop: held whatever the requests say.
        follower.drain_to_stop()
        assert member.calls[-1] is True
        await clock.run_for(2.0)
        assert member.draining
        assert member.calls == [True, False, True, False, True]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_member_without_instance_id_is_read_once_it_has_a_member_id() -> None:
    clock = FakeClock()
    member, requests = FakeMember(), FakeRequests()
    follower = DrainFollower(member, requests, instance_id=None, interval_s=1.0, clock=clock)
    await follower.before_start()
    assert requests.reads == []  # nothing names it yet
    task = asyncio.create_task(follower.follow())
    await clock.wait_for_sleepers()
    try:
        await clock.run_for(1.0)
        assert requests.reads == []
        member.member_id = "a-1"
        requests.drained.add(M)
        await clock.run_for(1.0)
        assert requests.reads == [(M,)]
        assert member.draining
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- the command line's rules --------------------------------------------------------


def described(
    name: str,
    instance: str | None,
    *,
    owns: int = 0,
    warming: int = 0,
    draining: bool = False,
) -> MemberDescription:
    tags = ((DRAINING_TAG, "1"),) if draining else ()
    codec = BinaryCodec()
    metadata = codec.encode_metadata(MemberMetadata(kinds=("shard",), tags=tags))
    assignment = decode_warming(
        "workgroup",
        codec.encode_assignment(
            AssignmentData(
                assigned=tuple(("shard", i) for i in range(owns)),
                generation=3,
                warming=tuple(("shard", 100 + i) for i in range(warming)),
            )
        ),
    )
    return MemberDescription(
        name,
        instance,
        "client",
        "/127.0.0.1",
        {"shard": list(range(owns))} if owns else {},
        None,
        3,
        metadata,
        assignment,
    )


def group_of(*members: MemberDescription, state: str = "Stable") -> GroupDescription:
    return GroupDescription("g", state, "workgroup", "sticky.v1", 3, None, list(members))


def test_an_unknown_member_is_refused_listing_the_members() -> None:
    group = group_of(described("a-1", "a"), described("m-2", None))
    assert find_member(group, A).member_id == "a-1"
    assert find_member(group, DrainTarget("member", "m-2")).member_id == "m-2"
    with pytest.raises(UnknownMemberError) as caught:
        find_member(group, DrainTarget("instance", "zz"))
    message = str(caught.value)
    assert "no member with instance id 'zz'" in message
    assert "instance a (member a-1), member m-2" in message
    assert caught.value.exit_code == 4
    with pytest.raises(UnknownMemberError, match="its members: none"):
        find_member(group_of(), A)


def test_the_last_member_not_drained_is_refused_unless_forced() -> None:
    a, b = described("a-1", "a"), described("b-1", "b", draining=True)
    c = described("c-1", "c")
    # b reports draining, c is asked to be drained: a is the last one.
    group = group_of(a, b, c)
    drained = drained_members(group, {DrainTarget("instance", "c"): True})
    assert drained == {"b-1", "c-1"}
    with pytest.raises(LastMemberError, match="idle") as caught:
        check_not_last(group, a, drained, force=False)
    assert caught.value.exit_code == 3
    check_not_last(group, a, drained, force=True)
    check_not_last(group, a, {"b-1"}, force=False)  # c still works


def test_progress_counts_owned_and_warming_resources() -> None:
    group = group_of(
        described("a-1", "a", owns=2, warming=0, draining=True), described("b-1", "b", warming=1)
    )
    assert progress_of(group, "a-1") == Progress("Stable", True, 2, 0)
    assert progress_of(group, "b-1") == Progress("Stable", False, 0, 1)
    assert progress_of(group, "gone") is None
    assert Progress("Stable", True, 0, 0).drained
    assert not Progress("PreparingRebalance", True, 0, 0).drained
    assert not Progress("Stable", True, 0, 1).drained
    assert not Progress("Stable", False, 0, 0).drained
    assert Progress("Stable", False, 3, 0).undrained
    assert str(Progress("Stable", True, 2, 1)) == (
        "group Stable, member draining, owns 2, warming up 1"
    )


def test_progress_mid_rebalance_says_the_drain_is_under_way() -> None:
    """The member reports draining only as it rejoins: until then a rebalancing
    group's old metadata says "not draining", which is not what happens."""
    rebalancing = Progress("PreparingRebalance", False, 2, 0, wanted=True)
    assert str(rebalancing) == (
        "group PreparingRebalance, the drain is under way (the member reports it as it "
        "rejoins), owns 2, warming up 0"
    )
    assert "not draining" not in str(Progress("CompletingRebalance", False, 2, 0, wanted=True))
    assert str(Progress("Stable", False, 2, 0, wanted=True)) == (
        "group Stable, the member has not seen the drain request yet, owns 2, warming up 0"
    )
    assert "undrain is under way" in str(Progress("PreparingRebalance", True, 0, 0, wanted=False))
    assert str(Progress("Stable", True, 0, 0, wanted=True)).startswith(
        "group Stable, member draining"
    )


@pytest.mark.parametrize("command", ["drain", "undrain"])
@pytest.mark.parametrize(
    "args", [[], ["--instance-id", "a", "--member-id", "m"]], ids=["none", "both"]
)
def test_exactly_one_way_to_name_the_member(command: str, args: list[str]) -> None:
    result = CliRunner().invoke(main, [command, "g", *args, "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "exactly one of --instance-id, --member-id" in result.output


async def test_waiting_on_an_instance_follows_it_across_a_restart() -> None:
    """undrain --wait right after a restart: the old member leaves, the restarted
    one (same instance id, new member id) joins; the wait follows the instance."""
    answers = [
        group_of(described("a-1", "a", draining=True), described("b-1", "b", owns=3)),
        group_of(described("b-1", "b", owns=3)),  # a is restarting
        group_of(described("a-2", "a"), described("b-1", "b", owns=3)),
    ]
    said: list[str] = []

    async def describe() -> GroupDescription:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    progress = await wait_for(
        describe, "a-1", lambda p: p.undrained, timeout_s=5, say=said.append, poll_s=0,
        instance_id="a",
    )  # fmt: skip
    assert progress == Progress("Stable", False, 0, 0)
    assert any("instance a is not in the group now" in line for line in said)
    with pytest.raises(UnknownMemberError, match="a-1 left"):
        await wait_for(
            describe, "a-1", lambda p: p.undrained, timeout_s=5, say=said.append, poll_s=0
        )


async def test_waiting_polls_and_says_the_time_on_its_clock() -> None:
    """Two polls of 30 s on the fake clock, in no time; the lines say the clock's time."""
    answers = [
        group_of(described("a-1", "a", draining=True, owns=2)),
        group_of(described("a-1", "a", draining=True, owns=2)),
        group_of(described("a-1", "a")),
    ]
    said: list[str] = []

    async def describe() -> GroupDescription:
        return answers.pop(0)

    clock = FakeClock(autojump_threshold_s=0)
    progress = await wait_for(
        describe, "a-1", lambda p: p.undrained, timeout_s=120, say=said.append, poll_s=30,
        clock=clock,
    )  # fmt: skip
    assert progress == Progress("Stable", False, 0, 0)
    assert [line.split()[0] for line in said] == ["0.0s", "60.0s"]
    assert clock.monotonic() == 60.0


async def test_the_wait_times_out_on_its_clock() -> None:
    """Five minutes of a drain that never ends, on the fake clock, in no time."""
    said: list[str] = []
    draining = group_of(described("a-1", "a", draining=True, owns=2))

    async def describe() -> GroupDescription:
        return draining

    clock = FakeClock(autojump_threshold_s=0)
    with pytest.raises(DrainTimeoutError, match="timed out after 300s: group Stable"):
        await wait_for(
            describe, "a-1", lambda p: p.drained, timeout_s=300, say=said.append, clock=clock
        )
    assert clock.monotonic() == 300.0
    assert len(said) == 1  # no change to say after the first poll
