"""The load balancing stage: properties, hysteresis, stickiness and the
guarantees it keeps (kinds, racks, standbys)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.assignors import balance as balance_module
from workgroup.assignors._common import RackInfo
from workgroup.assignors.balance import (
    LoadBalancing,
    balance,
    check_settings,
    clean_loads,
    fewest_moves,
)
from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.standby import STANDBY_SUFFIX, StandbyAssignor
from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.errors import ConfigError
from workgroup.types import Resource


def zipf_loads(n: int, s: float = 1.1) -> dict[Resource, float]:
    return {("shard", k): 1000.0 / (k + 1) ** s for k in range(n)}


def dealt(n: int, members: list[str]) -> Assignment:
    out: Assignment = {m: [] for m in members}
    for k in range(n):
        out[members[k % len(members)]].append(("shard", k))
    return out


def utilisations(assignment: Assignment, loads: dict[Resource, float]) -> dict[str, float]:
    return {m: sum(loads[r] for r in rs) for m, rs in assignment.items()}


def ratio(assignment: Assignment, loads: dict[Resource, float]) -> float:
    per = utilisations(assignment, loads)
    mean = sum(per.values()) / len(per)
    return max(per.values()) / mean


@st.composite
def groups(draw: st.DrawFn) -> tuple[Assignment, dict[Resource, float], dict[str, float]]:
    members = [f"m{i}" for i in range(draw(st.integers(1, 6)))]
    n = draw(st.integers(0, 40))
    assignment: Assignment = {m: [] for m in members}
    for k in range(n):
        assignment[draw(st.sampled_from(members))].append(("shard", k))
    loads = {("shard", k): draw(st.floats(0, 1000)) for k in range(n)}
    capacities = {m: draw(st.sampled_from([0.5, 1.0, 2.0])) for m in members}
    return assignment, loads, capacities


@settings(max_examples=200, deadline=None)
@given(groups(), st.floats(0, 0.5), st.integers(0, 20))
def test_properties(
    group: tuple[Assignment, dict[Resource, float], dict[str, float]],
    tolerance: float,
    max_moves: int,
) -> None:
    assignment, loads, capacities = group
    given = {m: list(rs) for m, rs in assignment.items()}
    result = balance(assignment, loads, capacities, tolerance=tolerance, max_moves=max_moves)
    assert assignment == given  # the input is left as it was
    # Never more than max_moves; every resource still held exactly once.
    assert len(result.moves) <= max_moves
    assert sorted(r for rs in result.assignment.values() for r in rs) == sorted(
        r for rs in assignment.values() for r in rs
    )
    # Total load conserved, and the largest utilisation never rises.
    if result.mean:
        assert math.isclose(sum(result.after.values()), sum(result.before.values()), abs_tol=1e-6)
        assert result.ratio() <= result.ratio_before + 1e-9
    # Within tolerance: nothing moves.
    if result.ratio_before <= 1 + tolerance:
        assert result.moves == ()
        assert result.assignment == {m: list(rs) for m, rs in assignment.items()}
    # Deterministic, whatever the order of the input's members.
    again = balance(
        dict(reversed(list(assignment.items()))),
        dict(reversed(list(loads.items()))),
        capacities,
        tolerance=tolerance,
        max_moves=max_moves,
    )
    assert again.assignment == result.assignment
    assert again.moves == result.moves


def test_zipf_skew_comes_within_the_tolerance_in_few_moves() -> None:
    loads = zipf_loads(64)
    members = ["a", "b", "c", "d"]
    start = dealt(64, members)
    assert ratio(start, loads) > 1.5
    result = balance(start, loads, dict.fromkeys(members, 1.0), tolerance=0.10, max_moves=64)
    assert result.ratio() <= 1.10
    assert ratio(result.assignment, loads) == pytest.approx(result.ratio())
    # Resource 0 alone is about the mean: its holder may keep only ~5 % more, so
    # it must shed all but its 3 lightest of 15 others (12 moves); moving
    # resource 0 instead leaves its new holder with the same problem.
    assert len(result.moves) == 12
    assert fewest_moves(start, loads, dict.fromkeys(members, 1.0), result.mean * 1.05) <= 12
    # Each resource moved at most once.
    assert len({m.resource for m in result.moves}) == len(result.moves)


def test_max_moves_caps_and_leaves_the_rest_for_later() -> None:
    loads = zipf_loads(64)
    members = ["a", "b", "c", "d"]
    first = balance(dealt(64, members), loads, dict.fromkeys(members, 1.0), max_moves=1)
    assert len(first.moves) == 1
    assert first.over(0.10)
    second = balance(first.assignment, loads, dict.fromkeys(members, 1.0), max_moves=16)
    assert not second.over(0.10)


def test_hysteresis_balances_down_to_the_target_then_leaves_noise_alone() -> None:
    rng = random.Random(7)
    loads = zipf_loads(64)
    members = ["a", "b", "c", "d"]
    result = balance(dealt(64, members), loads, dict.fromkeys(members, 1.0), max_moves=64)
    assert result.ratio() <= 1.05 + 1e-9  # the target: half the tolerance
    # +-2 % noise cannot push a member from the target past the tolerance.
    noisy = {r: x * rng.uniform(0.98, 1.02) for r, x in loads.items()}
    again = balance(result.assignment, noisy, dict.fromkeys(members, 1.0), max_moves=64)
    assert again.moves == ()


def test_capacity_scales_the_share() -> None:
    loads = {("shard", k): 10.0 for k in range(30)}
    start = {
        "big": [("shard", k) for k in range(10)],
        "small": [("shard", k) for k in range(10, 30)],
    }
    result = balance(start, loads, {"big": 2.0, "small": 1.0}, tolerance=0.0, target=0.0)
    assert utilisations(result.assignment, loads) == {"big": 200.0, "small": 100.0}


def test_unreported_resources_count_as_the_average() -> None:
    # Member b's resources report nothing (an older member): they count as 10 each.
    loads = {("shard", k): 10.0 for k in range(4)}
    start = {"a": [("shard", k) for k in range(4)], "b": [("shard", k) for k in range(4, 8)]}
    assert balance(start, loads, {"a": 1.0, "b": 1.0}).moves == ()
    assert balance(start, {}, {"a": 1.0, "b": 1.0}).moves == ()  # nobody measures: no-op


def test_moves_respect_kinds_pins_and_multiple_holders() -> None:
    loads = {("hot", 0): 100.0, ("hot", 1): 100.0, ("cold", 0): 1.0, ("cold", 1): 1.0}
    start = {"a": [("hot", 0), ("hot", 1)], "b": [("cold", 0)], "c": [("cold", 1)]}
    kinds = {"a": {"hot", "cold"}, "b": {"cold"}, "c": {"hot", "cold"}}
    result = balance(start, loads, dict.fromkeys(start, 1.0), kinds=kinds)
    # The hot resource goes to c (b does not take it); c then passes b a cold one.
    assert [(m.resource[0], m.taker) for m in result.moves] == [("hot", "c"), ("cold", "b")]
    pinned = balance(
        start, loads, dict.fromkeys(start, 1.0), kinds=kinds, pinned={("hot", 0), ("hot", 1)}
    )
    assert pinned.moves == ()


def test_moves_and_returns_respect_refusals() -> None:
    loads = {("hot", 0): 100.0, ("hot", 1): 100.0, ("cold", 0): 1.0, ("cold", 1): 1.0}
    start = {"a": [("hot", 0), ("hot", 1)], "b": [("cold", 0)], "c": [("cold", 1)]}
    refused = {"c": frozenset({("hot", 0), ("hot", 1)})}
    result = balance(start, loads, dict.fromkeys(start, 1.0), refused=refused)
    assert result.moves
    assert not any(m.taker == "c" and m.resource[0] == "hot" for m in result.moves)
    # A resource the refusals took from its owner is not given back to it.
    owned = {"a": [("s", 0)], "b": [("s", k) for k in range(1, 8)]}
    loads = {("s", 0): 70.0, **{("s", k): 10.0 for k in range(1, 8)}}
    counts = {"a": [("s", 0), ("s", 1)], "b": [("s", k) for k in range(2, 8)]}
    refusing = balance(
        counts, loads, {"a": 1.0, "b": 1.0}, owned=owned, refused={"b": frozenset({("s", 1)})}
    )
    assert ("s", 1) not in refusing.assignment["b"]
    assert ("s", 1) not in {m.resource for m in refusing.returned}


def test_an_active_never_moves_onto_its_standby_holder() -> None:
    loads = {("s", 0): 100.0, ("s", 1): 100.0, ("s", 2): 1.0}
    start = {
        "a": [("s", 0), ("s", 1)],
        "b": [("s", 2), ("s.standby", 0), ("s.standby", 1)],
        "c": [("s.standby", 2)],
    }
    result = balance(start, loads, dict.fromkeys(start, 1.0), tolerance=0.0, max_moves=5)
    for move in result.moves:
        assert move.taker != "b" or move.resource[0] != "s" or move.resource[1] == 2
    assert all(m.taker == "c" for m in result.moves if m.resource[1] in (0, 1))
    assert result.moves


def test_a_resource_on_its_holders_rack_stays_on_that_rack() -> None:
    members = {
        "a": MemberInfo("a", frozenset({"s"}), rack="r1"),
        "b": MemberInfo("b", frozenset({"s"}), rack="r2"),
        "c": MemberInfo("c", frozenset({"s"}), rack="r1"),
    }
    data = AssignmentInput(
        resources={"s": range(3)},
        members=members,
        resource_racks={
            ("s", 0): frozenset({"r1"}),
            ("s", 1): frozenset({"r1"}),
            ("s", 2): frozenset({"r2"}),
        },
    )
    loads = {("s", 0): 100.0, ("s", 1): 100.0, ("s", 2): 1.0}
    start = {"a": [("s", 0), ("s", 1)], "b": [("s", 2)], "c": []}
    result = balance(start, loads, dict.fromkeys(members, 1.0), racks=RackInfo.build(data))
    # Not to b, the lightest: the resource is local to a, and b is on another rack.
    assert [(m.resource, m.taker) for m in result.moves] == [(("s", 0), "c")]


def test_resources_the_assignor_took_for_counts_go_back_to_their_owner() -> None:
    # After load balancing a holds 1 hot resource, b 7 cold ones.  A count-based
    # assignor then moves 3 cold ones to a; the stage gives them back.
    loads = {("s", 0): 70.0, **{("s", k): 10.0 for k in range(1, 8)}}
    owned = {"a": [("s", 0)], "b": [("s", k) for k in range(1, 8)]}
    count_balanced = {
        "a": [("s", 0), ("s", 1), ("s", 2), ("s", 3)],
        "b": [("s", k) for k in range(4, 8)],
    }
    result = balance(count_balanced, loads, {"a": 1.0, "b": 1.0}, owned=owned)
    assert result.moves == ()
    assert sorted(m.resource for m in result.returned) == [("s", 1), ("s", 2), ("s", 3)]
    assert result.assignment["a"] == [("s", 0)]


def test_a_newcomer_keeps_what_it_was_given() -> None:
    loads = {("s", k): 10.0 for k in range(12)}
    owned = {"a": [("s", k) for k in range(6)], "b": [("s", k) for k in range(6, 12)]}
    counts = {
        "a": [("s", k) for k in range(4)],
        "b": [("s", k) for k in range(6, 10)],
        "c": [("s", 4), ("s", 5), ("s", 10), ("s", 11)],
    }
    result = balance(counts, loads, dict.fromkeys(counts, 1.0), owned=owned)
    assert result.returned == ()
    assert result.assignment == counts


def test_the_count_balance_does_not_undo_where_the_stage_placed_resources() -> None:
    # The group runs the stage's placement (max/mean 1.144); the count balance
    # takes 7 from c and 9 from b (1.373), leaving a and d below the floor once
    # given back.  Where the stage put them, they go back all the same.
    loads = {("s", k): float(x) for k, x in enumerate((16, 2, 17, 16, 8, 12, 12, 8, 17, 10))}

    def shards(*keys: int) -> list[Resource]:
        return [("s", k) for k in keys]

    owned = {"a": shards(0), "b": shards(1, 3, 5, 9), "c": shards(2, 4, 6, 7), "d": shards(8)}
    counts = {"a": shards(0, 7), "b": shards(1, 3, 5), "c": shards(2, 4, 6), "d": shards(8, 9)}
    capacities = {"a": 1.0, "b": 2.0, "c": 2.0, "d": 1.0}
    running = balance(owned, loads, capacities, max_moves=0).ratio()
    pinned = frozenset(shards(7, 8, 9))
    placed = {("s", 7): "c", ("s", 9): "b"}
    result = balance(
        counts, loads, capacities, max_moves=2, owned=owned, pinned=pinned, placed=placed
    )
    assert [(m.resource, m.taker) for m in result.returned] == [(("s", 7), "c"), (("s", 9), "b")]
    assert result.ratio() < running < result.ratio_before
    # Without that memory the floor keeps the count balance, above what runs.
    floor = balance(counts, loads, capacities, max_moves=2, owned=owned, pinned=pinned)
    assert floor.returned == ()
    assert floor.ratio() > running
    # A tolerance that turns balancing off leaves the count balance as it was.
    off = balance(counts, loads, capacities, tolerance=10.0, owned=owned, placed=placed)
    assert off.returned == ()
    assert off.assignment == counts


def test_a_resource_handed_to_a_new_owner_without_a_load_is_reported() -> None:
    # A new leader knows the loads a and b published, not shard 2's (its owner
    # left): giving it to a is a guess that a's measurement settles.
    loads = {("s", 0): 1.0, ("s", 1): 1.0}
    capacities = {"a": 1.0, "b": 1.0}
    owned = {"a": [("s", 0)], "b": [("s", 1)]}
    published = {"a": 1.0, "b": 1.0}
    handed = {"a": [("s", 0), ("s", 2)], "b": [("s", 1)]}

    def guessed(
        assignment: Assignment,
        loads: dict[Resource, float],
        owned: dict[str, list[Resource]],
        owned_loads: dict[str, float] | None = published,
    ) -> bool:
        return balance(
            assignment, loads, capacities, owned=owned, owned_loads=owned_loads
        ).gained_unmeasured

    assert guessed(handed, loads, owned)
    # Once a owns it, it is no news (a load never reported stays a guess).
    assert not guessed(handed, loads, handed)
    assert not guessed(handed, {**loads, ("s", 2): 1.0}, owned)
    # A member that published no load rejoins by itself once it measures.
    assert not guessed(handed, loads, owned, owned_loads=None)
    # Standby twins count as 0 unless reported: not a guess.
    with_twin = {"a": [("s", 0)], "b": [("s", 1), ("s" + STANDBY_SUFFIX, 0)]}
    assert not guessed(with_twin, loads, owned)
    # A member that owned nothing (all of it revoked when the leader left)
    # published nothing, and gains all it holds: a guess too.
    assert guessed(handed, loads, {"b": [("s", 1)]}, owned_loads={"b": 1.0})


@pytest.mark.parametrize("measured", [True, False])
def test_a_large_group_reports_unmeasured_resources_handed_out(measured: bool) -> None:
    # Summed through the load index (20,000 resources and more).
    keys = range(30_000)
    loads = {("s", k): 1.0 for k in keys if measured or k != 29_999}
    handed = {"a": [("s", k) for k in keys if k % 2], "b": [("s", k) for k in keys if not k % 2]}
    owned: dict[str, list[Resource]] = {"a": [], "b": []}
    result = balance(handed, loads, {"a": 1.0, "b": 1.0}, owned=owned)
    assert result.gained_unmeasured is not measured


@pytest.mark.parametrize(
    ("held", "pinned", "published"),
    [
        # Shards 1 and 2 (4 each) published by different members: a swap of
        # the two "lowers" c by the encoding's rounding.
        ({"a": [3], "b": [5], "c": [1, 4], "d": [0, 2]}, [0, 4], (13, 4.00003, 3.99997, 7, 17, 10)),
        # c and d mirrored: the chain giving 17 for 13 only swaps their roles.
        ({"a": [3], "b": [5], "c": [0, 1], "d": [2, 4]}, [1, 2], (13, 3.99994, 4.00006, 7, 17, 10)),
    ],
    ids=["equal-resources", "mirrored-members"],
)
def test_loads_within_their_resolution_decide_as_equal_loads(
    held: dict[str, list[int]], pinned: list[int], published: tuple[float, ...]
) -> None:
    capacities = {"a": 1.0, "b": 1.0, "c": 2.0, "d": 2.0}
    assignment = {m: [("s", k) for k in keys] for m, keys in held.items()}

    def run(values: tuple[float, ...]) -> tuple[list[tuple[Resource, str]], bool]:
        loads = {("s", k): float(x) for k, x in enumerate(values)}
        result = balance(
            assignment,
            loads,
            capacities,
            max_moves=2,
            owned=assignment,
            pinned=frozenset(("s", k) for k in pinned),
        )
        return [(m.resource, m.taker) for m in result.moves], result.heading is not None

    assert run(published) == run((13, 4, 4, 7, 17, 10))


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="imbalance_tolerance"):
        check_settings(-0.1, 5)
    with pytest.raises(ConfigError, match="max_moves"):
        check_settings(0.1, -1)
    with pytest.raises(ConfigError, match="target"):
        check_settings(0.1, 5, target=0.2)
    assert clean_loads({("s", 0): -1.0, ("s", 1): math.nan, ("s", 2): 3.0}) == {("s", 2): 3.0}


def test_wrapper_balances_the_assignors_target_and_keeps_the_plan_across_rounds() -> None:
    members = {m: MemberInfo(m, frozenset({"s"})) for m in ("a", "b", "c", "d")}
    loads = zipf_loads(64)
    loads = {("s", k): x for (_, k), x in loads.items()}
    data = AssignmentInput(resources={"s": range(64)}, members=members, resource_loads=loads)
    wrapper = LoadBalancing(CooperativeStickyAssignor(), max_moves=64)
    first = wrapper.assign(data)
    assert wrapper.last is not None
    assert wrapper.last.ratio() <= 1.10
    # The members rejoin owning the balanced assignment: nothing moves again.
    owning = {
        m: MemberInfo(m, frozenset({"s"}), owned=tuple(first[m]), generation=1) for m in members
    }
    again = LoadBalancing(CooperativeStickyAssignor(), max_moves=64)
    second = again.assign(
        AssignmentInput(resources={"s": range(64)}, members=owning, resource_loads=loads)
    )
    assert {m: sorted(rs) for m, rs in second.items()} == {m: sorted(rs) for m, rs in first.items()}
    assert again.last is not None
    assert again.last.moves == ()


def test_wrapper_over_standbys_keeps_each_standby_apart_from_its_active() -> None:
    members = {m: MemberInfo(m, frozenset({"s", "s.standby"})) for m in ("a", "b", "c")}
    loads = {("s", k): 1000.0 / (k + 1) for k in range(12)}
    data = AssignmentInput(
        resources={"s": range(12), "s.standby": range(12)}, members=members, resource_loads=loads
    )
    result = LoadBalancing(StandbyAssignor(CooperativeStickyAssignor(), 1), max_moves=20).assign(
        data
    )
    for mid, resources in result.items():
        actives = {k for kind, k in resources if kind == "s"}
        standbys = {k for kind, k in resources if kind == "s.standby"}
        assert not actives & standbys, mid
    assert sorted(k for rs in result.values() for kind, k in rs if kind == "s") == list(range(12))


def test_a_swap_evens_out_what_single_moves_cannot() -> None:
    # Two 40s on a, two 20s on c: giving a 40 to anyone makes the taker the
    # busiest; swapping a 40 for a 20 brings everyone to 60.
    loads = {("s", 0): 40.0, ("s", 1): 40.0, ("s", 2): 40.0, ("s", 3): 20.0, ("s", 4): 20.0}
    loads[("s", 5)] = 20.0
    start = {"a": [("s", 0), ("s", 1)], "b": [("s", 2), ("s", 3)], "c": [("s", 4), ("s", 5)]}
    result = balance(start, loads, dict.fromkeys(start, 1.0), max_moves=4)
    assert result.ratio_before == pytest.approx(80 / 60)
    assert result.ratio() == pytest.approx(1.0)
    assert len(result.moves) == 2
    assert {(m.giver, m.taker) for m in result.moves} == {("a", "c"), ("c", "a")}
    # With one move a round, a placement within the tolerance is a target some
    # rounds away: the rounds on the way do not lower the peak (80) but never
    # raise it, and each moves a resource to where the target puts it.
    capacities = dict.fromkeys(start, 1.0)
    result = balance(start, loads, capacities, max_moves=1)
    heading = result.heading
    assert heading is not None
    assert result.unfinished(0.10)
    rounds = 1
    while result.heading is not None:
        assert len(result.moves) == 1
        assert result.moves[0].taker == heading.placement[result.moves[0].resource]
        assert result.ratio() <= 80 / 60 + 1e-9
        result = balance(result.assignment, loads, capacities, max_moves=1, heading=result.heading)
        rounds += 1
    assert rounds <= len(heading.moving)
    assert result.ratio() <= 1.10


@settings(max_examples=100, deadline=None)
@given(groups(), st.data())
def test_owned_loads_give_the_same_loads_as_looking_everything_up(
    group: tuple[Assignment, dict[Resource, float], dict[str, float]], data: st.DataObject
) -> None:
    assignment, loads, capacities = group
    members = list(assignment)
    # What members owned before: each resource with a random member (or nobody).
    owned: dict[str, list[Resource]] = {m: [] for m in members}
    for resource in loads:
        holder = data.draw(st.sampled_from([*members, None]))
        if holder is not None:
            owned[holder].append(resource)
    owned_loads = {m: math.fsum(loads[r] for r in rs) for m, rs in owned.items() if rs}
    plain = balance(assignment, loads, capacities, owned=owned, max_moves=8)
    quick = balance(
        assignment, loads, capacities, owned=owned, owned_loads=owned_loads, max_moves=8
    )
    # The same loads (up to rounding, which may break ties differently).
    assert quick.before == pytest.approx(plain.before, abs=1e-6)
    assert len(quick.moves) <= 8
    if quick.mean:
        assert quick.ratio() <= quick.ratio_before + 1e-9


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), max_size=12, unique=True), min_size=1, max_size=6).filter(
        lambda lists: len({k for keys in lists for k in keys}) == sum(map(len, lists))
    ),
    st.dictionaries(st.integers(0, 40), st.floats(0, 100), max_size=41),
    st.booleans(),
)
def test_member_totals_are_the_sums_of_their_resources(
    held: list[list[int]],
    measured: dict[int, float],
    indexed: bool,
) -> None:
    # Lists of any lengths, with or without unmeasured resources, summed one
    # resource at a time or through the per-kind index (large groups): each
    # member's load before is the sum over what it holds (unmeasured: the mean),
    # and both ways decide the same moves.
    kinds = ("shard", "other")
    assignment: Assignment = {
        f"m{i}": [(kinds[k % 2], k) for k in keys] for i, keys in enumerate(held)
    }
    loads: dict[Resource, float] = {(kinds[k % 2], k): x for k, x in measured.items()}
    # A standby twin unmeasured counts as 0, measured as reported.
    assignment["m0"].append(("shard.standby", 99))
    if indexed:
        loads[("shard.standby", 98)] = 3.0
        assignment["m0"].append(("shard.standby", 98))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(balance_module, "_INDEX_FROM", 0 if indexed else 10**9)
        result = balance(assignment, loads, dict.fromkeys(assignment, 1.0), max_moves=8)
    plain = balance(assignment, loads, dict.fromkeys(assignment, 1.0), max_moves=8)
    if not loads:
        return
    default = math.fsum(loads.values()) / len(loads)
    for member, resources in assignment.items():
        expected = math.fsum(
            loads.get(r, 0.0 if r[0].endswith(".standby") else default) for r in resources
        )
        assert result.before[member] == pytest.approx(expected, abs=1e-6)
    assert [m.resource for m in result.moves] == [m.resource for m in plain.moves]
    assert result.assignment == plain.assignment


def test_remembered_loads_balance_a_fresh_group_and_are_read_in_place() -> None:
    # A fresh group (nobody owns or reports anything) balanced on the loads the
    # leader remembers: the stage reads them as they are, merged only with reports.
    members = {m: MemberInfo(m, frozenset({"s"})) for m in ("a", "b", "c", "d")}
    remembered = {("s", k): x for (_, k), x in zipf_loads(64).items()}
    data = AssignmentInput(resources={"s": range(64)}, members=members)
    wrapper = LoadBalancing(CooperativeStickyAssignor(), max_moves=64, loads=remembered)
    wrapper.assign(data)
    assert wrapper.loads_seen is remembered
    assert wrapper.last is not None
    assert wrapper.last.ratio() <= 1.10 < wrapper.last.ratio_before
    reported = {("s", 0): 1.0}
    wrapper.assign(
        AssignmentInput(resources={"s": range(64)}, members=members, resource_loads=reported)
    )
    assert wrapper.loads_seen == {**remembered, **reported}
    assert remembered[("s", 0)] != 1.0  # the remembered loads are never modified


def test_a_resource_nobody_may_take_stays_where_it_is() -> None:
    # a holds a kind nobody takes any more: no move, swap or chain helps, and the
    # placement afresh leaves it on its holder (it used to find no member at all).
    start = {"a": [("y", 0)], "b": [("x", 1)]}
    loads = {("y", 0): 10.0, ("x", 1): 1.0}
    result = balance(start, loads, {"a": 1.0, "b": 1.0}, kinds={"a": ["x"], "b": ["x"]})
    assert result.moves == ()
    assert result.assignment == start
