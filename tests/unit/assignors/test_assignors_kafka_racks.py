"""Rack cases ported from Kafka's ``AbstractStickyAssignorTest`` (KIP-881) with the
partition layout of ``AbstractPartitionAssignorTest``: brokers on racks, partition
*i* of a topic has its replicas on brokers ``(i + j + offset) % brokers``."""

from __future__ import annotations

import random

import pytest
from assignor_inputs import check_valid, member

from workgroup.assignors import sticky as sticky_module
from workgroup.assignors.base import AssignmentInput
from workgroup.assignors.sticky import CooperativeStickyAssignor, StickyAssignor, first_round
from workgroup.types import Resource

TOPICS = {"t1": 6, "t2": 7, "t3": 2}
ALL = ["t1", "t2", "t3"]
LETTERS = "abcdefg"


def racks(n: int) -> list[str | None]:
    return [LETTERS[i % len(LETTERS)] for i in range(n)]


def layout(replication: int, broker_racks: list[str | None]) -> dict[Resource, frozenset[str]]:
    out: dict[Resource, frozenset[str]] = {}
    offset = 0
    for topic, count in TOPICS.items():
        for i in range(count):
            nodes = [(i + j + offset) % len(broker_racks) for j in range(replication)]
            on = {broker_racks[n] for n in nodes if broker_racks[n] is not None}
            out[(topic, i)] = frozenset(r for r in on if r is not None)
        offset += count
    return out


def parse(text: str) -> list[Resource]:
    out: list[Resource] = []
    for item in text.split(", "):
        topic, _, partition = item.rpartition("-")
        out.append((topic, int(partition)))
    return out


def run(
    assignor: StickyAssignor,
    replication: int,
    broker_racks: list[str | None],
    consumer_racks: list[str | None],
    topics: list[list[str]],
    owned: list[str] | None,
    expected: list[str],
    mismatches: int,
) -> None:
    resource_racks = layout(replication, broker_racks)
    members = {}
    for i, rack in enumerate(consumer_racks):
        claims = parse(owned[i]) if owned else []
        members[f"consumer{i}"] = member(f"consumer{i}", topics[i], claims, -1, rack=rack)
    data = AssignmentInput(
        {t: range(n) for t, n in TOPICS.items()},
        members,
        {r: rs for r, rs in resource_racks.items() if rs},
    )
    assignment = assignor.assign(data)
    check_valid(data, assignment)
    actual = [
        ", ".join(sorted(f"{t}-{p}" for t, p in assignment[f"consumer{i}"]))
        for i in range(len(consumer_racks))
    ]
    assert actual == expected
    if mismatches >= 0:
        off_rack = [
            r
            for i, rack in enumerate(consumer_racks)
            if rack is not None
            for r in assignment[f"consumer{i}"]
            if rack not in resource_racks[r]
        ]
        assert len(off_rack) == mismatches, off_rack


UNIFORM_EXPECTED = [
    "t1-0, t1-3, t2-0, t2-3, t2-6",
    "t1-1, t1-4, t2-1, t2-4, t3-0",
    "t1-2, t1-5, t2-2, t2-5, t3-1",
]


@pytest.fixture(params=[StickyAssignor(), CooperativeStickyAssignor()], ids=lambda a: a.name)
def assignor(request: pytest.FixtureRequest) -> StickyAssignor:
    chosen: StickyAssignor = request.param
    return chosen


@pytest.mark.parametrize(
    ("replication", "brokers", "consumers", "mismatches"),
    [
        (3, [None, None, None], racks(3), -1),  # brokers without racks
        (3, racks(3), [None, None, None], -1),  # consumers without racks
        (3, racks(3), racks(3), 0),  # every partition on every rack
        (3, racks(3), ["d", "e", "f"], -1),  # no rack in common
        (3, racks(3), [None, "e", "f"], -1),
        (1, racks(3), racks(3), 0),  # rack-aware: one replica per partition
        (2, racks(3), racks(3), 0),
        (3, racks(2), racks(3), 5),  # consumer2's rack has no data: balance wins
    ],
)
@pytest.mark.parametrize("owned_first", [False, True], ids=["fresh", "owned"])
def test_rack_aware_assignment_with_uniform_subscription(
    assignor: StickyAssignor,
    replication: int,
    brokers: list[str | None],
    consumers: list[str | None],
    mismatches: int,
    owned_first: bool,
) -> None:
    owned = UNIFORM_EXPECTED if owned_first else None
    run(assignor, replication, brokers, consumers, [ALL] * 3, owned, UNIFORM_EXPECTED, mismatches)


