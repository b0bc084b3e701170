"""``sticky`` and ``cooperative-sticky``: balanced assignments that move as little
as possible (Kafka's ``StickyAssignor`` / ``CooperativeStickyAssignor``).

Both compute the same *target* assignment; they differ in the rebalance protocol
they are meant for (``cooperative-sticky`` supports KIP-429 incremental
rebalancing: the member layer withholds a resource from its new owner until the
old owner has revoked it, see :func:`first_round`).

Ownership claims (``MemberInfo.owned``) are settled first: a claim counts when
its member reports the highest generation among the members claiming that
resource; a resource claimed by several members of the same highest generation
is kept by nobody; claims on resources that no longer exist or whose kind the
member dropped are ignored.

**Identical subscriptions** (every member subscribes to the same kinds; Kafka's
*constrained* path), with ``q = resources // members`` and ``r = resources %
members``:

1. Members keep what they own, up to ``q``, or up to ``q + 1`` for the first
   ``r`` members that own that much (members taken in the order of Kafka's
   ``HashMap`` of member ids, so the choice equals Kafka's); when a member must
   give some up it keeps the lowest key positions.  With rack matching only
   owned resources on the member's rack are kept.
2. With rack matching, members below their share take resources on their rack
   (resources readable by the fewest members first), round robin.
3. The remaining resources, in resource order (kinds by name, keys in order),
   are dealt round robin to the members below ``q`` (member ids in order), then
   one each to members at ``q`` that may still grow to ``q + 1``.

This yields exactly Kafka's assignment, is balanced (max - min <= 1) and moves
the minimum number of resources: ``total - sum(min(owned, target))``.  (One
deliberate difference: Kafka 3.x's rack-aware pass can hand out more ``q + 1``
slots than exist and end with max - min = 2; ours counts them.)  It runs in
O(resources) with C-level list operations (about 0.5 s for 2,000 members and a
million resources).

**Different subscriptions** (Kafka's *general* path): owned resources are kept
(subject to the rules above), unowned ones go to the least-loaded subscriber
(kinds with the fewest subscribers first; ties to the member with more kinds,
then by member id; a member on the resource's rack first when it is among the
least loaded).  Then :class:`_Balancer` evens the loads out: first single
moves, each to the lightest member from the heaviest member holding a kind it
subscribes to, until none is left (Kafka's ``isBalanced`` then holds); then
chains of moves (``a -> b -> c``, where ``b``'s load does not change) until no
member can pass one resource to a member holding two fewer.  Resources their
holder received in this rebalance move before the ones it kept, so a member
that joins takes from the busiest members exactly what balance requires; of
the ones it kept, the lowest key positions move first and it keeps its highest
(Kafka moves partitions in partition order).
Guarantees: valid; balanced in Kafka's sense (nobody holds a kind that a
subscriber with two fewer takes); without rack matching, the largest load is
the smallest the subscriptions allow and the loads are an optimal
semi-matching (with it, see below); owned resources stay unless balance or
racks require a move.

With rack matching, the resources placed in the rebalance (not the owned ones
kept) are then re-placed for locality: in groups up to ``_PLACEMENT_LIMIT``
(resource classes x members), exactly, as a transportation problem (the fewest
off-rack resources for the members' loads), then shifting single units of
load along the cheapest residual path when that places more on-rack, keeps
Kafka's ``isBalanced`` and does not raise the largest load; in groups up to
``_SEARCH_LIMIT``, other loads are searched (:func:`_search_loads`): one unit
of load from a member to another, or two in a row, with the whole placement
solved again, exactly, where Kafka's balance criterion allows each member to
hold each kind, kept when it places fewer off-rack.  Such loads may raise the
largest load above the smallest the subscriptions allow, as Kafka's own
assignor does; Kafka's criterion always holds.  At most ``_SEARCH_BUDGET``
placements are solved (cheap bounds skip most candidates): on the benchmark's
random groups, 17 ms per group on average, 0.5 s at worst, on 2 busy cores.
In larger groups, pairwise
swaps make more resources local.  On random groups this places no more
off-rack than Kafka's rack-aware general path in any group (1,500 groups of
``benchmarks/balance.py`` on three seeds).  Moves work on counts of
kinds per member, not on resource lists, and a chain search that fails marks
every member it reached as stuck for good, so balancing costs about
O(resources + moves x kinds): about 1.5 s for 2,000 members and a million
resources with one narrow member, where Kafka's Java assignor does not finish
a member joining in ten minutes.

Use ``cooperative-sticky`` for almost every group: it keeps work running during
rebalances and only moves what balance requires.  Use ``sticky`` only with the
eager protocol.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import filterfalse, pairwise
from operator import itemgetter

from workgroup.assignors._common import (
    RackInfo,
    all_resources,
    settle_claims,
    sorted_kinds,
    subscribers_by_kind,
)
from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.collector import collector_paused
from workgroup.kafka.java import java_hashmap_order
from workgroup.types import Key, Resource


class StickyAssignor:
    """Kafka's sticky assignment for the eager protocol (see the module documentation)."""

    name = "sticky"
    supports_cooperative = False

    def assign(self, data: AssignmentInput) -> Assignment:
        return sticky_assign(data)


class CooperativeStickyAssignor(StickyAssignor):
    """Kafka's cooperative-sticky assignment (KIP-429): the same target as ``sticky``."""

    name = "cooperative-sticky"
    supports_cooperative = True


def sticky_assign(data: AssignmentInput) -> Assignment:
    """The sticky target assignment of ``data`` (see the module documentation)."""
    members = [data.members[mid] for mid in sorted(data.members)]
    if not members:
        return {}
    with collector_paused():
        if len({m.kinds for m in members}) == 1:
            return _constrained(data, members)
        return _general(data, members)


def first_round(data: AssignmentInput, target: Assignment) -> Assignment:
    """What a cooperative rebalance hands out now: ``target`` without the resources
    that another member still reports as owned (whatever its generation).  Those
    follow in the next round, once revoked (KIP-429)."""
    claimed_by: dict[Resource, set[str]] = {}
    for member in data.members.values():
        for resource in member.owned:
            claimed_by.setdefault(resource, set()).add(member.member_id)
    out: Assignment = {}
    for mid, resources in target.items():
        out[mid] = [r for r in resources if not (claimed_by.get(r, set()) - {mid})]
    return out


