"""Rules of one group held by ``group.py``: transitions, admission, the preference vote."""

from __future__ import annotations

import pytest

from workgroup.coordinator.group import Group, GroupState, InvalidTransition, Member

S = GroupState

ALLOWED = {
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.COMPLETING_REBALANCE, S.STABLE),
} | {(state, S.DEAD) for state in S}


def member(member_id: str, *protocols: str, instance: str | None = None) -> Member:
    return Member(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="h",
        rebalance_timeout_ms=1000,
        session_timeout_ms=1000,
        protocol_type="consumer",
        protocols=tuple((name, name.encode()) for name in protocols),
    )


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_state_transitions_follow_kafka(source: GroupState, target: GroupState) -> None:
    group = Group("g", state=source)
    if (source, target) in ALLOWED:
        group.transition_to(target)
        assert group.state is target
        assert group.previous_state is source
    else:
        with pytest.raises(InvalidTransition):
            group.transition_to(target)
        assert group.state is source


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_empty_group_admits_any_non_empty_type_and_protocol_list() -> None:
    group = Group("g")
    assert group.supports_protocols("consumer", frozenset({"x"}))
    assert not group.supports_protocols("", frozenset({"x"}))
    assert not group.supports_protocols("consumer", frozenset())


def test_admission_needs_a_protocol_every_member_supports() -> None:
    group = Group("g", state=S.STABLE)
    group.add(member("a", "range", "roundrobin"), None)
    group.add(member("b", "range"), None)
    assert group.supports_protocols("consumer", frozenset({"range"}))
    assert group.supports_protocols("consumer", frozenset({"sticky", "range"}))
    # roundrobin is supported by "a" only.
    assert not group.supports_protocols("consumer", frozenset({"roundrobin"}))
    assert not group.supports_protocols("connect", frozenset({"range"}))


def test_removing_a_member_updates_protocol_support() -> None:
    group = Group("g", state=S.STABLE)
    group.add(member("a", "roundrobin"), None)
    group.add(member("b", "range", "roundrobin"), None)
    assert not group.supports_protocols("consumer", frozenset({"range"}))
    group.remove("a")
    assert group.supports_protocols("consumer", frozenset({"range"}))
    assert dict(group.supported_protocols) == {"range": 1, "roundrobin": 1}


def test_vote_each_member_picks_its_most_preferred_candidate() -> None:
    group = Group("g", state=S.STABLE)
    group.add(member("a", "sticky", "roundrobin", "range"), None)
    group.add(member("b", "roundrobin", "range"), None)
    group.add(member("c", "range", "roundrobin"), None)
    group.add(member("d", "roundrobin", "range", "sticky"), None)
    # sticky is not a candidate ("b" and "c" lack it); a and d vote roundrobin.
    assert group.candidate_protocols() == {"roundrobin", "range"}
    assert group.select_protocol() == "roundrobin"


@pytest.mark.parametrize("order", [("x-first", "y-first"), ("y-first", "x-first")])
def test_vote_tie_is_broken_by_java_hashmap_order(order: tuple[str, str]) -> None:
    # "x".hashCode() = 120 (bucket 8), "y".hashCode() = 121 (bucket 9): Kafka's
    # broker keeps the first maximum while iterating its HashMap, i.e. "x",
    # whatever order the votes came in.
    group = Group("g", state=S.STABLE)
    for name in order:
        protocols = ("x", "y") if name == "x-first" else ("y", "x")
        group.add(member(name, *protocols), None)
    assert group.select_protocol() == "x"


def test_all_members_joined_is_a_counter() -> None:
    group = Group("g", state=S.PREPARING_REBALANCE)
    token = object()
    group.add(member("a", "range"), token)
    group.add(member("b", "range"), None)
    assert not group.has_all_members_joined()
    group.update(group.members["b"], group.members["b"].protocols, 1000, 1000, object())
    assert group.has_all_members_joined()
    group.add_pending("c")
    assert not group.has_all_members_joined()
    group.remove("c")
    assert group.has_all_members_joined()
    assert group.take_join_token(group.members["a"]) is token
    assert group.num_awaiting_join == 1


def test_leader_succession_follows_join_order() -> None:
    group = Group("g", state=S.STABLE)
    for name in ("a", "b", "c"):
        group.add(member(name, "range"), None)
    assert group.leader_id == "a"
    group.remove("a")
    assert group.leader_id == "b"


def test_rebalance_timeout_is_the_largest_of_the_members() -> None:
    group = Group("g", state=S.STABLE)
    for name, timeout in (("a", 5_000), ("b", 60_000), ("c", 10_000)):
        m = member(name, "range")
        m.rebalance_timeout_ms = timeout
        group.add(m, None)
    assert group.rebalance_timeout_ms() == 60_000
