"""Who owns a resource: the one rule every reader shows (sans-I/O).

Rules:

1. A resource is owned by the member whose assignment names it.  Mid-hand-over
   two assignments can name it (a member that has not synced since the
   generation that moved it still reports its older assignment): the member
   whose assignment is of the newest generation owns it, the others are
   ``releasing`` it.  The coordinator accepts commits only under the current
   generation, so an older assignment's holder can no longer write.  Two
   assignments of the same (or an unknown) generation naming it: nobody owns
   it until the coordinator settles (``owner`` ``None``, both ``releasing``).
2. A resource's token and checkpoint come from its lease slot (a slot is named
   by the key alone).  A committed slot whose key no assignment names is shown
   with no kind and no owner.
3. A token is paired with its owner only if that owner committed it: when a
   reader saw the resource held by someone else (or nobody) before, the token
   is shown once the slot's token is newer than the one seen then; until then
   ``token`` is ``None`` and ``token_pending`` is true (the new owner takes its
   token just after it is assigned the resource).  A first reading trusts the
   slot as it is.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from workgroup.client.describe import GroupDescription, MemberDescription
from workgroup.client.slots import LeaseSlot
from workgroup.types import Key

#: A key with its type (``1`` and ``"1"`` are different keys), for indexes by kind and key.
TypedKey = tuple[type, Key]
#: What rule 3 remembers: ``kind -> key -> (owner's member id, slot token)`` (kind
#: ``None``: a slot no assignment named).  By kind, then by the key itself (a key
#: is a str or an int, never a bool, so ``1`` and ``"1"`` stay apart): a big
#: group's 100,000 lookups make no tuple each.
Memory = Mapping[str | None, Mapping[Key, tuple[str | None, int | None]]]

_NOTHING: Mapping[Key, tuple[str | None, int | None]] = {}


def typed(key: Key) -> TypedKey:
    return (type(key), key)


class ResourceOwner(NamedTuple):
    """One resource as every reader shows it (see the rules).  A named tuple: a
    big group's reading makes 100,000 of them per refresh."""

    #: ``None``: a committed slot whose key no assignment names (rule 2).
    kind: str | None
    key: Key
    owner: MemberDescription | None
    #: Members whose older (or equally new) assignments still name it (rule 1).
    releasing: tuple[MemberDescription, ...] = ()
    slot: LeaseSlot | None = None
    #: The slot's fencing token: the owner's (rule 3), or the last holder's for a
    #: resource nobody owns; ``None`` while a new owner's is pending, or no slot.
    token: int | None = None
    token_pending: bool = False

    @property
    def checkpoint(self) -> str | None:
        return None if self.slot is None else self.slot.checkpoint


class Joined(NamedTuple):
    """A reading joined (:func:`join_and_remember`)."""

    resources: list[ResourceOwner]
    #: :func:`memory_of` the resources.
    memory: Memory
    #: The keys of the resources whose token is pending.
    pending: set[Key]
    #: The keys of owned resources with no token yet: a first owner's handler
    #: still starting (or a group that takes no leases).
    unstarted: set[Key]


def join_owners(
    description: GroupDescription | None,
    slots: Iterable[LeaseSlot],
    *,
    before: Memory | None = None,
) -> list[ResourceOwner]:
    """Every assigned resource and every committed slot, by the rules.

    ``before``: what a reader remembered of its last reading (:func:`memory_of`,
    rule 3); ``None`` for a first reading.
    """
    return join_and_remember(description, slots, before=before).resources