# -- identical subscriptions ----------------------------------------------------------


def _constrained(data: AssignmentInput, members: list[MemberInfo]) -> Assignment:
    kinds = [kind for kind in sorted_kinds(data) if kind in members[0].kinds]
    resources = all_resources(data, kinds)
    total = len(resources)
    n = len(members)
    min_quota, expected_over = divmod(total, n)
    max_quota = min_quota + (1 if expected_over else 0)
    racks = RackInfo.build(data)
    owned_by, unassigned = _claims_on(resources, members)

    positions: dict[str, dict[object, int]] = {}

    def position(resource: Resource) -> int:
        kind, key = resource
        keys = data.resources[kind]
        if isinstance(keys, range) and isinstance(key, int):
            return keys.index(key)
        table = positions.get(kind)
        if table is None:
            table = positions[kind] = {k: i for i, k in enumerate(keys)}
        return table[key]

    plain = all(
        isinstance(keys, range) and keys.start == 0 and keys.step == 1
        for keys in (data.resources[kind] for kind in kinds)
    )
    # Kafka keeps the lowest partition numbers, across topics: order by (position, kind).
    by_position: Callable[[Resource], tuple[object, ...]] = (
        itemgetter(1, 0) if plain else (lambda r: (position(r), r[0]))
    )
    # Resource order: kinds by name, then position.
    by_resource_order: Callable[[Resource], tuple[object, ...]] = (
        itemgetter(0, 1) if plain else (lambda r: (r[0], position(r)))
    )

    def lowest_positions_first(owned: list[Resource], quota: int) -> list[Resource]:
        ordered = sorted(owned, key=by_position)
        revoked.extend(ordered[quota:])
        return ordered[:quota]

    keep: dict[str, list[Resource]] = {}
    revoked: list[Resource] = []
    under_min: list[str] = []
    at_min: list[str] = []
    over = 0
    for mid in java_hashmap_order(m.member_id for m in members):
        owned = owned_by[mid]
        if racks.enabled and owned:
            mismatched = [r for r in owned if racks.mismatch(mid, r)]
            if mismatched:
                revoked.extend(mismatched)
                owned = [r for r in owned if not racks.mismatch(mid, r)]
        if len(owned) < min_quota:
            keep[mid] = owned
            under_min.append(mid)
        elif len(owned) >= max_quota and over < expected_over:
            over += 1
            if over == expected_over:
                at_min.clear()
            keep[mid] = (
                owned if len(owned) == max_quota else lowest_positions_first(owned, max_quota)
            )
        else:
            keep[mid] = (
                owned if len(owned) == min_quota else lowest_positions_first(owned, min_quota)
            )
            if over < expected_over:
                at_min.append(mid)
    if revoked:
        unassigned = sorted(unassigned + revoked, key=by_resource_order)

    under_min.sort()
    at_min.sort()
    if racks.enabled:
        new = _fill_one_by_one(
            unassigned, keep, under_min, at_min, min_quota, max_quota, racks, expected_over - over
        )
    else:
        new = _fill_in_blocks(unassigned, keep, under_min, at_min, min_quota)
    assignment: Assignment = {}
    for member in members:
        kept, added = keep[member.member_id], new.get(member.member_id)
        assignment[member.member_id] = kept + added if added else kept
    return assignment


def _claims_on(
    resources: list[Resource], members: list[MemberInfo]
) -> tuple[dict[str, list[Resource]], list[Resource]]:
    """Settled claims of ``members`` on ``resources`` (identical subscriptions).

    Returns ``member id -> resources it may keep`` and the resources nobody keeps,
    in resource order.  The common case (no resource claimed twice, every claim
    on an existing resource) costs one set of the claims and one filtered copy
    of ``resources``.
    """
    claimed: set[Resource] = set()
    total = 0
    for member in members:
        if member.owned:
            claimed.update(member.owned)
            total += len(member.owned)
    if not claimed:
        return {m.member_id: [] for m in members}, resources
    unassigned = list(filterfalse(claimed.__contains__, resources))
    if len(claimed) == total and len(resources) - len(unassigned) == total:
        return {m.member_id: list(m.owned) for m in members}, unassigned
    settled = settle_claims(members, dict.fromkeys(resources), subscribed_only=False)
    kept: set[Resource] = set()
    for owned in settled.owned.values():
        kept.update(owned)
    return settled.owned, list(filterfalse(kept.__contains__, resources))


def _fill_in_blocks(
    unassigned: list[Resource],
    keep: dict[str, list[Resource]],
    under_min: list[str],
    at_min: list[str],
    min_quota: int,
) -> dict[str, list[Resource]]:
    """Kafka's round robin over the members below ``min_quota``, computed in blocks.

    In round *t* every member still short of ``min_quota`` after *t - 1* rounds
    gets one resource, in member order; a member leaves the circle after its last
    round and joins the end of ``at_min``.  Between two distinct shortfalls the
    circle is fixed, so a whole stretch of rounds is one slice per member.
    """
    new: dict[str, list[Resource]] = {}
    shortfall = {mid: min_quota - len(keep[mid]) for mid in under_min}
    circle = list(under_min)
    position = 0
    done_rounds = 0
    for level in sorted(set(shortfall.values())):
        width = len(circle)
        rounds = level - done_rounds
        block = unassigned[position : position + width * rounds]
        for offset, mid in enumerate(circle):
            new.setdefault(mid, []).extend(block[offset::width])
        position += width * rounds
        done_rounds = level
        at_min.extend(mid for mid in circle if shortfall[mid] == level)
        circle = [mid for mid in circle if shortfall[mid] > level]
    leftover = unassigned[position:]
    if len(leftover) > len(at_min):
        raise AssertionError("sticky assignment: more resources left than members below quota")
    for mid, resource in zip(at_min, leftover, strict=False):
        new.setdefault(mid, []).append(resource)
    return new


