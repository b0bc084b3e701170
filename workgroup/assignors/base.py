"""What an assignor sees and returns.

An assignor is a pure, deterministic function from an :class:`AssignmentInput`
to a mapping ``member id -> resources``.  Resources are ``(kind, key)`` tuples:
kinds group resources (a Kafka topic is a kind, its partitions the keys), and
each kind's keys are ordered (the order in ``AssignmentInput.resources``).

Assignors always return the *target* assignment.  For cooperative protocols the
member layer, not the assignor, withholds resources that are still owned by
another member until they have been revoked (KIP-429), so every assignor can be
used with either rebalance protocol as long as it is sticky enough to make that
worthwhile (``supports_cooperative``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from workgroup.types import NO_GENERATION_ID, Key, Resource

#: ``member id -> resources assigned to it``, in assignment order.
Assignment = dict[str, list[Resource]]


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One member as the leader's assignor sees it."""

    member_id: str
    kinds: frozenset[str]
    instance_id: str | None = None
    #: Resources the member owned when it joined (cooperative and sticky assignors).
    owned: tuple[Resource, ...] = ()
    #: Generation in which ``owned`` was assigned; -1 when unknown.
    generation: int = NO_GENERATION_ID
    rack: str | None = None
    #: Relative capacity for weighted assignors (> 0).
    capacity: float = 1.0
    user_data: bytes = b""
    #: Total load the member reported for ``owned`` when it measured every one
    #: of them (``None``: not known); the load balancing stage uses it.
    owned_load: float | None = None
    #: Resources the member reported ready: warm-ups it finished, and standby
    #: holders ready to take over (:mod:`workgroup.member.warmup`).
    ready: frozenset[Resource] = frozenset()


@dataclass(frozen=True, slots=True)
class AssignmentInput:
    #: ``kind -> ordered keys``.
    resources: Mapping[str, Sequence[Key]]
    #: ``member id -> member``.
    members: Mapping[str, MemberInfo]
    #: Racks a resource's data lives on (rack-aware assignors); absent: any rack.
    resource_racks: Mapping[Resource, frozenset[str]] = field(default_factory=dict)
    #: Free-form attributes of resources (from the resource source); absent: none.
    resource_attributes: Mapping[Resource, Mapping[str, str]] = field(default_factory=dict)
    #: Measured load of resources (finite, >= 0), as their owners reported it;
    #: absent: not measured.  Used by the load balancing stage
    #: (:mod:`workgroup.assignors.balance`); assignors may ignore it.
    resource_loads: Mapping[Resource, float] = field(default_factory=dict)


@runtime_checkable
class Assignor(Protocol):
    #: Name used on the wire and in configuration (e.g. ``"cooperative-sticky"``).
    name: str
    #: Whether the assignor keeps enough stickiness for cooperative rebalancing.
    supports_cooperative: bool

    def assign(self, data: AssignmentInput) -> Assignment: ...


__all__ = ["Assignment", "AssignmentInput", "Assignor", "Key", "MemberInfo", "Resource"]