def join_and_remember(
    description: GroupDescription | None,
    slots: Iterable[LeaseSlot],
    *,
    before: Memory | None = None,
) -> Joined:
    """:func:`join_owners`, with what a reader remembers of it (:func:`memory_of`)
    and the keys whose token is pending, made in the same pass."""
    # A big group's join is 100,000 resources: claims are kept by kind and then by
    # the key itself (no tuple per key), each member's keys go in at once, one at a
    # time only for a member whose keys overlap another's; the few resources two
    # assignments name are kept apart.
    by_key: dict[Key, LeaseSlot] = {s.key: s for s in slots if s.key is not None}
    claims: dict[str, dict[Key, MemberDescription]] = {}
    more: dict[tuple[str, Key], list[MemberDescription]] = {}
    for m in description.members if description is not None else ():
        for kind, member_keys in (m.assignment or {}).items():
            claimed = claims.get(kind)
            if claimed is None:
                claimed = claims[kind] = {}
            if claimed.keys().isdisjoint(member_keys):
                claimed.update(dict.fromkeys(member_keys, m))
                continue
            for key in dict.fromkeys(member_keys):
                first = claimed.get(key)
                if first is None:
                    claimed[key] = m
                else:
                    more.setdefault((kind, key), [first]).append(m)
    out: list[ResourceOwner] = []
    append = out.append
    new = tuple.__new__
    slot_of_key = by_key.get
    memory: dict[str | None, dict[Key, tuple[str | None, int | None]]] = {}
    pending_keys: set[Key] = set()
    unstarted_keys: set[Key] = set()
    unnamed_before = _NOTHING if before is None else before.get(None, _NOTHING)
    for kind, claimed in claims.items():
        kind_before = _NOTHING if before is None else before.get(kind, _NOTHING)
        remembered = kind_before or unnamed_before
        of_kind = memory[kind] = {}
        for key, claimant in claimed.items():
            owner: MemberDescription | None = claimant
            releasing: tuple[MemberDescription, ...] = ()
            if more and (kind, key) in more:
                owner, releasing = _settle(more[kind, key])
            slot = slot_of_key(key)
            token = None if slot is None else slot.token
            pending = False
            if remembered and owner is not None:
                seen = kind_before.get(key) or unnamed_before.get(key)
                if seen is not None and seen[0] != owner.member_id and seen[1] is not None:
                    # Rule 3: a hand-over; the slot is the old holder's until it moves on.
                    pending = token is None or token <= seen[1]
                    if pending:
                        token = None
                        # Remembered as before: the baseline the new token must pass.
                        of_kind[key] = seen
                        pending_keys.add(key)
            if not pending:
                if token is None and owner is not None:
                    unstarted_keys.add(key)
                of_kind[key] = (
                    None if owner is None else owner.member_id,
                    None if slot is None else slot.token,
                )
            # The named tuple's own __new__ is Python code: a tuple of all seven
            # fields is made directly (100,000 of them in a big group's join).
            append(new(ResourceOwner, (kind, key, owner, releasing, slot, token, pending)))
    unnamed = set(by_key)  # a set difference per kind: no lookup per key here
    for claimed in claims.values():
        unnamed.difference_update(claimed)
    if unnamed:
        of_no_kind = memory.setdefault(None, {})
        for key in unnamed:  # in any order: sorted below
            slot = by_key[key]
            append(ResourceOwner(None, key, None, (), slot, slot.token))
            of_no_kind[key] = (None, slot.token)
    return Joined(_in_order(out), memory, pending_keys, unstarted_keys)


def memory_of(resources: Iterable[ResourceOwner], before: Memory | None = None) -> Memory:
    """What rule 3 remembers of a reading: each resource's owner and its slot's
    token; for a resource whose token is pending, what was remembered before
    (the baseline the new owner's token must pass)."""
    remembered: dict[str | None, dict[Key, tuple[str | None, int | None]]] = {}
    unnamed_before = _NOTHING if before is None else before.get(None, _NOTHING)
    kind: str | None = None
    of_kind: dict[Key, tuple[str | None, int | None]] = {}
    kind_before = _NOTHING
    for r in resources:
        if r.kind != kind or not remembered:
            kind = r.kind
            of_kind = remembered.setdefault(kind, {})
            kind_before = _NOTHING if before is None else before.get(kind, _NOTHING)
        if r.token_pending:
            kept = kind_before.get(r.key) or unnamed_before.get(r.key)
            if kept is not None:
                of_kind[r.key] = kept
                continue
        owner, slot = r.owner, r.slot
        of_kind[r.key] = (
            None if owner is None else owner.member_id,
            None if slot is None else slot.token,
        )
    return remembered


def _settle(
    claimants: list[MemberDescription],
) -> tuple[MemberDescription | None, tuple[MemberDescription, ...]]:
    """Rule 1: the owner among the members naming one resource, and the others."""
    if len(claimants) == 1:
        return claimants[0], ()
    newest = max(claimants, key=lambda m: -1 if m.generation is None else m.generation)
    ties = [m for m in claimants if m.generation == newest.generation]
    if newest.generation is None or len(ties) > 1:
        return None, tuple(sorted(claimants, key=lambda m: m.member_id))
    return newest, tuple(sorted((m for m in claimants if m is not newest),
                                key=lambda m: m.member_id))  # fmt: skip


def _in_order(resources: list[ResourceOwner]) -> list[ResourceOwner]:
    """``resources`` sorted by :func:`_order`, without calling it per resource: split
    by its first three fields (a handful of groups), each sorted by key alone."""
    groups: dict[tuple[bool, str, bool], list[ResourceOwner]] = {}
    for r in resources:
        where = (r.owner is None, r.kind or "", isinstance(r.key, str))
        found = groups.get(where)
        if found is None:
            groups[where] = [r]
        else:
            found.append(r)
    out: list[ResourceOwner] = []
    by_key = operator.itemgetter(1)
    for where in sorted(groups):
        out.extend(sorted(groups[where], key=by_key))
    return out


def _order(r: ResourceOwner) -> tuple[bool, str, bool, int, str]:
    """Owned first, then by kind and key (int keys in order before str keys): the
    order :func:`_in_order` gives."""
    key = r.key
    if isinstance(key, int):
        return (r.owner is None, r.kind or "", False, key, "")
    return (r.owner is None, r.kind or "", True, 0, key)


__all__ = [
    "Joined",
    "Memory",
    "ResourceOwner",
    "TypedKey",
    "join_and_remember",
    "join_owners",
    "memory_of",
    "typed",
]