def _fill_one_by_one(
    unassigned: list[Resource],
    keep: dict[str, list[Resource]],
    under_min: list[str],
    at_min: list[str],
    min_quota: int,
    max_quota: int,
    racks: RackInfo | None,
    extra_left: int = 0,
) -> dict[str, list[Resource]]:
    """Kafka's rack-aware round robin, then its plain round robin, resource by resource.

    ``extra_left`` is how many members may still grow to ``max_quota``.  Unlike
    Kafka 3.x, the rack-aware pass respects it (Kafka's can hand out more
    ``max_quota`` slots than exist and end unbalanced).
    """
    new: dict[str, list[Resource]] = {}
    counts = {mid: len(resources) for mid, resources in keep.items()}

    def give(resource: Resource, mid: str) -> int:
        new.setdefault(mid, []).append(resource)
        counts[mid] += 1
        return counts[mid]

    remaining = unassigned
    if racks is not None and racks.enabled:
        # Resources readable by the fewest members are placed first (stable sort).
        remaining = sorted(unassigned, key=racks.members_on_racks_of)
        left: list[Resource] = []
        next_index = 0
        for resource in remaining:
            chosen: str | None = None
            index = _next_on_rack(racks, resource, under_min, next_index)
            if index >= 0:
                chosen = under_min[index]
                count = counts[chosen] + 1
                if count >= min_quota:
                    under_min.remove(chosen)
                    if count < max_quota and extra_left > 0:
                        at_min.append(chosen)
                else:
                    index += 1
                next_index = index % len(under_min) if under_min else 0
            elif at_min and extra_left > 0:
                first = _next_on_rack(racks, resource, at_min, 0)
                if first >= 0:
                    chosen = at_min[first]
                    if counts[chosen] + 1 == max_quota:
                        del at_min[first]
                        extra_left -= 1
                        if extra_left == 0:
                            at_min.clear()
            if chosen is None:
                left.append(resource)
            else:
                give(resource, chosen)
        remaining = left

    position = 0  # where Kafka's iterator over ``under_min`` stands
    for resource in remaining:
        if position < len(under_min):
            mid = under_min[position]
            position += 1
        elif under_min:
            mid = under_min[0]
            position = 1
        elif at_min:
            mid = at_min.pop(0)
        else:
            raise AssertionError("sticky assignment: no member below quota is left")
        if give(resource, mid) == min_quota:
            position -= 1
            del under_min[position]
            at_min.append(mid)
    return new


def _next_on_rack(racks: RackInfo, resource: Resource, members: Sequence[str], first: int) -> int:
    resource_racks = racks.resource_racks.get(resource)
    if not resource_racks:
        return -1
    n = len(members)
    for i in range(n):
        index = (first + i) % n
        rack = racks.member_racks.get(members[index])
        if rack is not None and rack in resource_racks:
            return index
    return -1


# -- different subscriptions --------------------------------------------------------


def _general(data: AssignmentInput, members: list[MemberInfo]) -> Assignment:
    racks = RackInfo.build(data)
    subscribers = subscribers_by_kind(data, sorted_kinds(data))
    kinds = sorted(
        (k for k, subs in subscribers.items() if subs), key=lambda k: (len(subscribers[k]), k)
    )
    ordered = all_resources(data, kinds)
    exists = dict.fromkeys(ordered)
    claims = settle_claims(members, exists, subscribed_only=True)

    assignment: Assignment = {}
    owner: dict[Resource, str] = {}
    for member in members:
        mid = member.member_id
        kept = claims.owned[mid]
        if racks.enabled:
            kept = [r for r in kept if not racks.mismatch(mid, r)]
        assignment[mid] = list(kept)
        owner.update(dict.fromkeys(kept, mid))
    load = {mid: len(resources) for mid, resources in assignment.items()}
    unassigned = list(filterfalse(owner.__contains__, ordered))
    kept_by = owner.copy()

    def place(resource: Resource, mid: str) -> None:
        assignment[mid].append(resource)
        owner[resource] = mid
        load[mid] += 1

    if racks.enabled:
        rest: list[Resource] = []
        for resource in unassigned:
            subs = subscribers[resource[0]]
            candidates = [m for m in subs if racks.matches(m, resource)]
            lightest = min(load[m] for m in subs)
            # A rack-matching member only when it is among the lightest: placing
            # on a busier one would make the balancer move other resources, and
            # the next round place differently again (rounds would not converge).
            candidates = [m for m in candidates if load[m] == lightest]
            if candidates:
                place(resource, min(candidates))
            else:
                rest.append(resource)
        unassigned = rest
    kinds_of = {m.member_id: m.kinds for m in members}
    # Least-loaded subscriber first; within one kind a heap of (load, id) is exact.
    by_kind: dict[str, list[Resource]] = {}
    for resource in unassigned:
        by_kind.setdefault(resource[0], []).append(resource)
    for kind in kinds:
        todo = by_kind.get(kind)
        if not todo:
            continue
        # Ties go to the member with more kinds: the balancer can still pass on
        # what it receives, where a member with one kind could only keep it.
        heap = [(load[m], -len(kinds_of[m]), m) for m in subscribers[kind]]
        heapq.heapify(heap)
        for resource in todo:
            count, breadth, mid = heap[0]
            place(resource, mid)
            heapq.heapreplace(heap, (count + 1, breadth, mid))

    _Balancer(assignment, owner, kept_by, load, subscribers, kinds_of, racks, data.resources).run()
    if racks.enabled and not _place_for_locality(assignment, kept_by, kinds_of, racks, subscribers):
        _trade_for_locality(assignment, kept_by, kinds_of, racks)
    return assignment


