"""Leases against an in-memory slot store that answers like a coordinator."""

from __future__ import annotations

import asyncio

import pytest

from workgroup.errors import ErrorCode
from workgroup.runtime.errors import CheckpointError, LeaseLostError
from workgroup.runtime.lease import Committed, Lease, Slot
from workgroup.runtime.slots import MAX_METADATA_BYTES, check_value, slot_header
from workgroup.types import Resource

SLOT = Slot("workgroup-leases.g", 3)
#: What every commit of ``lease()`` (key 3) starts with.
HEADER = slot_header(3)


class FakeStore:
    """Committed offsets of one group; ``answers`` queues error codes for commits."""

    def __init__(self) -> None:
        self.offsets: dict[Slot, Committed] = {}
        self.answers: list[ErrorCode] = []
        self.commits: list[tuple[Slot, int, str | None]] = []
        #: The resource each commit named (the member maps it to a generation).
        self.resources: list[Resource | None] = []

    async def commit(
        self, slot: Slot, offset: int, metadata: str | None, *, resource: Resource | None = None
    ) -> ErrorCode:
        self.resources.append(resource)
        error = self.answers.pop(0) if self.answers else ErrorCode.NONE
        if error is ErrorCode.NONE:
            self.offsets[slot] = Committed(offset, metadata)
            self.commits.append((slot, offset, metadata))
        return error

    async def fetch(self, slot: Slot) -> Committed:
        return self.offsets.get(slot, Committed(-1, ""))


def lease(store: FakeStore, timeout_s: float = 5.0) -> Lease:
    return Lease("g", "shard", 3, slot=SLOT, store=store, commit_timeout_s=timeout_s)


async def test_each_acquisition_takes_the_next_token_and_keeps_the_checkpoint() -> None:
    store = FakeStore()
    first = lease(store)
    assert await first.acquire() == 1
    await first.commit("position=10")
    first.end("revoked")
    second = lease(store)
    assert await second.acquire() == 2
    assert await second.checkpoint() == "position=10"
    assert store.offsets[SLOT] == Committed(2, slot_header(3) + "position=10")


async def test_a_fresh_slot_has_no_checkpoint() -> None:
    held = lease(FakeStore())
    await held.acquire()
    assert await held.checkpoint() is None


async def test_an_ended_lease_never_sends() -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    held.end("revoked")
    sent = len(store.commits)
    with pytest.raises(LeaseLostError, match="revoked"):
        await held.commit("late")
    with pytest.raises(LeaseLostError):
        held.assert_held()
    assert len(store.commits) == sent
    assert held.revoked


async def test_a_revoked_lease_commits_during_its_grace_period_only() -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    held.end("revoked", grace_s=30.0)
    assert held.revoked
    assert held.can_commit
    assert held.grace_left_s is not None
    assert 29 < held.grace_left_s <= 30
    await held.commit("last step")  # the step in flight records where it ended
    assert store.offsets[SLOT] == Committed(1, HEADER + "last step")
    held._stop_by = 0.0  # the grace period is over
    with pytest.raises(LeaseLostError, match="grace period is over"):
        await held.commit("too late")
    assert store.offsets[SLOT] == Committed(1, HEADER + "last step")


async def test_every_commit_names_the_leases_resource() -> None:
    """The member's machine maps the resource to the generation the commit goes
    under (its rule 11): a revoked lease's commits go under the generation it was
    given up in, so the coordinator refuses them once the group moved on (found
    by the chaos suite: a revoked handler in its grace period committed under the
    member's new generation while the new owner already committed).  The machine's
    tests check that choice; here, that the lease names its resource every time."""
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    await held.commit("while held")
    held.end("revoked", grace_s=30.0)
    await held.commit("last step")
    assert store.resources == [("shard", 3)] * 3  # acquire, held, revoked


async def test_a_lost_lease_never_commits_even_with_grace() -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    held.end("lost", grace_s=30.0)
    assert held.lost
    assert not held.can_commit
    with pytest.raises(LeaseLostError, match="lost"):
        await held.commit("zombie")
    assert store.offsets[SLOT] == Committed(1, HEADER)


@pytest.mark.parametrize(
    "code",
    [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_ID_NOT_FOUND],
)
async def test_a_commit_the_coordinator_fences_ends_the_lease(code: ErrorCode) -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    store.answers = [code]
    with pytest.raises(LeaseLostError, match=code.name):
        await held.commit("zombie write")
    assert held.revoked
    assert store.offsets[SLOT] == Committed(1, HEADER)


@pytest.mark.parametrize("code", [ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION])
async def test_a_commit_during_a_rebalance_is_tried_again(code: ErrorCode) -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    store.answers = [code, code]
    await held.commit("after the rebalance")
    assert store.offsets[SLOT] == Committed(1, HEADER + "after the rebalance")


async def test_a_commit_retried_past_its_deadline_raises_the_coordinator_error() -> None:
    store = FakeStore()
    held = lease(store, timeout_s=0.2)
    await held.acquire()
    store.answers = [ErrorCode.REBALANCE_IN_PROGRESS] * 100
    with pytest.raises(Exception, match="REBALANCE_IN_PROGRESS"):
        await held.commit("x")


async def test_acquisition_fenced_never_holds() -> None:
    store = FakeStore()
    held = lease(store)
    store.answers = [ErrorCode.UNKNOWN_MEMBER_ID]
    with pytest.raises(LeaseLostError):
        await held.acquire()
    assert not held.held
    assert held.token == 0


async def test_thread_handlers_commit_through_the_loop() -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    await asyncio.to_thread(held.commit_sync, "from a thread", 5)
    assert await asyncio.to_thread(held.checkpoint_sync, 5) == "from a thread"
    with pytest.raises(RuntimeError, match="await"):
        held.commit_sync("in the loop")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty"),
        ("x" * (MAX_METADATA_BYTES + 1), "over the limit"),
        ("é" * 2049, "4098 bytes"),
    ],
)
async def test_values_that_cannot_be_stored_are_refused_before_sending(
    value: str, why: str
) -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    with pytest.raises(CheckpointError, match=why):
        await held.commit(value)
    assert len(store.commits) == 1  # the acquisition only


def test_the_largest_value_is_accepted() -> None:
    assert check_value("x" * MAX_METADATA_BYTES)


def test_the_largest_value_for_a_key_is_accepted_and_one_more_byte_is_not() -> None:
    limit = MAX_METADATA_BYTES - len(slot_header(3))
    assert check_value("x" * limit, 3)
    with pytest.raises(CheckpointError, match=f"over the limit of {limit} for key 3"):
        check_value("x" * (limit + 1), 3)
