"""Key slots: the slot is a function of the key, its metadata names the key, and a
holder refuses a slot that names another key."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.runtime.test_lease import FakeStore
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.protocol.catalog import CatalogEntry
from workgroup.runtime.app import Settings
from workgroup.runtime.errors import CheckpointError, SlotMismatchError
from workgroup.runtime.events import OwnershipLog
from workgroup.runtime.handlers import Handler, HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.lease import Committed, EndReason, Lease, LeaseState
from workgroup.runtime.metrics import RuntimeMetrics
from workgroup.runtime.producers import ProducerFactory
from workgroup.runtime.runner import GroupRunner
from workgroup.runtime.slots import (
    HEADER_MAGIC,
    MAX_GROUP_ID_LENGTH,
    MAX_TOPIC_LENGTH,
    check_group_id,
    decode_metadata,
    key_digest,
    read_slot,
    slot_header,
    slot_of,
)
from workgroup.testing import FakeClock, capture_logs
from workgroup.types import Key, Resource

keys = st.one_of(st.integers(), st.text())
GROUP = "app.shard"


# --- digest and topic names ---------------------------------------------------


def test_a_slot_is_partition_0_of_the_keys_own_topic() -> None:
    slot = slot_of(GROUP, "k03")
    assert slot.partition == 0
    assert slot.topic == f"workgroup-leases.{GROUP}.{key_digest('k03')}"
    assert len(key_digest("k03")) == 32
    assert slot_of(GROUP, 1) != slot_of(GROUP, "1")  # typed: int 1 is not str "1"


@given(st.lists(keys, unique_by=lambda k: (type(k), k), max_size=50))
def test_distinct_keys_never_share_a_slot(distinct: list[Key]) -> None:
    assert len({slot_of(GROUP, key) for key in distinct}) == len(distinct)


def test_group_ids_are_checked_against_the_topic_name_rules() -> None:
    longest = "g" * MAX_GROUP_ID_LENGTH
    assert len(slot_of(longest, "k").topic) == MAX_TOPIC_LENGTH
    with pytest.raises(ConfigError, match=f"at most {MAX_GROUP_ID_LENGTH} characters"):
        check_group_id(longest + "g")
    with pytest.raises(ConfigError, match="letters, digits"):
        check_group_id("bad group")


# --- header ------------------------------------------------------------------------


@given(keys, st.one_of(st.none(), st.text(min_size=1)))
def test_header_and_checkpoint_round_trip(key: Key, checkpoint: str | None) -> None:
    contents = decode_metadata(slot_header(key) + (checkpoint or ""))
    assert type(contents.key) is type(key)
    assert contents.key == key
    assert contents.checkpoint == checkpoint


@given(st.text())
def test_garbage_metadata_is_refused_or_names_a_key(metadata: str) -> None:
    try:
        contents = decode_metadata(metadata)
    except ValueError:
        return  # unreadable: refused
    assert not metadata or contents.key is not None


@pytest.mark.parametrize(
    "metadata",
    ["position=10", "wg-key:", "wg-key:3", "wg-key:{\n", "wg-key:true\n", "wg-key:[1]\n"],
)
def test_metadata_without_a_readable_header_is_a_mismatch(metadata: str) -> None:
    with pytest.raises(SlotMismatchError, match="cannot be used"):
        read_slot(metadata, 3, slot_of(GROUP, 3))


def test_empty_metadata_names_no_key_and_holds_no_checkpoint() -> None:
    assert read_slot(None, 3, slot_of(GROUP, 3)) is None
    assert read_slot("", 3, slot_of(GROUP, 3)) is None
    assert read_slot(slot_header(3), 3, slot_of(GROUP, 3)) is None
    with pytest.raises(SlotMismatchError, match="names another key"):
        read_slot(slot_header("3") + "x", 3, slot_of(GROUP, 3))


def test_a_pool_slot_naming_an_earlier_holder_holds_no_checkpoint_of_the_new_one() -> None:
    slot = slot_of(GROUP, "~keyspace/users/slot/0")
    earlier = {7}.__contains__  # slice 7 held the slot before, and is gone
    assert read_slot(slot_header(7) + "k:41", 9, slot, earlier) is None
    assert read_slot(slot_header(9) + "k:42", 9, slot, earlier) == "k:42"
    with pytest.raises(SlotMismatchError, match="names another key"):
        read_slot(slot_header(8) + "k:43", 9, slot, earlier)  # not an earlier holder
    with pytest.raises(SlotMismatchError, match="cannot be used"):
        read_slot("garbage", 9, slot, earlier)


async def test_a_lease_takes_over_a_pool_slot_from_an_earlier_holder() -> None:
    store = FakeStore()
    slot = slot_of(GROUP, "~keyspace/users/slot/0")
    store.offsets[slot] = Committed(7, slot_header(7) + "k07:41")
    lease = Lease(
        GROUP,
        "users",
        9,
        slot=slot,
        store=store,
        commit_timeout_s=2,
        earlier_holder={7}.__contains__,
    )
    assert await lease.acquire() == 8  # the slot's token keeps rising
    assert store.offsets[slot] == Committed(8, slot_header(9))  # it names its new holder
    assert await lease.checkpoint() is None


# --- the holder's check ---------------------------------------------------------------


async def test_a_slot_naming_another_key_never_starts_the_handler() -> None:
    store = FakeStore()
    slot = slot_of(GROUP, "k03")
    store.offsets[slot] = Committed(7, slot_header("k07") + "k07:41")
    lease = Lease(GROUP, "shard", "k03", slot=slot, store=store, commit_timeout_s=2)
    started: list[str] = []

    async def handler(held: Lease) -> None:
        started.append(await held.checkpoint() or "")

    run = HandlerRun(lease, handler, name=GROUP, restart=RestartPolicy(), stats=HandlerStats())
    with capture_logs() as logs:
        run.start()
        async with asyncio.timeout(5):
            await lease.wait_revoked()
    assert started == []
    assert not run.started
    assert store.commits == []  # not taken: the other key's token and checkpoint stay
    mismatch = [e for e in logs if e["event"] == "lease.slot_mismatch"]
    assert len(mismatch) == 1
    assert (mismatch[0]["key"], mismatch[0]["found"]) == ("k03", "k07")
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "lease.slot_mismatch",
        "worker.acquire_failed",
    ]


async def test_a_standby_refuses_to_read_a_slot_naming_another_key() -> None:
    store = FakeStore()
    slot = slot_of(GROUP, 1)
    store.offsets[slot] = Committed(3, slot_header("1") + "other")
    standby = Lease(GROUP, "shard", 1, slot=slot, store=store, role="standby")
    with pytest.raises(SlotMismatchError, match="names another key"):
        await standby.checkpoint()


async def test_a_key_too_long_for_its_header_is_refused_before_sending() -> None:
    store = FakeStore()
    key = "k" * 4090
    lease = Lease(GROUP, "shard", key, slot=slot_of(GROUP, key), store=store)
    with pytest.raises(CheckpointError, match="too long for its lease slot"):
        await lease.acquire()
    assert store.commits == []


# --- slots under catalog changes ------------------------------------------------------


class CatalogSource:
    def __init__(self, keys: Sequence[Key]) -> None:
        self.keys = list(keys)

    def __call__(self) -> list[CatalogEntry]:
        return list(self.keys)


class KnownTopics:
    """LeaseTopics of a broker that needs none (the embedded coordinator)."""

    def __init__(self) -> None:
        self.asked: list[set[str]] = []

    async def ensure(self, topics: object) -> None:
        self.asked.append(set(topics))  # type: ignore[call-overload]

    def known(self, topic: str) -> bool:
        return True


async def make_runner(
    source: CatalogSource,
    standbys: int = 0,
    *,
    handler: Handler = lambda lease: None,
    grace_s: float = 0.1,
    clock: Clock = SYSTEM_CLOCK,
    events: OwnershipLog | None = None,
) -> GroupRunner:
    return GroupRunner(
        group_id=GROUP,
        kind="shard",
        handler=handler,
        assignors=("range",),
        grace_s=grace_s,
        restart=RestartPolicy(),
        settings=Settings(),
        source=source,
        events=events,
        stats=HandlerStats(),
        topics=KnownTopics(),  # type: ignore[arg-type]
        producers=ProducerFactory("127.0.0.1:9"),
        metrics=RuntimeMetrics(),
        standbys=standbys,
        clock=clock,
    )


async def take_and_commit(
    store: FakeStore, runner: GroupRunner, key: Key
) -> tuple[int, str | None]:
    """One change of hands of ``key`` as ``runner`` chooses its slot: the new
    holder's token and the checkpoint it started from; it then commits its own."""
    slot = runner._slot(("shard", key))
    assert slot is not None
    lease = Lease(GROUP, "shard", key, slot=slot, store=store, commit_timeout_s=2)
    token = await lease.acquire()
    checkpoint = await lease.checkpoint()
    await lease.commit(f"{key}:{token}")
    lease.end(EndReason.REVOKED)
    return token, checkpoint