def _move_for_locality(
    assignment: Assignment,
    kept_by: dict[Resource, str],
    kinds_of: dict[str, frozenset[str]],
    racks: RackInfo,
    subscribers: dict[str, list[str]],
) -> bool:
    """Single moves of a placed, off-rack resource to a member on its rack that
    holds no more (Kafka's general path places this way): only when the largest
    load does not rise and the result stays balanced in Kafka's sense (nobody
    holds a kind a member with two fewer takes).  True when something moved."""
    load = {mid: len(rs) for mid, rs in assignment.items()}
    peak = max(load.values(), default=0)
    members_on: dict[str, list[str]] = {}
    for mid in sorted(racks.member_racks):
        members_on.setdefault(racks.member_racks[mid], []).append(mid)
    holders: dict[str, Counter[str]] = {}
    for mid, resources in assignment.items():
        for kind, _ in resources:
            holders.setdefault(kind, Counter())[mid] += 1

    def balanced_after(giver: str, taker: str, kind: str) -> bool:
        after = dict(load)
        after[giver] -= 1
        after[taker] += 1
        held = {k for k, count in holders.items() if count.get(taker)} | {kind}
        for k in held:  # the taker may not hold two more than a subscriber
            if after[taker] - min(after[m] for m in subscribers[k]) > 1:
                return False
        for k in kinds_of[giver]:  # nobody may hold two more than the giver
            counts = holders.get(k, Counter())
            heaviest = max((after[m] for m, c in counts.items() if c > 0), default=0)
            if heaviest - after[giver] > 1:
                return False
        return True

    moved = False
    for giver in sorted(assignment):
        if giver not in racks.member_racks:
            continue
        for resource in list(assignment[giver]):
            if kept_by.get(resource) == giver or not racks.mismatch(giver, resource):
                continue
            kind = resource[0]
            candidates = sorted(
                (
                    m
                    for rack in sorted(racks.resource_racks.get(resource, ()))
                    for m in members_on.get(rack, ())
                    if m != giver and kind in kinds_of[m]
                ),
                key=lambda m: (load[m], m),
            )
            for taker in candidates:
                if load[taker] > load[giver] or load[taker] + 1 > peak:
                    break
                if not balanced_after(giver, taker, kind):
                    continue
                assignment[giver].remove(resource)
                assignment[taker].append(resource)
                load[giver] -= 1
                load[taker] += 1
                holders[kind][giver] -= 1
                holders[kind][taker] += 1
                moved = True
                break
    return moved


#: Largest (resource classes x members) for which :func:`_place_for_locality`
#: runs; bigger groups get the pairwise trades of :func:`_trade_for_locality`.
_PLACEMENT_LIMIT = 1_000


def _place_for_locality(
    assignment: Assignment,
    kept_by: dict[Resource, str],
    kinds_of: dict[str, frozenset[str]],
    racks: RackInfo,
    subscribers: dict[str, list[str]] | None = None,
) -> bool:
    """Re-place the resources placed in this rebalance so that the fewest are off
    their member's rack, every member keeping its load (so balance holds) and
    what it owned.  Returns False when the group is too large (nothing done).

    A transportation problem: resources fall into classes (kind, racks), each
    member takes as many placed resources as it holds now, a class-to-member
    unit costs 1 when off-rack.  Starting from the current placement, negative
    cycles of the residual graph are cancelled (Bellman-Ford) until none is
    left: then no other placement with these loads has fewer off-rack resources.
    Each cancellation removes at least one off-rack resource.
    """
    placed: dict[str, list[Resource]] = {}
    classes: dict[tuple[str, frozenset[str]], list[Resource]] = {}
    for mid in sorted(assignment):
        mine = [r for r in assignment[mid] if kept_by.get(r) != mid]
        placed[mid] = mine
        for r in mine:
            classes.setdefault((r[0], racks.resource_racks.get(r, frozenset())), []).append(r)
    members = sorted(mid for mid, mine in placed.items() if mine or kinds_of[mid])
    class_keys = sorted(classes, key=lambda c: (c[0], sorted(c[1])))
    if not class_keys or len(class_keys) * len(members) > _PLACEMENT_LIMIT:
        return not class_keys
    class_index = {c: i for i, c in enumerate(class_keys)}
    n_classes = len(class_keys)

    def cost(c: int, m: str) -> int:
        rack = racks.member_racks.get(m)
        on = class_keys[c][1]
        return 1 if rack is not None and on and rack not in on else 0

    # Edges class -> member (where the member takes the kind) with their flow.
    takers: list[list[str]] = [
        [m for m in members if class_keys[c][0] in kinds_of[m]] for c in range(n_classes)
    ]
    flow: dict[tuple[int, str], int] = {}
    for mid in members:
        for r in placed[mid]:
            key = (class_index[(r[0], racks.resource_racks.get(r, frozenset()))], mid)
            flow[key] = flow.get(key, 0) + 1
    # Residual graph: nodes 0..n_classes-1 are classes, then members.
    member_node = {m: n_classes + i for i, m in enumerate(members)}
    n_nodes = n_classes + len(members)

    def residual() -> list[tuple[int, int, int]]:
        edges: list[tuple[int, int, int]] = []
        for c in range(n_classes):
            for m in takers[c]:
                unit = cost(c, m)
                edges.append((c, member_node[m], unit))  # more of class c to m
                if flow.get((c, m), 0) > 0:
                    edges.append((member_node[m], c, -unit))  # less of class c to m
        return edges

    def push(path: list[int], units: int) -> None:
        for u, v in pairwise(path):
            if u < n_classes:  # class u -> member v: more
                key = (u, members[v - n_classes])
                flow[key] = flow.get(key, 0) + units
            else:  # member u -> class v: less
                flow[(v, members[u - n_classes])] -= units

    def cancel_cycles() -> None:
        while (cycle := _negative_cycle(n_nodes, residual())) is not None:
            push([*cycle, cycle[0]], 1)

    cancel_cycles()
    if subscribers is not None:
        # Shift one resource of load from a member to another along the cheapest
        # residual path when that places more on-rack and the loads stay
        # balanced in Kafka's sense, without raising the largest load.
        kept_load = {m: len(rs) - len(placed.get(m, ())) for m, rs in assignment.items()}
        kept_kinds = {m: {r[0] for r in rs if kept_by.get(r) == m} for m, rs in assignment.items()}
        peak = max(len(rs) for rs in assignment.values())

        def balanced() -> bool:
            load = dict(kept_load)
            held = {m: set(kinds) for m, kinds in kept_kinds.items()}
            for (c, m), units in flow.items():
                if units > 0:
                    load[m] += units
                    held[m].add(class_keys[c][0])
            if max(load.values()) > peak:
                return False
            return all(
                load[m] - min(load[s] for s in subscribers[k]) <= 1
                for m, kinds in held.items()
                for k in kinds
            )

        shifted = True
        while shifted:
            shifted = False
            edges = residual()
            for giver in members:
                distance, parent = _shortest_paths(n_nodes, edges, member_node[giver])
                gains = sorted(
                    (distance[member_node[m]], m)
                    for m in members
                    if m != giver and distance[member_node[m]] < 0
                )
                for _, taker in gains:
                    path = [member_node[taker]]
                    while path[-1] != member_node[giver]:
                        path.append(parent[path[-1]])
                    path.reverse()
                    push(path, 1)
                    if balanced():
                        shifted = True
                        break
                    push(path, -1)
                if shifted:
                    break
            if shifted:
                cancel_cycles()
        if len(members) * n_classes <= _SEARCH_LIMIT:
            searched = _search_loads(
                members,
                [class_keys[c][0] for c in range(n_classes)],
                [[cost(c, m) for m in members] for c in range(n_classes)],
                flow,
                kinds_of,
                subscribers,
                kept_load,
                kept_kinds,
            )
            if searched is not None:
                flow = searched
    # Back to resources: members keep what they hold of a class, up to their flow.
    pools = {c: [] for c in range(n_classes)}  # type: dict[int, list[Resource]]
    kept: dict[str, list[Resource]] = {}
    for mid in members:
        budget = {c: flow.get((c, mid), 0) for c in range(n_classes)}
        kept[mid] = []
        for r in placed[mid]:
            c = class_index[(r[0], racks.resource_racks.get(r, frozenset()))]
            if budget[c] > 0:
                budget[c] -= 1
                kept[mid].append(r)
            else:
                pools[c].append(r)
    for mid in members:
        held = {c: 0 for c in range(n_classes)}
        for r in kept[mid]:
            held[class_index[(r[0], racks.resource_racks.get(r, frozenset()))]] += 1
        for c in range(n_classes):
            for _ in range(flow.get((c, mid), 0) - held[c]):
                kept[mid].append(pools[c].pop())
        if kept[mid] != placed[mid]:
            stays = [r for r in assignment[mid] if kept_by.get(r) == mid]
            assignment[mid] = stays + kept[mid]
    return True


