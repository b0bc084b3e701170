"""Leases against an in-memory slot store that answers like a coordinator."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import CoordinatorError, ErrorCode, WorkgroupError
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.runtime.errors import CheckpointError, IllegalLeaseTransitionError, LeaseLostError
from workgroup.runtime.lease import Committed, EndReason, Lease, LeaseState, Slot
from workgroup.runtime.lease_states import LIVE_STATES, NEXT_STATES, check_transition
from workgroup.runtime.slots import MAX_METADATA_BYTES, check_value, slot_header
from workgroup.testing import FakeClock
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


def lease(store: FakeStore, timeout_s: float = 5.0, *, clock: Clock = SYSTEM_CLOCK) -> Lease:
    return Lease("g", "shard", 3, slot=SLOT, store=store, commit_timeout_s=timeout_s, clock=clock)


async def test_each_acquisition_takes_the_next_token_and_keeps_the_checkpoint() -> None:
    store = FakeStore()
    first = lease(store)
    assert await first.acquire() == 1
    await first.commit("position=10")
    first.end(EndReason.REVOKED)
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
    held.end(EndReason.REVOKED)
    sent = len(store.commits)
    with pytest.raises(LeaseLostError, match="revoked"):
        await held.commit("late")
    with pytest.raises(LeaseLostError):
        held.assert_held()
    assert len(store.commits) == sent
    assert held.revoked


async def test_a_revoked_lease_commits_during_its_grace_period_only() -> None:
    store = FakeStore()
    clock = FakeClock()
    held = lease(store, clock=clock)
    await held.acquire()
    held.end(EndReason.REVOKED, grace_s=30.0)
    assert held.revoked
    assert held.can_commit
    assert held.grace_left_s == 30.0
    await held.commit("last step")  # the step in flight records where it ended
    assert store.offsets[SLOT] == Committed(1, HEADER + "last step")
    clock.advance(29.9)
    assert held.grace_left_s == pytest.approx(0.1)
    await held.commit("just in time")
    clock.advance(0.1)  # the grace period is over
    assert held.grace_left_s == 0.0
    assert not held.can_commit
    with pytest.raises(LeaseLostError, match="grace period is over"):
        await held.commit("too late")
    assert store.offsets[SLOT] == Committed(1, HEADER + "just in time")


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
    held.end(EndReason.REVOKED, grace_s=30.0)
    await held.commit("last step")
    assert store.resources == [("shard", 3)] * 3  # acquire, held, revoked


async def test_a_lost_lease_never_commits_even_with_grace() -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    held.end(EndReason.LOST, grace_s=30.0)
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
    clock = FakeClock(autojump_threshold_s=0)
    held = lease(store, clock=clock)
    await held.acquire()
    store.answers = [code, code]
    await held.commit("after the rebalance")
    assert store.offsets[SLOT] == Committed(1, HEADER + "after the rebalance")
    assert clock.monotonic() == pytest.approx(0.05 + 0.1)  # two exponential back-offs


async def test_a_commit_retried_past_its_deadline_raises_the_coordinator_error() -> None:
    store = FakeStore()
    clock = FakeClock(autojump_threshold_s=0)
    held = lease(store, timeout_s=30.0, clock=clock)
    await held.acquire()
    store.answers = [ErrorCode.REBALANCE_IN_PROGRESS] * 100
    with pytest.raises(CoordinatorError, match="REBALANCE_IN_PROGRESS"):
        await held.commit("x")
    # Backing off up to 1 s between tries, it gave up once 30 s had passed.
    assert 30.0 <= clock.monotonic() < 31.0
    assert 30 < len(store.resources) - 1 < 100
    assert held.held  # a rebalance that lasts does not end the lease


async def test_a_revoked_lease_retries_only_until_its_grace_period_ends() -> None:
    store = FakeStore()
    clock = FakeClock(autojump_threshold_s=0)
    held = lease(store, timeout_s=30.0, clock=clock)
    await held.acquire()
    held.end(EndReason.REVOKED, grace_s=5.0)
    store.answers = [ErrorCode.REBALANCE_IN_PROGRESS] * 100
    with pytest.raises(LeaseLostError, match="grace period is over"):
        await held.commit("last step")
    assert 5.0 <= clock.monotonic() < 6.0


class UnreachableCoordinator(FakeStore):
    """A transport that cannot reach the coordinator: each commit takes
    ``attempt_s`` on the clock, then fails (``on_attempt`` runs meanwhile)."""

    def __init__(self, clock: FakeClock, attempt_s: float) -> None:
        super().__init__()
        self.clock = clock
        self.attempt_s = attempt_s
        self.on_attempt: list[Callable[[], None]] = []
        self.failing = False

    async def commit(
        self, slot: Slot, offset: int, metadata: str | None, *, resource: Resource | None = None
    ) -> ErrorCode:
        if not self.failing:
            return await super().commit(slot, offset, metadata, resource=resource)
        await self.clock.sleep(self.attempt_s)
        for action in self.on_attempt:
            action()
        raise CoordinatorUnavailableError("OffsetCommit: the coordinator is not known")


@pytest.mark.parametrize(
    ("ending", "message"),
    [("lost", "no longer held: lost"), ("revoked", "grace period is over")],
)
async def test_a_lease_that_ends_while_its_commit_fails_raises_lease_lost(
    ending: str, message: str
) -> None:
    """A daemon paused past its session, then resumed: the transport says the
    coordinator is not known, and meanwhile the member counted the session as
    over (lost), or the grace period of a revoked lease ran out during the try."""
    clock = FakeClock(autojump_threshold_s=0)
    store = UnreachableCoordinator(clock, attempt_s=2.0)
    held = lease(store, timeout_s=30.0, clock=clock)
    await held.acquire()
    store.failing = True
    if ending == "lost":
        store.on_attempt.append(lambda: held.end(EndReason.LOST))
    else:
        held.end(EndReason.REVOKED, grace_s=1.0)  # over before the first try fails
    with pytest.raises(LeaseLostError, match=message) as caught:
        await held.commit("step")
    assert isinstance(caught.value.__cause__, CoordinatorUnavailableError)
    assert clock.monotonic() == pytest.approx(2.0)  # one try, no retry once it ended
    assert store.offsets[SLOT] == Committed(1, HEADER)


async def test_a_held_lease_whose_commit_keeps_failing_raises_the_transport_error() -> None:
    clock = FakeClock(autojump_threshold_s=0)
    store = UnreachableCoordinator(clock, attempt_s=2.0)
    held = lease(store, timeout_s=10.0, clock=clock)
    await held.acquire()
    store.failing = True
    with pytest.raises(CoordinatorUnavailableError):
        await held.commit("step")
    assert held.held  # still held: the coordinator was only out of reach


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


# --- the lease's states ------------------------------------------------------------------


async def test_a_lease_moves_from_acquiring_to_active_to_revoked() -> None:
    held = lease(FakeStore())
    assert held.state is LeaseState.ACQUIRING
    assert not held.held
    assert not held.revoked
    assert held.end_reason is None
    await held.acquire()
    assert held.state is LeaseState.ACTIVE
    assert held.held
    held.end(EndReason.REVOKED, grace_s=1.0)
    assert held.state is LeaseState.REVOKED
    assert (held.revoked, held.lost, held.end_reason) == (True, False, "revoked")
    held.end(EndReason.LOST)  # a lease ends once: the first reason stays
    assert (held.state, held.end_reason) == (LeaseState.REVOKED, "revoked")


async def test_a_standby_lease_is_held_from_its_start_and_never_commits() -> None:
    store = FakeStore()
    standby = Lease("g", "shard", 3, slot=SLOT, store=store, role="standby")
    assert standby.state is LeaseState.STANDBY
    assert standby.held
    assert standby.token == 0
    with pytest.raises(WorkgroupError, match="standby"):
        await standby.commit("x")
    standby.end(EndReason.LOST)
    assert (standby.state, standby.lost) == (LeaseState.LOST, True)
    assert store.commits == []


@pytest.mark.parametrize(
    ("reason", "state", "lost", "described"),
    [
        (EndReason.REVOKED, LeaseState.REVOKED, False, "revoked"),
        (EndReason.LOST, LeaseState.LOST, True, "lost"),
        (EndReason.FENCED, LeaseState.FENCED, True, "fenced by the coordinator (X)"),
        (EndReason.RELEASED, LeaseState.ENDED, False, "released after failures"),
        (EndReason.NOT_ACQUIRED, LeaseState.ENDED, False, "could not take the token: X"),
        (EndReason.CLOSED, LeaseState.ENDED, False, "closed"),
    ],
)
async def test_each_end_reason_has_its_state_and_its_words(
    reason: EndReason, state: LeaseState, lost: bool, described: str
) -> None:
    held = lease(FakeStore())
    await held.acquire()
    held.end(reason, grace_s=30.0, detail="X")
    assert (held.state, held.lost, held.end_reason) == (state, lost, described)
    assert held.revoked
    assert not held.held
    # Only a revoked lease commits during its grace period.
    assert held.can_commit is (state is LeaseState.REVOKED)


async def test_a_revoked_lease_the_coordinator_refuses_is_fenced_and_stops_at_once() -> None:
    store = FakeStore()
    held = lease(store)
    await held.acquire()
    held.end(EndReason.REVOKED, grace_s=30.0)
    assert not held.lost  # finish the step
    store.answers = [ErrorCode.UNKNOWN_MEMBER_ID]
    with pytest.raises(LeaseLostError, match="fenced"):
        await held.commit("last step")
    assert held.state is LeaseState.FENCED
    assert held.lost  # the member is gone: stop at once
    assert held.end_reason == "fenced by the coordinator (UNKNOWN_MEMBER_ID)"
    assert not held.can_commit
    sent = len(store.resources)
    with pytest.raises(LeaseLostError):
        await held.commit("again")
    assert len(store.resources) == sent  # nothing sent


async def test_a_lease_revoked_while_taking_its_token_never_holds() -> None:
    store = FakeStore()
    held = lease(store)
    taking = asyncio.create_task(held.acquire())
    held.end(EndReason.REVOKED, grace_s=0.0)
    with pytest.raises(LeaseLostError, match="revoked"):
        await taking
    assert held.state is LeaseState.REVOKED
    assert not held.held


def test_every_state_has_a_row_and_ended_states_stay_ended() -> None:
    assert set(NEXT_STATES) == set(LeaseState)
    for state, targets in NEXT_STATES.items():
        assert state not in targets  # no state moves to itself
        if state not in LIVE_STATES:
            assert targets <= {LeaseState.FENCED}  # only a revoked lease is then fenced
    assert NEXT_STATES[LeaseState.REVOKED] == {LeaseState.FENCED}
    for reason in EndReason:  # every reason ends a live lease somewhere it may go
        assert reason.state not in LIVE_STATES
        assert reason.state in NEXT_STATES[LeaseState.ACQUIRING]


def test_a_move_the_table_does_not_list_raises() -> None:
    assert check_transition(LeaseState.ACQUIRING, LeaseState.ACTIVE) is LeaseState.ACTIVE
    with pytest.raises(IllegalLeaseTransitionError, match=r"from LOST to ACTIVE.*nothing"):
        check_transition(LeaseState.LOST, LeaseState.ACTIVE)
    with pytest.raises(IllegalLeaseTransitionError, match="from STANDBY to FENCED"):
        check_transition(LeaseState.STANDBY, LeaseState.FENCED)


_OPERATIONS = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from([ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])),
    st.tuples(st.just("end"), st.sampled_from(list(EndReason)), st.sampled_from([0.0, 5.0])),
    st.tuples(
        st.just("commit"),
        st.sampled_from(
            [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID]
        ),
    ),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 10.0])),
)


@given(role=st.sampled_from(["active", "standby"]), operations=st.lists(_OPERATIONS, max_size=8))
@settings(max_examples=200, deadline=None)
def test_whatever_happens_the_state_and_the_properties_agree(
    role: str, operations: list[tuple[object, ...]]
) -> None:
    """Held, revoked, lost, can_commit and end_reason read one state; a lease
    that ended is never held again; every move is one the table lists."""

    async def scenario() -> None:
        store, clock = FakeStore(), FakeClock()
        held = Lease("g", "shard", 3, slot=SLOT, store=store, role=role, clock=clock)  # type: ignore[arg-type]
        ended_once = False
        sent_when_stopped: int | None = None  # sends once it may never send again
        for operation in operations:
            before = held.state
            name = operation[0]
            with contextlib.suppress(WorkgroupError):
                if name == "acquire" and held.role == "active" and held.token == 0:
                    store.answers = [operation[1]]  # type: ignore[list-item]
                    await held.acquire()
                elif name == "end":
                    held.end(operation[1], grace_s=operation[2], detail="x")  # type: ignore[arg-type]
                elif name == "commit":
                    store.answers = [operation[1]]  # type: ignore[list-item]
                    await held.commit("v")
                elif name == "advance":
                    clock.advance(operation[1])  # type: ignore[arg-type]
            after = held.state
            assert after is before or after in NEXT_STATES[before]
            assert held.held is (after in (LeaseState.ACTIVE, LeaseState.STANDBY))
            assert held.revoked is (after not in LIVE_STATES)
            assert held.lost is (after in (LeaseState.LOST, LeaseState.FENCED))
            assert (held.end_reason is None) is (after in LIVE_STATES)
            if held.can_commit:
                assert held.held or (after is LeaseState.REVOKED and held.token > 0)
            if ended_once:
                assert not held.held
            ended_once = ended_once or held.revoked
            if sent_when_stopped is not None:
                assert len(store.resources) == sent_when_stopped  # nothing sent since
            elif held.revoked and not held.can_commit:
                sent_when_stopped = len(store.resources)

    asyncio.run(scenario())
