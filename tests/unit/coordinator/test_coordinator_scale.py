"""1,000 members join an empty group and sync, counted in actions (no timing)."""

from __future__ import annotations

from workgroup.coordinator.actions import Persist, Reply
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import Heartbeat, JoinGroupResult, SyncGroupResult
from workgroup.testing.coordinator import CoordinatorHarness, join_request

MEMBERS = 1_000


def test_a_thousand_members_join_and_sync_in_one_call_sequence() -> None:
    h = CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    # Round one: every member asks for an id (JoinGroup v4+).
    first = [h.send(join_request("big")) for _ in range(MEMBERS)]
    ids = [h.result(t, JoinGroupResult).member_id for t in first]
    assert len(set(ids)) == MEMBERS
    # Round two: every member joins with its id; all are parked.
    joins = [h.send(join_request("big", member_id)) for member_id in ids]
    assert not any(h.answered(t) for t in joins)
    fired = h.advance(0)  # the (zero) initial delay ends
    assert len(fired) == MEMBERS  # one JoinGroup answer each, nothing else
    results = [h.result(t, JoinGroupResult) for t in joins]
    leader = results[0].leader
    assert {r.generation_id for r in results} == {1}
    assert sum(1 for r in results if r.members) == 1
    assert len(next(r for r in results if r.member_id == leader).members) == MEMBERS
    # Followers sync first (parked), then the leader's assignment releases everyone.
    syncs = [h.sync("big", m, 1) for m in ids if m != leader]
    assert not any(h.answered(t) for t in syncs)
    before = len(h.actions)
    syncs.append(h.sync("big", leader, 1, tuple((m, m.encode()) for m in ids)))
    released = h.actions[before:]
    assert len(released) == 1 + MEMBERS
    assert isinstance(released[0], Persist)
    assert all(isinstance(a, Reply) for a in released[1:])
    for member_id, token in zip([m for m in ids if m != leader] + [leader], syncs, strict=True):
        answer = h.result(token, SyncGroupResult)
        assert answer.error is ErrorCode.NONE
        assert answer.assignment == member_id.encode()
    # Total: 1,000 id answers + 1,000 join answers + 1,000 sync answers + 1 persist.
    assert len(h.actions) == 3 * MEMBERS + 1
    # Each heartbeat is one action and touches no other member.
    for member_id in ids:
        assert len(h.coordinator.handle(h.now_ms, object(), Heartbeat("big", 1, member_id))) == 1