#: Largest (resource classes x members) for which :func:`_search_loads` runs.
_SEARCH_LIMIT = 150
#: Largest number of ordered member pairs for which :func:`_search_loads` also
#: tries two units of load at once (quadratic in the pairs).
_TWO_STEP_PAIRS = 42
#: Most placements :func:`_search_loads` solves in one search.
_SEARCH_BUDGET = 1_000


def _search_loads(
    members: list[str],
    class_kind: list[str],
    class_cost: list[list[int]],
    flow: dict[tuple[int, str], int],
    kinds_of: dict[str, frozenset[str]],
    subscribers: dict[str, list[str]],
    kept_load: dict[str, int],
    kept_kinds: dict[str, set[str]],
) -> dict[tuple[int, str], int] | None:
    """Other loads than balance chose, where they place more resources on-rack
    and stay balanced in Kafka's sense; None when no such loads were found.

    Kafka's rack-aware general path places by rack first and may give a member
    more than the smallest largest load, within its balance criterion: no
    member holds a kind that a subscriber with two fewer takes.  This search
    does the same on purpose, and only where it gains: for a vector of loads,
    that criterion decides which kinds each member may hold, and the fewest
    off-rack resources for those loads is a transportation problem solved
    exactly (:func:`_placement_for`).  From the balanced loads, one unit of
    load moves from a member to another while that places fewer off-rack
    (the best such move first), and where no single move gains, two in a row
    (in small groups).  Every accepted step removes an off-rack resource.
    """
    supply = [0] * len(class_kind)
    load = dict(kept_load)
    for (c, mid), units in flow.items():
        supply[c] += units
        load[mid] += units
    index = {mid: j for j, mid in enumerate(members)}
    budget = [_SEARCH_BUDGET]

    def solve(loads: dict[str, int], limit: float) -> tuple[int, dict[tuple[int, str], int]] | None:
        return _placement_for(
            loads,
            members,
            index,
            class_kind,
            class_cost,
            supply,
            kinds_of,
            subscribers,
            kept_load,
            kept_kinds,
            limit,
            budget,
        )

    start = solve(load, math.inf)
    if start is None:
        return None
    best_cost, best_flow = start
    changed = False
    pairs = [(g, t) for g in members for t in members if g != t and kinds_of[t]]

    def moved(loads: dict[str, int], giver: str, taker: str) -> dict[str, int] | None:
        if loads[giver] <= kept_load[giver]:
            return None
        after = dict(loads)
        after[giver] -= 1
        after[taker] += 1
        return after

    def squares(loads: dict[str, int]) -> int:
        return sum(x * x for x in loads.values())

    while best_cost > 0 and budget[0] > 0:
        found: tuple[int, int, dict[str, int], dict[tuple[int, str], int]] | None = None
        level: list[dict[str, int]] = []  # single steps that keep the count
        for giver, taker in pairs:
            after = moved(load, giver, taker)
            solved = None if after is None else solve(after, best_cost + 1)
            if solved is None or after is None:
                continue
            count, placement = solved
            if count < best_cost and (found is None or (count, squares(after)) < found[:2]):
                found = (count, squares(after), after, placement)
            elif count == best_cost:
                level.append(after)
        if found is None and len(pairs) <= _TWO_STEP_PAIRS:
            for first in level:
                for giver, taker in pairs:
                    after = moved(first, giver, taker)
                    if after is None or after == load:
                        continue
                    solved = solve(after, best_cost)
                    if solved is not None and solved[0] < best_cost:
                        found = (solved[0], squares(after), after, solved[1])
                        break
                if found is not None:
                    break
        if found is None:
            break
        best_cost, _, load, best_flow = found
        changed = True
    return best_flow if changed else None


