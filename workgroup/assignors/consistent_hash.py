"""``consistent-hash``: rendezvous (highest-random-weight) hashing.

Each resource goes to the subscriber with the highest score
``mix(hash(member), hash(resource))``, where the hashes are 64-bit BLAKE2b
digests (stable across processes, machines and Python versions) and a member is
named by its instance id when it has one (so a restarted static member gets its
resources back under a new member id), else by its member id.

Guarantees: valid; deterministic and *stateless*: the owner of a resource
depends only on the resource and on who subscribes to its kind, so any process
can compute it without the group's metadata, and when a member leaves only its
resources move, when one joins only the resources that now score highest for it
move (about ``1/members`` of them).  Load is balanced only statistically (a
member's share varies by roughly ``sqrt(share)``); owned resources are ignored.
Use it when other systems must locate a resource's owner from the member list
alone, or when minimal movement matters more than exact balance.
Cost: O(resources x subscribers).
"""

from __future__ import annotations

from hashlib import blake2b

from workgroup.assignors._common import empty_assignment, sorted_kinds
from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.types import Resource

_MASK = (1 << 64) - 1


def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that never changes between runs."""
    return int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "big")


def resource_hash(resource: Resource) -> int:
    kind, key = resource
    # The type tag keeps the int key 1 and the str key "1" apart.
    tag = "i" if isinstance(key, int) else "s"
    return stable_hash(f"{kind}\x00{tag}{key}")


def member_hash(member: MemberInfo) -> int:
    if member.instance_id is not None:
        return stable_hash(f"instance\x00{member.instance_id}")
    return stable_hash(f"member\x00{member.member_id}")


def score(member_seed: int, resource_seed: int) -> int:
    """SplitMix64 finaliser of the two seeds: a well-spread 64-bit weight."""
    z = (member_seed ^ resource_seed) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class ConsistentHashAssignor:
    """Rendezvous hashing (see the module documentation)."""

    name = "consistent-hash"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        assignment = empty_assignment(data)
        seeds = {mid: member_hash(m) for mid, m in data.members.items()}
        for kind in sorted_kinds(data):
            # Ties (64-bit collisions) go to the smaller member id.
            subscribers = sorted(mid for mid, m in data.members.items() if kind in m.kinds)
            if not subscribers:
                continue
            candidates = [(seeds[mid], mid) for mid in subscribers]
            for key in data.resources[kind]:
                resource = (kind, key)
                h = resource_hash(resource)
                best = max(candidates, key=lambda c: score(c[0], h))
                assignment[best[1]].append(resource)
        return assignment
