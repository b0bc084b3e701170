"""The session margin and the request timeout (MemberConfig, rules 1 and 2): a member
ends its leases a margin before its session can end on the coordinator, never
spuriously while heartbeats are answered, and its requests time out with the session."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from machine_steps import ack_callbacks as ack
from machine_steps import only, sent
from member_sim import StickyTestAssignor

from workgroup.errors import ConfigError, ErrorCode
from workgroup.kafka.messages import (
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.actions import Action, InvokeCallback, SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.heartbeat import HeartbeatTimer
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData, BinaryCodec, Protocol

PROTOCOL = Protocol("sticky", StickyTestAssignor())
CODEC = BinaryCodec()
CATALOG = {"shard": list(range(4))}
OWNED = (("shard", 0), ("shard", 1))


def config(**kwargs: object) -> MemberConfig:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [PROTOCOL],
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": 3_000,
    }
    options.update(kwargs)
    return MemberConfig(**options)  # type: ignore[arg-type]


def join_and_sync(m: MemberMachine, join: SendRequest, now: int, generation: int) -> int:
    """Answer ``join`` and the SyncGroup that follows with OWNED; returns the time."""
    actions = m.response(
        now,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, generation, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    assert isinstance(sync.request, SyncGroup)
    blob = CODEC.encode_assignment(AssignmentData(assigned=OWNED, generation=generation))
    actions = m.response(now + 1, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    ack(m, actions, now + 1)
    assert m.state is State.STABLE
    assert m.owned == set(OWNED)
    return now + 1


def stable(cfg: MemberConfig) -> tuple[MemberMachine, int]:
    """A follower STABLE in generation 5 owning OWNED, proven alive since t=2."""
    m = MemberMachine(cfg, CATALOG)
    join = sent(m.start(0) + m.coordinator_found(1))
    assert isinstance(join.request, JoinGroup)
    return m, join_and_sync(m, join, 2, 5)


def until_lost(m: MemberMachine, start: int) -> tuple[int, list[Action]]:
    """Tick at every deadline (never answering) until a callback is issued."""
    t, actions = start, []
    while not only(actions, InvokeCallback):
        next_at = m.next_deadline()
        assert next_at is not None
        t = next_at
        actions = m.tick(t)
    return t, actions


# --- the margin's value and its checks --------------------------------------------


@pytest.mark.parametrize(
    ("session", "heartbeat", "rebalance", "margin"),
    [
        (10_000, 3_000, 60_000, 1_000),  # a tenth of the session
        (30_000, 3_000, 60_000, 3_000),
        (2_000, 500, 60_000, 500),  # at least 500 ms ...
        (1_000, 300, 60_000, 400),  # ... as long as two heartbeat intervals remain
        (1_000, 600, 60_000, 0),  # no room at all: no margin
        (10_000, 3_000, 6_500, 500),  # the rebalance timeout leaves less room
    ],
)
def test_the_default_margin(session: int, heartbeat: int, rebalance: int, margin: int) -> None:
    cfg = config(
        session_timeout_ms=session, heartbeat_interval_ms=heartbeat, rebalance_timeout_ms=rebalance
    )
    assert cfg.session_margin_ms is None
    assert cfg.effective_session_margin_ms == margin


def test_a_margin_must_leave_two_heartbeat_intervals() -> None:
    assert config(session_margin_ms=4_000).effective_session_margin_ms == 4_000  # 10 s - 2 x 3 s
    assert config(session_margin_ms=0).effective_session_margin_ms == 0
    with pytest.raises(ConfigError, match=r"must leave two heartbeat intervals.*at most 4000 ms"):
        config(session_margin_ms=4_001)
    with pytest.raises(ConfigError, match="session margin must be >= 0"):
        config(session_margin_ms=-1)
    with pytest.raises(ConfigError, match="rebalance timeout"):
        config(rebalance_timeout_ms=6_500, session_margin_ms=1_000)


def test_the_timer_counts_the_session_over_a_margin_early() -> None:
    timer = HeartbeatTimer(
        heartbeat_interval_ms=1_000, session_timeout_ms=6_000, rebalance_timeout_ms=20_000
    )
    timer.margin_ms = 700
    timer.proved_alive(500, 400, held=False)
    assert timer.session_end() == 400 + 6_000 - 700
    timer.round_began_after(300)
    assert timer.session_end(rebalancing=True) == 400 + 6_000 - 700  # the session binds first
    timer.round_floor = -15_000
    assert timer.session_end(rebalancing=True) == -15_000 + 20_000 - 700


# --- losing early -----------------------------------------------------------------


@pytest.mark.parametrize("margin", [0, 1_000, 4_000])
def test_an_unanswered_member_loses_a_margin_before_its_session_ends(margin: int) -> None:
    m, now = stable(config(session_margin_ms=margin))
    beat = sent(m.tick(now + 3_000))  # never answered
    assert isinstance(beat.request, Heartbeat)
    t, actions = until_lost(m, now + 3_000)
    assert t == 2 + 10_000 - margin  # proven alive at 2: the coordinator evicts at 10 002
    assert [(c.kind, c.resources) for c in only(actions, InvokeCallback)] == [("on_lost", OWNED)]
    assert not m.owned
    # As at the session's end: the member starts over and finds out by rejoining.
    assert m.state is State.FINDING_COORDINATOR
    assert m.generation == -1


def test_a_rejoin_held_without_answer_loses_a_margin_before_the_rebalance_timeout() -> None:
    m, now = stable(config(session_margin_ms=2_000, rebalance_timeout_ms=12_000))
    beat = sent(m.tick(now + 3_000))
    join = sent(
        m.response(now + 3_001, beat.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    )
    assert isinstance(join.request, JoinGroup)
    # Heartbeats beside the held JoinGroup keep the session up; the round that
    # began after the SyncGroup answered at 3 may complete without us at 3 + 12 s.
    t = now + 3_001
    while True:
        next_at = m.next_deadline()
        assert next_at is not None
        t = next_at
        actions = m.tick(t)
        if only(actions, InvokeCallback):
            break
        for request in only(actions, SendRequest):
            assert request.beside_held
            m.response(t + 5, request.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    assert t == 2 + 12_000 - 2_000
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    assert m.state is State.JOINING  # the JoinGroup goes on


def test_after_losing_early_a_member_still_alive_rejoins_once_and_stays() -> None:
    """The margin may end the leases of a member whose session was still alive (its
    heartbeat's answer was only late): it rejoins with its member id, gets its
    resources back, and from then on answered heartbeats keep them: no flapping."""
    m, now = stable(config(session_margin_ms=2_000))
    sent(m.tick(now + 3_000))  # its answer is lost
    t, actions = until_lost(m, now + 3_000)
    ack(m, actions, t)
    join = sent(m.coordinator_found(t + 10))
    assert isinstance(join.request, JoinGroup)
    assert join.request.member_id == "me-1"  # kept: the coordinator may still know it
    now = join_and_sync(m, join, t + 50, 6)
    losses = 0
    end = now + 600_000
    while (next_at := m.next_deadline()) is not None and next_at <= end:
        actions = m.tick(next_at)
        losses += len(only(actions, InvokeCallback))
        for request in only(actions, SendRequest):
            assert isinstance(request.request, Heartbeat)
            m.response(next_at + 40, request.request_id, HeartbeatResult(ErrorCode.NONE))
    assert losses == 0
    assert m.state is State.STABLE
    assert m.generation == 6
    assert m.owned == set(OWNED)


@settings(max_examples=60, deadline=None)
@given(
    delays=st.lists(st.integers(min_value=0, max_value=2_999), min_size=1, max_size=40),
    margin=st.sampled_from([None, 1_000, 4_000]),
)
def test_answered_heartbeats_never_lose_with_the_largest_margin(
    delays: list[int], margin: int | None
) -> None:
    """Answers that take anything below a heartbeat interval prove the session in
    time, even with the largest margin allowed (two intervals of the session left)."""
    m, now = stable(config(session_margin_ms=margin))
    pending: list[tuple[int, SendRequest]] = []
    answered = 0
    t = now
    while answered < len(delays):
        deadlines = [at for at, _ in pending]
        next_at = m.next_deadline()
        if next_at is not None:
            deadlines.append(next_at)
        t = min(deadlines)
        due = [(at, r) for at, r in pending if at <= t]
        pending = [(at, r) for at, r in pending if at > t]
        actions: list[Action] = []
        for _, request in due:
            actions += m.response(t, request.request_id, HeartbeatResult(ErrorCode.NONE))
            answered += 1
        if next_at is not None and next_at <= t:
            actions += m.tick(t)
        assert not only(actions, InvokeCallback), (t, delays)
        for request in only(actions, SendRequest):
            assert isinstance(request.request, Heartbeat)
            pending.append((t + delays[answered % len(delays)], request))
    assert m.state is State.STABLE
    assert m.owned == set(OWNED)


# --- the request timeout ----------------------------------------------------------


@pytest.mark.parametrize(
    ("session", "heartbeat", "timeout"),
    [(10_000, 3_000, 10_000), (6_000, 2_000, 6_000), (45_000, 3_000, 30_000), (600, 100, 1_000)],
)
def test_the_request_timeout_follows_the_session(
    session: int, heartbeat: int, timeout: int
) -> None:
    cfg = config(session_timeout_ms=session, heartbeat_interval_ms=heartbeat)
    assert cfg.request_timeout_ms is None
    assert cfg.effective_request_timeout_ms == timeout


def test_a_given_request_timeout_stands_and_must_be_positive() -> None:
    assert config(request_timeout_ms=45_000).effective_request_timeout_ms == 45_000
    with pytest.raises(ConfigError, match="request timeout must be > 0"):
        config(request_timeout_ms=0)