def _placement_for(
    load: dict[str, int],
    members: list[str],
    index: dict[str, int],
    class_kind: list[str],
    class_cost: list[list[int]],
    supply: list[int],
    kinds_of: dict[str, frozenset[str]],
    subscribers: dict[str, list[str]],
    kept_load: dict[str, int],
    kept_kinds: dict[str, set[str]],
    limit: float,
    budget: list[int],
) -> tuple[int, dict[tuple[int, str], int]] | None:
    """The fewest off-rack resources with these loads, and where each class of
    placed resources goes, or None when no placement gives these loads within
    Kafka's balance criterion (a member may hold a kind only when no
    subscriber of it holds two fewer), when a lower bound shows that the count
    cannot be below ``limit``, or when ``budget`` (solves left) ran out.
    Successive shortest paths on the network source -> class -> member -> sink."""
    lightest = {k: min(load[m] for m in subs) for k, subs in subscribers.items() if subs}
    for mid, kinds in kept_kinds.items():
        if any(load[mid] > lightest[k] + 1 for k in kinds):
            return None
    n_classes, n_members = len(class_kind), len(members)
    sink = n_classes + n_members + 1
    heads: list[list[int]] = [[] for _ in range(sink + 1)]
    target: list[int] = []
    capacity: list[int] = []
    weight: list[int] = []

    def add(u: int, v: int, units: int, cost: int) -> int:
        heads[u].append(len(target))
        target.append(v)
        capacity.append(units)
        weight.append(cost)
        heads[v].append(len(target))
        target.append(u)
        capacity.append(0)
        weight.append(-cost)
        return len(target) - 2

    for c in range(n_classes):
        add(0, 1 + c, supply[c], 0)
    placed: list[tuple[int, str, int]] = []
    for c, kind in enumerate(class_kind):
        for j, mid in enumerate(members):
            if kind in kinds_of[mid] and load[mid] <= lightest[kind] + 1:
                placed.append((c, mid, add(1 + c, 1 + n_classes + j, supply[c], class_cost[c][j])))
    demands = [load[mid] - kept_load[mid] for mid in members]
    needed = sum(demands)
    if min(demands, default=0) < 0 or needed != sum(supply):
        return None
    if any(load[m] != kept_load[m] for m in load if m not in index):
        return None
    # Cheap bounds first: a class cannot place more on-rack than the demand of
    # the members on its racks, nor a member take more on-rack than they supply.
    reach = [0] * n_classes  # demand reachable from each class
    local_reach = [0] * n_classes
    local_supply = [0] * n_members
    for c, mid, _ in placed:
        j = index[mid]
        reach[c] += demands[j]
        if not class_cost[c][j]:
            local_reach[c] += demands[j]
            local_supply[j] += supply[c]
    if any(reach[c] < supply[c] for c in range(n_classes)):
        return None
    bound = max(
        sum(max(0, supply[c] - local_reach[c]) for c in range(n_classes)),
        needed - sum(min(d, x) for d, x in zip(demands, local_supply, strict=True)),
    )
    if bound >= limit or budget[0] <= 0:
        return None
    budget[0] -= 1
    for j, demand in enumerate(demands):
        if demand:
            add(1 + n_classes + j, sink, demand, 0)
    total = 0
    while needed:
        distance = [math.inf] * (sink + 1)
        via = [-1] * (sink + 1)
        distance[0] = 0
        queue = [0]
        waiting = [False] * (sink + 1)
        waiting[0] = True
        for u in queue:  # SPFA: the queue grows while it is read
            waiting[u] = False
            for e in heads[u]:
                if capacity[e] > 0 and distance[u] + weight[e] < distance[target[e]]:
                    v = target[e]
                    distance[v] = distance[u] + weight[e]
                    via[v] = e
                    if not waiting[v]:
                        waiting[v] = True
                        queue.append(v)
        if distance[sink] == math.inf:
            return None
        units = needed
        v = sink
        while v != 0:
            e = via[v]
            units = min(units, capacity[e])
            v = target[e ^ 1]
        v = sink
        while v != 0:
            e = via[v]
            capacity[e] -= units
            capacity[e ^ 1] += units
            v = target[e ^ 1]
        total += units * int(distance[sink])
        needed -= units
    flow = {(c, mid): capacity[e ^ 1] for c, mid, e in placed if capacity[e ^ 1] > 0}
    return total, flow


def _shortest_paths(
    n: int, edges: list[tuple[int, int, int]], source: int
) -> tuple[list[float], list[int]]:
    """Bellman-Ford distances and parents from ``source`` (no negative cycle)."""
    distance: list[float] = [math.inf] * n
    parent = [-1] * n
    distance[source] = 0
    for _ in range(n):
        changed = False
        for u, v, w in edges:
            if distance[u] + w < distance[v]:
                distance[v] = distance[u] + w
                parent[v] = u
                changed = True
        if not changed:
            break
    return distance, parent


def _negative_cycle(n: int, edges: list[tuple[int, int, int]]) -> list[int] | None:
    """The nodes of a negative-cost cycle in the order of its edges, or None
    (Bellman-Ford from a virtual source joined to every node at cost 0)."""
    distance = [0] * n
    parent = [-1] * n
    last = -1
    for _ in range(n):
        last = -1
        for u, v, w in edges:
            if distance[u] + w < distance[v]:
                distance[v] = distance[u] + w
                parent[v] = u
                last = v
        if last == -1:
            return None
    for _ in range(n):  # step back into the cycle
        last = parent[last]
    cycle = [last]
    node = parent[last]
    while node != last:
        cycle.append(node)
        node = parent[node]
    cycle.reverse()
    return cycle


