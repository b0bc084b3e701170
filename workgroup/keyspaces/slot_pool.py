"""A keyspace's lease slots: a bounded pool, a slot per live slice.  Pure.

A slice is one lease, and a lease keeps its token and checkpoint in a slot; on
a Kafka broker a slot is a topic.  Slice ids are never reused (a slice's id is
the token it was born with), so a slot per slice id would leave a topic behind
for every slice ever born.  Slices take their slots from a pool instead.

Rules:

1. **A slice keeps its slot for its life**: a slice the next map keeps (same
   id) keeps its slot.
2. **A slice merged away retires its slot** while any member still holds the
   slice (its holder may still commit to the slot in its grace period: the
   members' claims, from their JoinGroup metadata, say who does).  A retired
   slot is freed once no member claims its slice, like a resource that moves
   only once its old owner let it go, at the first round that changes a slice
   (the planner's choice: freed slots alone make no new map, and no epoch).
3. **A slice born by a split or a merge** (or given none yet) takes the lowest
   slot that no live slice and no retired slot uses.
4. **So the pool is bounded**: every slot in use is below the most slots ever
   in use at once (live slices plus retired slots), since rule 3 always finds
   one below the count in use.  The slot's header names the slice that holds
   it (:func:`~workgroup.runtime.slots.slot_header`), so a new holder knows a
   slot that names an earlier slice is another's and reads no checkpoint there.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from workgroup.keyspaces.slices import Slice, SliceMap

#: ``(slot, slice id)`` pairs of retired slots, in slot order.
Retired = tuple[tuple[int, int], ...]


def assign_slots(
    current: SliceMap, slices: Sequence[Slice], claimed: Collection[int]
) -> tuple[tuple[Slice, ...], Retired]:
    """The next map's ``slices`` with their slots, and the retired slots
    (rules 1-3); ``claimed``: the slice ids members hold now."""
    before = {piece.id: piece.slot for piece in current.slices}
    after = {piece.id for piece in slices}
    retired = {slot: piece_id for slot, piece_id in current.retired if piece_id in claimed}
    for piece in current.slices:
        if piece.id not in after and piece.slot is not None and piece.id in claimed:
            retired[piece.slot] = piece.id  # rule 2
    kept = [before.get(piece.id) for piece in slices]  # rule 1
    used = set(retired) | {slot for slot in kept if slot is not None}
    out = []
    free = 0
    for piece, slot in zip(slices, kept, strict=True):
        if slot is None:  # rule 3
            while free in used:
                free += 1
            slot = free
            used.add(slot)
        out.append(piece if piece.slot == slot else replace(piece, slot=slot))
    return tuple(out), tuple(sorted(retired.items()))


__all__ = ["Retired", "assign_slots"]
