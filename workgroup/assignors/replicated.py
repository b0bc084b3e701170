"""``replicated``: N owners per resource, on distinct members and racks.

Every resource gets ``min(replicas, subscribers)`` owners, all different
members; the owners of one resource sit on different racks as far as the racks
of its subscribers allow.  Loads are balanced: with identical subscriptions each
member holds ``floor`` or ``ceil`` of ``resources * replicas / members`` replicas
(max - min <= 1) whenever the replicas fit.  Replicas stay where they are
(``MemberInfo.owned`` lists the resources a member holds a replica of) unless
that breaks balance, distinctness or rack spreading; when more members claim a
resource than it has replicas, the newest generations win, then member ids.

New replicas go to members that share few resources with the resource's other
holders, so a failed member's replicas survive on many members and its load is
spread when it is replaced.

The assignment lists, for every member, the resources it holds a replica of;
the first owner listed for a resource is not special (use ``leader`` on top for
a primary).  Use it for redundant work (hot standbys, replicated caches).
"""

from __future__ import annotations

from collections.abc import Callable

from workgroup.assignors._common import all_resources, empty_assignment, sorted_kinds
from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.errors import ConfigError
from workgroup.types import Resource


class ReplicatedAssignor:
    """N distinct owners per resource (see the module documentation)."""

    name = "replicated"
    supports_cooperative = True
    #: A resource has several owners (read by ``workgroup assign``'s statistics).
    exclusive = False

    def __init__(self, replicas: int | str = 2) -> None:
        try:
            count = int(replicas)
        except (TypeError, ValueError):
            raise ConfigError(f"replicas must be a positive integer, not {replicas!r}") from None
        if count < 1:
            raise ConfigError(f"replicas must be a positive integer, not {replicas!r}")
        self.replicas = count

    def assign(self, data: AssignmentInput) -> Assignment:
        assignment = empty_assignment(data)
        if not assignment:
            return assignment
        members = list(assignment)
        kinds = sorted_kinds(data)
        eligible = {k: [m for m in members if k in data.members[m].kinds] for k in kinds}
        ordered = all_resources(data, [k for k in kinds if eligible[k]])
        wanted = {r: min(self.replicas, len(eligible[r[0]])) for r in ordered}
        slots = sum(wanted.values())
        uniform = len({data.members[m].kinds for m in members}) == 1
        base, extra = divmod(slots, len(members))
        # Without identical subscriptions quotas cannot be promised; balance greedily.
        cap = base + (1 if extra else 0) if uniform else slots
        rack = {m: data.members[m].rack for m in members}

        holders: dict[Resource, list[str]] = {r: [] for r in ordered}
        load = dict.fromkeys(members, 0)
        # Claims, newest generation first, then member id.
        claims: dict[Resource, list[tuple[int, str]]] = {}
        for mid in members:
            info = data.members[mid]
            for resource in dict.fromkeys(info.owned):
                if resource in holders and resource[0] in info.kinds:
                    claims.setdefault(resource, []).append((-info.generation, mid))
        # How many resources each pair of members holds together: new replicas go
        # to members sharing little with the other holders, so that when a member
        # fails its resources' other replicas are spread over many members.
        shared: dict[tuple[str, str], int] = {}

        def add_holder(resource: Resource, mid: str) -> None:
            for other in holders[resource]:
                shared[(mid, other)] = shared.get((mid, other), 0) + 1
                shared[(other, mid)] = shared.get((other, mid), 0) + 1
            holders[resource].append(mid)

        over = 0
        for resource in ordered:
            for _, mid in sorted(claims.get(resource, ())):
                if len(holders[resource]) >= wanted[resource]:
                    break
                if load[mid] >= cap or (uniform and extra and load[mid] == base and over >= extra):
                    continue
                if self._rack_taken(resource, mid, holders, rack, eligible):
                    continue
                add_holder(resource, mid)
                load[mid] += 1
                if uniform and extra and load[mid] == base + 1:
                    over += 1

        def quota_ok(mid: str) -> bool:
            if load[mid] >= cap:
                return False
            return not (uniform and extra and load[mid] == base and over >= extra)

        for resource in ordered:
            need = wanted[resource] - len(holders[resource])
            for _ in range(need):
                chosen = self._pick(resource, holders, load, rack, eligible, quota_ok, shared)
                add_holder(resource, chosen)
                load[chosen] += 1
                if uniform and extra and load[chosen] == base + 1:
                    over += 1
        if uniform:
            self._even_out(ordered, holders, load, rack)
        for resource in ordered:
            for mid in holders[resource]:
                assignment[mid].append(resource)
        return assignment

    @staticmethod
    def _even_out(
        ordered: list[Resource],
        holders: dict[Resource, list[str]],
        load: dict[str, int],
        rack: dict[str, str | None],
    ) -> None:
        """Move replicas from the fullest to the emptiest member until loads differ
        by at most one (rare: the greedy fill can corner itself on the last resources)."""
        while True:
            most = max(load, key=lambda m: (load[m], m))
            least = min(load, key=lambda m: (load[m], m))
            if load[most] - load[least] <= 1:
                return
            movable = [r for r in ordered if most in holders[r] and least not in holders[r]]
            if not movable:
                return

            # Prefer a move that does not put two replicas on one rack.
            def crowds(resource: Resource, most: str = most, least: str = least) -> bool:
                others = {rack[h] for h in holders[resource] if h != most}
                return rack[least] is not None and rack[least] in others

            resource = min(movable, key=crowds)
            holders[resource][holders[resource].index(most)] = least
            load[most] -= 1
            load[least] += 1

    @staticmethod
    def _rack_taken(
        resource: Resource,
        mid: str,
        holders: dict[Resource, list[str]],
        rack: dict[str, str | None],
        eligible: dict[str, list[str]],
    ) -> bool:
        """True when ``mid``'s rack already holds the resource although another
        subscriber's rack does not."""
        mine = rack[mid]
        if mine is None:
            return False
        used = {rack[h] for h in holders[resource]}
        if mine not in used:
            return False
        return any(rack[o] not in used for o in eligible[resource[0]] if o not in holders[resource])

    @staticmethod
    def _pick(
        resource: Resource,
        holders: dict[Resource, list[str]],
        load: dict[str, int],
        rack: dict[str, str | None],
        eligible: dict[str, list[str]],
        quota_ok: Callable[[str], bool],
        shared: dict[tuple[str, str], int],
    ) -> str:
        taken = set(holders[resource])
        used_racks = {rack[h] for h in taken}
        candidates = [m for m in eligible[resource[0]] if m not in taken]

        def preference(mid: str) -> tuple[bool, bool, int, int, str]:
            new_rack = rack[mid] is None or rack[mid] not in used_racks
            overlap = sum(shared.get((mid, h), 0) for h in taken)
            return (not quota_ok(mid), not new_rack, load[mid], overlap, mid)

        return min(candidates, key=preference)