def _trade_for_locality(
    assignment: Assignment,
    kept_by: dict[Resource, str],
    kinds_of: dict[str, frozenset[str]],
    racks: RackInfo,
) -> None:
    """Swap resources between pairs of members while a swap makes more of them
    local: ``a`` gives ``r`` (off its rack) to ``b`` on ``r``'s rack, and takes
    back ``s``, local to ``a`` if possible, else off ``b``'s rack anyway.

    Swaps keep every load (so balance holds), every subscription, and every
    owned resource: only resources placed in this rebalance are swapped.
    Placement and balancing run in the order of loads, where Kafka's rack-aware
    general path places by rack first; this pass recovers what that order lost.
    """
    members_on: dict[str, list[str]] = {}
    for mid in sorted(racks.member_racks):
        members_on.setdefault(racks.member_racks[mid], []).append(mid)

    def movable(mid: str, resource: Resource) -> bool:
        return kept_by.get(resource) != mid

    improved = True
    while improved:
        improved = False
        for a in sorted(assignment):
            if a not in racks.member_racks:
                continue
            for index, r in enumerate(assignment[a]):
                if not racks.mismatch(a, r) or not movable(a, r):
                    continue
                trade = _find_trade(a, r, assignment, members_on, kinds_of, racks, movable)
                if trade is None:
                    continue
                b, position = trade
                s = assignment[b][position]
                assignment[a][index] = s
                assignment[b][position] = r
                improved = True


def _find_trade(
    a: str,
    r: Resource,
    assignment: Assignment,
    members_on: dict[str, list[str]],
    kinds_of: dict[str, frozenset[str]],
    racks: RackInfo,
    movable: Callable[[str, Resource], bool],
) -> tuple[str, int] | None:
    """A partner ``b`` on one of ``r``'s racks and the position of what it gives
    back (see :func:`_trade_for_locality`), or None."""
    for rack in sorted(racks.resource_racks.get(r, ())):
        for b in members_on.get(rack, ()):
            if b == a or r[0] not in kinds_of[b]:
                continue
            fallback: int | None = None
            for position, s in enumerate(assignment[b]):
                if s[0] not in kinds_of[a] or not movable(b, s):
                    continue
                if not racks.mismatch(a, s):
                    return b, position
                if fallback is None and racks.mismatch(b, s):
                    fallback = position
            if fallback is not None:
                return b, fallback
    return None


#: One step of a chain of moves: ``(kind, giver, taker)``.
_Step = tuple[str, str, str]