def test_rack_awareness_improved_when_owned_partitions_misaligned(
    assignor: StickyAssignor,
) -> None:
    owned = [
        "t1-0, t1-1, t1-2, t1-3, t1-4",
        "t1-5, t2-0, t2-1, t2-2, t2-3",
        "t2-4, t2-5, t2-6, t3-0, t3-1",
    ]
    run(assignor, 1, racks(3), racks(3), [ALL] * 3, owned, UNIFORM_EXPECTED, 0)


def test_rack_aware_assignment_with_non_equal_subscription(assignor: StickyAssignor) -> None:
    """Kafka's ``testRackAwareAssignmentWithNonEqualSubscription`` (replication
    factor 1, fresh group): consumer2 takes t1 and t3 only.  Kafka's assignment
    puts 4 resources off their consumer's rack, balanced 5/5/5; so does ours
    (t2's partitions on rack c can only go to a or b, and consumer2 must take 2
    of its 5 off rack c: 4 is the least possible)."""
    topics = [ALL, ALL, ["t1", "t3"]]
    resource_racks = layout(1, racks(3))
    members = {
        f"consumer{i}": member(f"consumer{i}", topics[i], [], -1, rack=rack)
        for i, rack in enumerate(racks(3))
    }
    data = AssignmentInput({t: range(n) for t, n in TOPICS.items()}, members, resource_racks)
    assignment = assignor.assign(data)
    check_valid(data, assignment)
    assert sorted(len(rs) for rs in assignment.values()) == [5, 5, 5]
    off_rack = [
        r
        for i, rack in enumerate(racks(3))
        for r in assignment[f"consumer{i}"]
        if rack not in resource_racks[r]
    ]
    assert len(off_rack) == 4, off_rack


@pytest.mark.parametrize(
    "consumer_racks", [racks(3), [None, None, None]], ids=["racks-match", "no-racks"]
)
def test_cooperative_rounds_from_misaligned_owned_with_non_equal_subscription(
    consumer_racks: list[str | None],
) -> None:
    """The last cooperative case of Kafka's ``testRackAwareAssignmentWithNonEqualSubscription``:
    every resource on every rack (replication 3), so racks change nothing, and
    the misaligned ownership of the previous case.  consumer2 drops t2 and must
    grow by three, which balance takes from the members over five: consumer0
    gives up t1-0 and t1-1, consumer1 t1-5 (Kafka moves a member's resources in
    key order, so it keeps its highest).  The first round withholds what the
    old owners still hold; the second hands it out.  Without consumer racks
    Kafka's 3.9.1 jar assigns the same (``benchmarks/.cache/kafka-clients.jar``)."""
    topics = [ALL, ALL, ["t1", "t3"]]
    resource_racks = layout(3, racks(3))
    assignor = CooperativeStickyAssignor()

    def round_from(owned: list[str]) -> tuple[list[str], list[str]]:
        members = {
            f"consumer{i}": member(
                f"consumer{i}", topics[i], parse(owned[i]) if owned[i] else [], -1, rack=rack
            )
            for i, rack in enumerate(consumer_racks)
        }
        data = AssignmentInput({t: range(n) for t, n in TOPICS.items()}, members, resource_racks)
        target = assignor.assign(data)
        check_valid(data, target)
        for i, rack in enumerate(consumer_racks):
            assert all(rack is None or rack in resource_racks[r] for r in target[f"consumer{i}"])
        first = first_round(data, target)

        def text(assignment: dict[str, list[Resource]]) -> list[str]:
            return [
                ", ".join(sorted(f"{t}-{p}" for t, p in assignment[f"consumer{i}"]))
                for i in range(len(consumer_racks))
            ]

        return text(target), text(first)

    owned = [
        "t1-0, t1-1, t1-2, t1-3, t1-4",
        "t1-5, t2-0, t2-1, t2-2, t2-3",
        "t2-4, t2-5, t2-6, t3-0, t3-1",
    ]
    final = [
        "t1-2, t1-3, t1-4, t2-4, t2-5",
        "t2-0, t2-1, t2-2, t2-3, t2-6",
        "t1-0, t1-1, t1-5, t3-0, t3-1",
    ]
    intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"]
    target, first = round_from(owned)
    assert first == intermediate
    # What consumer0 and consumer1 no longer hold went to consumer2, the only
    # other subscriber of t1: withheld now, its own in the next round.
    assert target[2] == final[2]
    assert round_from(intermediate) == (final, final)