async def test_tokens_and_checkpoints_stay_with_keys_under_every_catalog_change() -> None:
    store = FakeStore()
    source = CatalogSource([f"k{i:02d}" for i in range(12)])
    tokens: dict[Key, int] = {}

    async def round_of(runner: GroupRunner) -> None:
        await runner._read_catalog()
        for key in source.keys:
            token, checkpoint = await take_and_commit(store, runner, key)
            previous = tokens.get(key)
            if previous is None:
                assert (token, checkpoint) == (1, None), key
            else:
                # Its own last checkpoint, a token above every earlier holder's.
                assert (token, checkpoint) == (previous + 1, f"{key}:{previous}"), key
            tokens[key] = token

    leader = await make_runner(source)
    await round_of(leader)
    source.keys.remove("k03")  # removed from the middle
    source.keys.remove("k07")
    await round_of(leader)
    assert leader._slot(("shard", "k03")) is None  # not in the catalog: not started
    source.keys.reverse()  # reordered, two new keys inserted in the middle
    source.keys[5:5] = ["new-a", 5]
    await round_of(leader)
    # The leader changes: a new member knows nothing but the committed state.
    successor = await make_runner(source)
    source.keys.append("k03")  # restored
    await round_of(successor)
    assert tokens["k03"] == 2  # one holder before its removal, one since
    assert len({s.topic for s in store.offsets}) == 14  # one slot per key ever seen


