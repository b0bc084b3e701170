"""The order of callbacks on close and what a failing callback does (the member
machine's rules 7, 9 and 12), with a fake clock."""

from __future__ import annotations

import pytest
from machine_steps import ack_callbacks, only, sent
from member_sim import StickyTestAssignor

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.actions import (
    Action,
    CallbackErrorPolicy,
    Closed,
    Failed,
    InvokeCallback,
    SendRequest,
)
from workgroup.member.config import MemberConfig
from workgroup.member.errors import CallbackError
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData, BinaryCodec, Protocol

COOPERATIVE = Protocol("sticky", StickyTestAssignor())
EAGER = Protocol("sticky", StickyTestAssignor(), rebalance="eager")
CODEC = BinaryCodec()
CATALOG = {"shard": list(range(6))}
S0, S1 = ("shard", 0), ("shard", 1)


def make(
    policy: CallbackErrorPolicy = "log",
    protocol: Protocol = COOPERATIVE,
    *,
    confirm_release: bool = False,
    **kwargs: object,
) -> MemberMachine:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [protocol],
        "session_timeout_ms": 6_000,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": 1_000,
    }
    options.update(kwargs)
    config = MemberConfig(**options)  # type: ignore[arg-type]
    return MemberMachine(config, CATALOG, confirm_release=confirm_release, on_callback_error=policy)


def assigned(m: MemberMachine, owned: tuple = (S0, S1)) -> list[Action]:
    """Join generation 5 with ``owned``; the actions of the assignment (its
    ``on_assigned`` not answered yet)."""
    join = sent(m.start(0) + m.coordinator_found(1))
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    assert isinstance(sync.request, SyncGroup)
    blob = CODEC.encode_assignment(AssignmentData(assigned=owned, generation=5))
    return m.response(2, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))


def callback(actions: list[Action], kind: str) -> InvokeCallback:
    (found,) = [c for c in only(actions, InvokeCallback) if c.kind == kind]
    return found


# --- close order -----------------------------------------------------------------------


def test_closing_revokes_after_the_running_callback_and_leaves_after_the_revocation() -> None:
    """The machine issues the callbacks in the order of the changes (the driver runs
    them one after another) and sends LeaveGroup only once the last returned
    (eager: a cooperative member would hand its resources over first, rule 7)."""
    m = make(protocol=EAGER)
    on_assigned = callback(assigned(m), "on_assigned")
    actions = m.close(10)  # while on_assigned still runs
    on_revoked = callback(actions, "on_revoked")
    assert on_revoked.callback_id > on_assigned.callback_id
    assert set(on_revoked.resources) == {S0, S1}
    assert on_revoked.owned == frozenset()
    assert not only(actions, SendRequest)
    assert not only(m.callback_done(11, on_assigned.callback_id), SendRequest)
    leave = sent(m.callback_done(12, on_revoked.callback_id))
    assert isinstance(leave.request, LeaveGroup)


def test_a_cooperative_member_closing_hands_over_before_it_revokes() -> None:
    m = make()
    ack_callbacks(m, assigned(m), 3)
    join = sent(m.close(10))
    assert isinstance(join.request, JoinGroup)  # rejoins tagged as leaving (rule 7)
    assert m.owned == {S0, S1}  # works on them until the round takes them


def test_a_static_member_closing_revokes_then_stops_without_leave_group() -> None:
    m = make(instance_id="w-1")
    ack_callbacks(m, assigned(m), 3)
    actions = m.close(10)
    on_revoked = callback(actions, "on_revoked")
    assert m.state is State.LEAVING
    done = m.callback_done(11, on_revoked.callback_id)
    assert only(done, Closed)
    assert not only(done, SendRequest)


def test_an_eager_member_closing_with_confirmed_releases_leaves_after_the_last_release() -> None:
    m = make(protocol=EAGER, confirm_release=True)
    ack_callbacks(m, assigned(m), 3)
    actions = ack_callbacks(m, m.close(10), 11)
    assert not only(actions, SendRequest)
    assert not only(m.released(12, [S0]), SendRequest)
    leave = sent(m.released(13, [S1]))
    assert isinstance(leave.request, LeaveGroup)


# --- callback failures (rule 12) ------------------------------------------------------


def test_log_keeps_the_change() -> None:
    m = make("log")
    on_assigned = callback(assigned(m), "on_assigned")
    actions = m.callback_failed(3, on_assigned.callback_id, RuntimeError("boom"))
    assert actions == []
    assert m.owned == {S0, S1}
    assert m.settled


def test_release_gives_back_what_a_failed_on_assigned_got_and_rejoins() -> None:
    m = make("release")
    on_assigned = callback(assigned(m), "on_assigned")
    actions = m.callback_failed(3, on_assigned.callback_id, RuntimeError("boom"))
    assert m.owned == frozenset()
    join = sent(actions)  # no callback: the application gave them up
    assert isinstance(join.request, JoinGroup)
    assert not only(actions, InvokeCallback)


def test_release_keeps_a_failed_revocation_as_it_is() -> None:
    m = make("release", EAGER)
    ack_callbacks(m, assigned(m), 3)
    on_revoked = callback(m.close(4), "on_revoked")
    actions = m.callback_failed(5, on_revoked.callback_id, RuntimeError("boom"))
    leave = sent(actions)  # released when the callback ended, failed or not
    assert isinstance(leave.request, LeaveGroup)


def test_fail_fails_the_member_with_the_callbacks_exception_as_cause() -> None:
    m = make("fail")
    on_assigned = callback(assigned(m), "on_assigned")
    boom = RuntimeError("boom")
    actions = m.callback_failed(3, on_assigned.callback_id, boom)
    (failed,) = only(actions, Failed)
    assert isinstance(failed.error, CallbackError)
    assert failed.error.__cause__ is boom
    assert "on_assigned failed in generation 5" in str(failed.error)
    assert callback(actions, "on_lost").resources == (S0, S1)
    leave = sent(actions)  # a dynamic member lets the group rebalance at once
    assert isinstance(leave.request, LeaveGroup)
    assert m.state is State.FATAL


def test_fail_once_fatal_only_logs() -> None:
    m = make("fail")
    actions = m.callback_failed(3, callback(assigned(m), "on_assigned").callback_id, ValueError())
    on_lost = callback(actions, "on_lost")
    again = m.callback_failed(4, on_lost.callback_id, RuntimeError("in on_lost"))
    assert not only(again, Failed)
    assert m.state is State.FATAL


@pytest.mark.parametrize("policy", ["log", "release", "fail"])
def test_a_callback_the_machine_does_not_know_is_ignored(policy: CallbackErrorPolicy) -> None:
    m = make(policy)
    ack_callbacks(m, assigned(m), 3)
    assert m.callback_failed(4, 999, RuntimeError("stale")) == []
    assert m.state is State.STABLE
    assert m.owned == {S0, S1}