def test_locality_may_raise_the_largest_load_within_kafka_balance(assignor: StickyAssignor) -> None:
    """A random group where Kafka 3.9.1's assignor puts 3 resources off rack by
    giving m2 two resources and m4 none (``benchmarks/balance.py``): one each is
    possible, but only with 4 off rack.  Ours places as Kafka does: 3 off rack,
    the largest load 2, still balanced in Kafka's sense (nobody holds a kind a
    subscriber with two fewer takes)."""
    layout_of = {"t0": "aaabab", "t1": "a"}
    members = {
        "m0": ("b", ["t0"]),
        "m1": ("b", ["t0"]),
        "m2": ("a", ["t0"]),
        "m3": ("b", ["t0", "t1"]),
        "m4": ("c", ["t1"]),
        "m5": ("c", ["t0", "t1"]),
        "m6": ("b", ["t0", "t1"]),
    }
    resource_racks = {
        (kind, key): frozenset({rack})
        for kind, row in layout_of.items()
        for key, rack in enumerate(row)
    }
    data = AssignmentInput(
        {kind: range(len(row)) for kind, row in layout_of.items()},
        {mid: member(mid, kinds, [], -1, rack=rack) for mid, (rack, kinds) in members.items()},
        resource_racks,
    )
    assignment = assignor.assign(data)
    check_valid(data, assignment)
    off_rack = [
        r for mid, rs in assignment.items() for r in rs if members[mid][0] not in resource_racks[r]
    ]
    assert len(off_rack) == 3, assignment
    load = {mid: len(rs) for mid, rs in assignment.items()}
    assert max(load.values()) == 2
    for mid, resources in assignment.items():
        for kind, _ in resources:
            assert all(
                load[mid] <= load[other] + 1 for other, (_, ks) in members.items() if kind in ks
            )


def test_locality_trades_never_move_owned_resources(assignor: StickyAssignor) -> None:
    """The same group, every resource owned where it is off-rack: stickiness wins
    over locality for owned resources (they only move for balance or when the
    member's rack does not have them, as Kafka's rules say)."""
    topics = [ALL, ALL, ["t1", "t3"]]
    resource_racks = layout(1, racks(3))
    fresh = {f"consumer{i}": member(f"consumer{i}", topics[i], [], -1, rack=None) for i in range(3)}
    data = AssignmentInput({t: range(n) for t, n in TOPICS.items()}, fresh, resource_racks)
    first = assignor.assign(data)
    # Now the members have racks, and own what a rack-blind round gave them.
    owning = {
        f"consumer{i}": member(f"consumer{i}", topics[i], first[f"consumer{i}"], 3, rack=rack)
        for i, rack in enumerate(racks(3))
    }
    again = assignor.assign(AssignmentInput(data.resources, owning, resource_racks))
    check_valid(data, again)
    for mid, resources in again.items():
        for r in resources:
            if r in first[mid]:
                continue
            # Every resource that changed hands left an owner off its rack.
            previous = next(m for m, rs in first.items() if r in rs)
            assert owning[previous].rack not in resource_racks[r]


def off_rack(
    assignment: dict[str, list[Resource]],
    rack_of: dict[str, str],
    on: dict[Resource, frozenset[str]],
) -> int:
    return sum(1 for m, rs in assignment.items() for r in rs if rack_of[m] not in on[r])


def test_load_search_raises_the_largest_load_only_for_fewer_off_rack() -> None:
    """Random fresh groups as in ``benchmarks/balance.py`` (members on racks a/b/c
    taking random kinds, one rack per resource): the load search never places
    more off-rack than the balanced loads, keeps Kafka's balance criterion, and
    gives a member more than the balanced largest load only for fewer off-rack
    (which happens in some of these groups)."""
    rng = random.Random(3)
    raised = 0
    for _ in range(150):
        rows = {
            f"t{i}": "".join(rng.choice("abc") for _ in range(rng.randint(1, 12)))
            for i in range(rng.randint(2, 6))
        }
        members = {
            f"m{i}": (rng.choice("abc"), rng.sample(sorted(rows), rng.randint(1, len(rows))))
            for i in range(rng.randint(2, 7))
        }
        on = {(k, i): frozenset({rack}) for k, row in rows.items() for i, rack in enumerate(row)}
        data = AssignmentInput(
            {k: range(len(row)) for k, row in rows.items()},
            {m: member(m, kinds, rack=rack) for m, (rack, kinds) in members.items()},
            on,
        )

        searched = StickyAssignor().assign(data)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sticky_module, "_SEARCH_LIMIT", 0)
            balanced = StickyAssignor().assign(data)
        check_valid(data, searched)
        load = {m: len(rs) for m, rs in searched.items()}
        for holder, resources in searched.items():
            for kind in {k for k, _ in resources}:
                lightest = min(load[m] for m, (_, kinds) in members.items() if kind in kinds)
                assert load[holder] <= lightest + 1, (rows, members, searched)
        rack_of = {m: rack for m, (rack, _) in members.items()}
        assert off_rack(searched, rack_of, on) <= off_rack(balanced, rack_of, on)
        if max(load.values()) > max(len(rs) for rs in balanced.values()):
            assert off_rack(searched, rack_of, on) < off_rack(balanced, rack_of, on)
            raised += 1
    assert raised > 0