async def test_a_standby_twin_shares_its_resources_slot() -> None:
    runner = await make_runner(CatalogSource(["a", 2]), standbys=1)
    await runner._read_catalog()
    assert (
        runner._slot(("shard", "a")) == runner._slot(("shard.standby", "a")) == slot_of(GROUP, "a")
    )
    assert runner._slot(("shard", 2)) == slot_of(GROUP, 2)


async def test_every_catalog_read_asks_for_the_topics_of_its_keys() -> None:
    source = CatalogSource(["a", "b"])
    runner = await make_runner(source)
    await runner._read_catalog()
    source.keys.append("c")
    await runner._read_catalog()
    topics = runner._topics.asked  # type: ignore[attr-defined]
    assert topics == [
        {slot_of(GROUP, "a").topic, slot_of(GROUP, "b").topic},
        {slot_of(GROUP, k).topic for k in "abc"},
    ]


class FailingOnceTopics(KnownTopics):
    """A broker whose first topic creation fails (e.g. a timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.existing: set[str] = set()

    async def ensure(self, topics: object) -> None:
        wanted = set(topics)  # type: ignore[call-overload]
        self.asked.append(wanted)
        if len(self.asked) == 1:
            raise WorkgroupError("CreateTopics timed out", retriable=True)
        self.existing |= wanted

    def known(self, topic: str) -> bool:
        return topic in self.existing


async def test_an_assignment_creates_the_topics_a_failed_catalog_read_left_missing() -> None:
    runner = await make_runner(CatalogSource(["a", "b"]))
    topics = FailingOnceTopics()
    runner._topics = topics  # type: ignore[assignment]
    with capture_logs() as logs:
        await runner._read_catalog()
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["lease.topic_failed"]
    await runner._assigned((("shard", "a"),), generation=1)
    try:
        # Asked again for the assigned key's topic before its handler started.
        assert topics.asked[1] == {slot_of(GROUP, "a").topic}
        assert topics.known(slot_of(GROUP, "a").topic)
    finally:
        await runner.stop_all(EndReason.LOST)


async def test_a_runner_times_its_members_leases_and_handlers_on_one_clock() -> None:
    """Rule 1 on the fake clock: a handler that ignores its revocation keeps its
    resource claimed for exactly its 30 s grace period, then is cancelled and
    the resource released."""
    clock = FakeClock()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(lease: Lease) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # ignores the revocation
        except asyncio.CancelledError:
            cancelled.set()
            raise

    runner = await make_runner(CatalogSource(["a"]), handler=handler, grace_s=30.0, clock=clock)
    runner._store = FakeStore()  # type: ignore[assignment]
    resource = ("shard", "a")
    released: list[tuple[Resource, ...]] = []
    runner.member.release_done = lambda resources: released.append(tuple(resources))  # type: ignore[method-assign]
    await runner._read_catalog()
    await runner._assigned((resource,), generation=1)
    run = runner.runs[resource]
    assert run.lease.clock is clock
    assert runner.member._clock is clock
    await asyncio.wait_for(started.wait(), 5)
    await runner._revoked((resource,), generation=1)
    await clock.wait_for_sleepers()
    await clock.run_for(29.9)
    assert resource in runner.stopping  # still claimed: its handler runs
    assert not cancelled.is_set()
    assert released == []
    assert run.lease.grace_left_s == pytest.approx(0.1)
    await clock.run_for(0.1)
    async with asyncio.timeout(5):
        while not released:  # noqa: ASYNC110 (the release runs in a task of the runner)
            await asyncio.sleep(0.01)
    assert released == [(resource,)]
    assert cancelled.is_set()
    assert resource not in runner.stopping
    assert run.lease.state is LeaseState.REVOKED


@given(st.integers(min_value=-(10**30), max_value=10**30) | st.text(max_size=12))
def test_a_header_reads_back_its_key_with_its_type(key: int | str) -> None:
    contents = decode_metadata(slot_header(key) + "cp")
    assert (type(contents.key), contents.key, contents.checkpoint) == (type(key), key, "cp")


@pytest.mark.parametrize("text", ["007", "-0x1", "\u0661", "1e3", "+1", "", "true"])
def test_a_header_whose_key_is_not_an_int_or_str_in_json_is_refused(text: str) -> None:
    # Leading zeros, other digits than ASCII ones, floats: not JSON ints, not keys.
    with pytest.raises(ValueError, match="slot header"):
        decode_metadata(f"{HEADER_MAGIC}{text}\ncp")