class _Balancer:
    """Moves resources along chains until no member can pass one, through members
    whose loads stay the same, to a member holding at least two fewer.

    A chain ``a -> b -> c`` moves one resource of a kind ``a`` holds to ``b``
    (which subscribes to it) and one of a kind ``b`` holds to ``c``; single moves
    are chains of length one.  When no chain is left the loads form an optimal
    semi-matching: the largest load is as small as the subscriptions allow, and
    no single move either (Kafka's ``isBalanced``).

    Members are taken heaviest first, each searching breadth first, kind by kind
    (one kind's subscribers are all reachable at once), for the shortest chain
    to a lighter member; a kind reaches its lightest subscriber first, so a
    resource goes where balance needs it most and is not passed on again.  A
    search that fails proves that every member it reached is stuck for good
    (they all hold at least ``load - 1``, and no later chain can pass through
    them, since it would have to end among them), so no member is searched from
    twice in vain and stuck members are not searched through.  Resources their
    holder did not own before this rebalance move first, then the kept ones
    with the lowest key positions.
    """

    def __init__(
        self,
        assignment: Assignment,
        owner: dict[Resource, str],
        kept_by: dict[Resource, str],
        load: dict[str, int],
        subscribers: dict[str, list[str]],
        kinds: dict[str, frozenset[str]],
        racks: RackInfo,
        keys: Mapping[str, Sequence[Key]],
    ) -> None:
        self.assignment = assignment
        self.keys = keys
        self.kinds = kinds
        self.owner = owner
        self.kept_by = kept_by
        self.load = load
        self.subscribers = subscribers
        self.racks = racks
        #: ``member -> kind -> resources of that kind it holds``, built on demand.
        self._held: dict[str, dict[str, int]] = {}
        #: ``member -> kind -> resources of that kind it received in this rebalance``.
        self._received: dict[str, dict[str, int]] = {}
        self.stuck: set[str] = set()
        self.changed: set[str] = set()
        #: ``member -> kind -> resources it kept, highest key position first``
        #: (a stack: the lowest is given first), built on demand.
        self._kept: dict[str, dict[str, list[Resource]]] = {}
        #: ``kind -> key -> position`` for kinds whose keys are not a range.
        self._positions: dict[str, dict[Key, int]] = {}

    def run(self) -> None:
        if not self.load:
            return
        while self._fill_lightest():
            pass
        self._follow_chains()
        owner = self.owner
        for mid in self.changed:
            self.assignment[mid] = list(
                dict.fromkeys(r for r in self.assignment[mid] if owner[r] == mid)
            )

    def _fill_lightest(self) -> bool:
        """Single moves to the lightest members, each from the heaviest member that
        holds a kind it subscribes to; True when something moved.

        A newcomer (or a member whose resources went away) thus takes one resource
        from each of the busiest members sharing a kind with it, which is what
        balance requires and no more.  A member that found no giver may find one
        once another member has grown, hence the caller repeats this until nothing
        moves (then Kafka's ``isBalanced`` holds); what single moves cannot settle
        is left to :meth:`_follow_chains`.
        """
        load = self.load
        levels: dict[int, dict[str, None]] = {}
        for mid in sorted(load, key=load.__getitem__, reverse=True):
            levels.setdefault(load[mid], {})[mid] = None
        heaviest = max(levels)
        heap = [(count, mid) for mid, count in load.items()]
        heapq.heapify(heap)
        moved = False
        while heap:
            count, taker = heapq.heappop(heap)
            if count != load[taker]:
                continue  # a stale entry; the member's current load has its own
            while not levels.get(heaviest):
                heaviest -= 1
            if heaviest - count <= 1:
                break  # nobody holds two more than the lightest member left
            wanted = self.kinds[taker]
            giver = None
            for level in range(heaviest, count + 1, -1):
                for candidate in levels.get(level, ()):
                    if not self._held_kinds(candidate).keys().isdisjoint(wanted):
                        giver = candidate
                        break
                if giver is not None:
                    break
            if giver is None:
                continue
            kind = next(k for k in self._kinds_to_give(giver) if k in wanted)
            self._move(kind, giver, taker)
            moved = True
            for mid, delta in ((giver, -1), (taker, 1)):
                del levels[load[mid]][mid]
                load[mid] += delta
                levels.setdefault(load[mid], {})[mid] = None
            heapq.heappush(heap, (load[taker], taker))
        return moved

    def _follow_chains(self) -> None:
        load = self.load
        levels = Counter(load.values())
        lightest = min(levels)
        heap = [(-count, mid) for mid, count in load.items()]
        heapq.heapify(heap)
        while heap:
            negative, source = heapq.heappop(heap)
            heaviest = -negative
            if heaviest != load[source] or source in self.stuck:
                continue  # a stale entry; the member's current load has its own
            while not levels[lightest]:
                lightest += 1
            if heaviest - lightest <= 1:
                return  # nobody holds two more than anybody else
            path = self._chain_from(source)
            if path is None:
                continue
            for kind, giver, taker in path:
                self._move(kind, giver, taker)
            sink = path[-1][2]
            for mid, delta in ((source, -1), (sink, 1)):
                levels[load[mid]] -= 1
                load[mid] += delta
                levels[load[mid]] += 1
                heapq.heappush(heap, (-load[mid], mid))

    def _held_kinds(self, mid: str) -> dict[str, int]:
        held = self._held.get(mid)
        if held is None:
            resources = self.assignment[mid]
            held = self._held[mid] = dict(Counter(map(itemgetter(0), resources)))
            kept_by = self.kept_by
            self._received[mid] = dict(Counter(r[0] for r in resources if kept_by.get(r) != mid))
        return held

    def _kinds_to_give(self, mid: str) -> list[str]:
        """Kinds ``mid`` holds, those of which it received some first."""
        held = self._held_kinds(mid)
        received = self._received[mid]
        if not received:
            return list(held)
        return [*received, *(kind for kind in held if kind not in received)]

    def _chain_from(self, source: str) -> list[_Step] | None:
        """The shortest chain from ``source`` to a member holding at least two
        fewer, or None (then every member reached is stuck)."""
        load = self.load
        weight = load.__getitem__
        stuck = self.stuck
        limit = load[source] - 2
        came_from: dict[str, tuple[str, str]] = {}
        seen = {source}
        searched: set[str] = set()
        queue = [source]
        for giver in queue:
            for kind in self._kinds_to_give(giver):
                if kind in searched:
                    continue
                searched.add(kind)
                takers = self.subscribers[kind]
                lightest = min(takers, key=weight)
                if load[lightest] <= limit:
                    path: list[_Step] = [(kind, giver, lightest)]
                    while giver != source:
                        kind, previous = came_from[giver]
                        path.append((kind, previous, giver))
                        giver = previous
                    path.reverse()
                    return path
                for taker in takers:
                    if taker not in seen:
                        seen.add(taker)
                        came_from[taker] = (kind, giver)
                        if taker not in stuck:
                            queue.append(taker)
        stuck.update(seen)
        return None

    def _move(self, kind: str, giver: str, taker: str) -> None:
        resource = self._resource_to_give(kind, giver, taker)
        # The taker's counts are read from its list before the resource joins
        # it: read after, they would count the resource twice.
        self._held_kinds(taker)
        self.owner[resource] = taker
        self.assignment[taker].append(resource)
        self.changed.add(giver)
        held = self._held_kinds(giver)
        received = self._received[giver]
        held[kind] -= 1
        if not held[kind]:
            del held[kind]
        if self.kept_by.get(resource) != giver:
            received[kind] -= 1
            if not received[kind]:
                del received[kind]
        held = self._held_kinds(taker)
        held[kind] = held.get(kind, 0) + 1
        if self.kept_by.get(resource) != taker:
            received = self._received[taker]
            received[kind] = received.get(kind, 0) + 1

    def _resource_to_give(self, kind: str, giver: str, taker: str) -> Resource:
        """A resource of ``kind`` that ``giver`` holds: one it received in this
        rebalance if it has one (with racks, one on ``taker``'s rack if possible),
        else the one it kept with the lowest key position."""
        owner = self.owner
        kept_by = self.kept_by
        fallback: Resource | None = None
        resources = self.assignment[giver]
        for index in range(len(resources) - 1, -1, -1):
            resource = resources[index]
            if resource[0] != kind or owner[resource] != giver:
                continue
            if kept_by.get(resource) == giver:
                return fallback or self._lowest_kept(kind, giver)
            if not self.racks.enabled or self.racks.matches(taker, resource):
                return resource
            if fallback is None:
                fallback = resource
        if fallback is None:
            raise AssertionError(f"sticky assignment: {giver} holds no {kind} to give")
        return fallback

    def _lowest_kept(self, kind: str, giver: str) -> Resource:
        """The resource of ``kind`` that ``giver`` kept with the lowest key
        position: Kafka moves partitions in partition order, so an overloaded
        member keeps its highest ones."""
        owner = self.owner
        stacks = self._kept.setdefault(giver, {})
        for attempt in range(2):
            stack = stacks.get(kind)
            if stack is None or attempt:
                # Built per kind on first use: a giver usually gives few kinds.
                kept_by = self.kept_by
                stack = stacks[kind] = [
                    r
                    for r in self.assignment[giver]
                    if r[0] == kind and owner[r] == giver and kept_by.get(r) == giver
                ]
                if len(stack) > 1:
                    stack.sort(key=self._position_in(kind), reverse=True)
            while stack:
                resource = stack.pop()
                if owner[resource] == giver:
                    return resource
        raise AssertionError(f"sticky assignment: {giver} kept no {kind} to give")

    def _position_in(self, kind: str) -> Callable[[Resource], int]:
        keys = self.keys[kind]
        if isinstance(keys, range):  # the keys are its ints: no table needed
            start, step = keys.start, keys.step
            return lambda resource: (int(resource[1]) - start) // step
        positions = self._positions.get(kind)
        if positions is None:
            positions = self._positions[kind] = {key: i for i, key in enumerate(keys)}
        return lambda resource: positions[resource[1]]
