"""Assignors for tests of tools built on workgroup's assignors."""

from __future__ import annotations

from workgroup.assignors.base import Assignment, AssignmentInput


class RotatingAssignor:
    """Moves every owned resource to the next member (by member id); unowned ones
    go to the first member.

    A cooperative rebalance with it never settles: each round withholds what the
    previous one handed out.  Use it to test how a tool reports a rebalance that
    does not converge (``workgroup assign`` says ``"converged": false``).
    """

    name = "rotating"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        ids = sorted(data.members)
        owner = {r: mid for mid, m in data.members.items() for r in m.owned}
        out: Assignment = {mid: [] for mid in ids}
        for kind in sorted(data.resources):
            for key in data.resources[kind]:
                current = owner.get((kind, key))
                chosen = ids[0] if current is None else ids[(ids.index(current) + 1) % len(ids)]
                out[chosen].append((kind, key))
        return out


__all__ = ["RotatingAssignor"]
