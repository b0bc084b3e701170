"""Hypothesis strategies and checks shared by the assignor tests."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import strategies as st

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.types import Key, Resource

KINDS = ["alpha", "beta", "gamma", "delta"]
RACKS = ["r1", "r2", "r3"]


def member(
    member_id: str,
    kinds: list[str] | frozenset[str],
    owned: list[Resource] | tuple[Resource, ...] = (),
    generation: int = 1,
    instance_id: str | None = None,
    rack: str | None = None,
    capacity: float = 1.0,
) -> MemberInfo:
    return MemberInfo(
        member_id=member_id,
        kinds=frozenset(kinds),
        owned=tuple(owned),
        generation=generation,
        instance_id=instance_id,
        rack=rack,
        capacity=capacity,
    )


@st.composite
def catalogs(draw: st.DrawFn, min_kinds: int = 1) -> dict[str, list[Key]]:
    names = draw(st.lists(st.sampled_from(KINDS), min_size=min_kinds, max_size=4, unique=True))
    out: dict[str, list[Key]] = {}
    for name in names:
        count = draw(st.integers(0, 12))
        if draw(st.booleans()):
            out[name] = list(range(count))
        else:
            out[name] = [f"{name[0]}{i}" for i in range(count)]
    return out


@st.composite
def inputs(
    draw: st.DrawFn,
    uniform: bool | None = None,
    racks: bool = False,
    max_members: int = 7,
    claims: bool = True,
) -> AssignmentInput:
    """Random groups: members, kinds, subscriptions and ownership claims, stale and
    conflicting ones included (claims on resources that do not exist, on kinds the
    member dropped, by several members, from older generations)."""
    resources = draw(catalogs())
    kinds = list(resources)
    every = [(k, key) for k in kinds for key in resources[k]]
    ghosts: list[Resource] = [("gone", 0), (kinds[0], 999), (kinds[0], "nope")]
    n = draw(st.integers(1, max_members))
    ids = draw(
        st.lists(st.text("abcxyz0123", min_size=1, max_size=4), min_size=n, max_size=n, unique=True)
    )
    same = draw(st.booleans()) if uniform is None else uniform
    shared = frozenset(draw(st.lists(st.sampled_from(kinds), min_size=1, unique=True)))
    members: dict[str, MemberInfo] = {}
    for mid in ids:
        subscribed = (
            shared
            if same
            else frozenset(draw(st.lists(st.sampled_from(kinds), max_size=len(kinds), unique=True)))
        )
        owned: list[Resource] = []
        if claims and every:
            owned = draw(st.lists(st.sampled_from(every + ghosts), max_size=8, unique=True))
        members[mid] = member(
            mid,
            subscribed,
            owned,
            generation=draw(st.integers(-1, 3)),
            instance_id=draw(st.one_of(st.none(), st.text("ijk", min_size=1, max_size=3))),
            rack=draw(st.sampled_from([None, *RACKS])) if racks else None,
        )
    # Instance ids are unique within a group.
    seen: set[str] = set()
    for mid, info in list(members.items()):
        if info.instance_id is not None:
            if info.instance_id in seen:
                members[mid] = MemberInfo(
                    mid, info.kinds, None, info.owned, info.generation, info.rack
                )
            seen.add(info.instance_id)
    resource_racks: dict[Resource, frozenset[str]] = {}
    if racks:
        for resource in every:
            if draw(st.booleans()):
                resource_racks[resource] = frozenset(
                    draw(st.lists(st.sampled_from(RACKS), min_size=1, max_size=2, unique=True))
                )
    return AssignmentInput(resources=resources, members=members, resource_racks=resource_racks)


def shuffled(data: AssignmentInput, seed: int) -> AssignmentInput:
    """The same input with its dictionaries in another insertion order."""
    import random

    rng = random.Random(seed)
    members = list(data.members.items())
    rng.shuffle(members)
    kinds = list(data.resources.items())
    rng.shuffle(kinds)
    racks = list(data.resource_racks.items())
    rng.shuffle(racks)
    return AssignmentInput(dict(kinds), dict(members), dict(racks))


def subscribers(data: AssignmentInput, kind: str) -> list[str]:
    return [mid for mid, m in data.members.items() if kind in m.kinds]


def check_valid(data: AssignmentInput, assignment: Assignment, complete: bool = True) -> None:
    """Only subscribed, existing resources; one owner each; every member present;
    with ``complete`` every resource that has a subscriber is assigned."""
    assert set(assignment) == set(data.members)
    owners: dict[Resource, str] = {}
    for mid, resources in assignment.items():
        assert len(set(resources)) == len(resources), f"{mid} holds a resource twice"
        for resource in resources:
            kind, key = resource
            assert kind in data.members[mid].kinds, f"{mid} got {resource} without subscribing"
            assert key in data.resources[kind], f"{resource} does not exist"
            assert resource not in owners, f"{resource} owned by {owners[resource]} and {mid}"
            owners[resource] = mid
    if complete:
        for kind, keys in data.resources.items():
            if subscribers(data, kind):
                for key in keys:
                    assert (kind, key) in owners, f"{(kind, key)} unassigned"


def is_uniform(data: AssignmentInput) -> bool:
    return len({m.kinds for m in data.members.values()}) == 1


def spread(assignment: Mapping[str, list[Resource]]) -> int:
    loads = [len(v) for v in assignment.values()]
    return max(loads) - min(loads) if loads else 0


def surviving_claims(data: AssignmentInput) -> dict[str, set[Resource]]:
    """Claims that count (written independently of the assignors): on existing,
    subscribed resources, from the unique member of the highest generation."""
    best: dict[Resource, tuple[int, list[str]]] = {}
    for mid, info in data.members.items():
        for resource in set(info.owned):
            current = best.get(resource)
            if current is None or info.generation > current[0]:
                best[resource] = (info.generation, [mid])
            elif info.generation == current[0]:
                current[1].append(mid)
    out: dict[str, set[Resource]] = {mid: set() for mid in data.members}
    for resource, (_, claimants) in best.items():
        kind, key = resource
        if len(claimants) != 1 or kind not in data.resources or key not in data.resources[kind]:
            continue
        if kind in data.members[claimants[0]].kinds:
            out[claimants[0]].add(resource)
    return out


def with_previous(
    data: AssignmentInput, assignment: Assignment, generation: int = 5
) -> AssignmentInput:
    """``data`` after a rebalance: every member owns what ``assignment`` gave it."""
    members = {
        mid: MemberInfo(
            mid,
            info.kinds,
            info.instance_id,
            tuple(assignment.get(mid, [])),
            generation,
            info.rack,
            info.capacity,
        )
        for mid, info in data.members.items()
    }
    return AssignmentInput(data.resources, members, data.resource_racks)


def check_kafka_balance(assignment: Assignment) -> None:
    """Kafka's ``verifyValidityAndBalance``: two members whose loads differ by more
    than one must not hold resources of a common kind (else one could move)."""
    items = sorted(assignment.items())
    for i, (a, ra) in enumerate(items):
        for b, rb in items[i + 1 :]:
            if abs(len(ra) - len(rb)) <= 1:
                continue
            common = {r[0] for r in ra} & {r[0] for r in rb}
            assert not common, f"{a} ({len(ra)}) and {b} ({len(rb)}) both hold {common}"
