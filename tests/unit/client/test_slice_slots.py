"""A keyspace's slice named from outside the group (:mod:`workgroup.client.slice_slots`):
the map the members carry or the slots keep, a slice by id or by key, its slot
in the pool, and one-line errors for an unknown keyspace or slice."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workgroup.client.keyspaces import UnknownKeyspaceError
from workgroup.client.slice_slots import (
    UnknownSliceError,
    find_slice,
    kept_keyspaces,
    keyspace_map,
)
from workgroup.client.slots import LeaseSlot
from workgroup.keyspaces import SliceMap
from workgroup.keyspaces.hashing import key_hash
from workgroup.runtime.keyspace_slots import encode_persisted, pool_slot_key
from workgroup.runtime.slots import decode_metadata, slot_of

GROUP = "shop.users"


def users_map(epoch: int = 3) -> SliceMap:
    smap = SliceMap.uniform("users", 4, first_token=10)
    # Slots out of id order, as a pool hands them on.
    slices = tuple(
        replace(piece, slot=slot, owner="m0")
        for piece, slot in zip(smap.slices, (2, 0, 3, 1), strict=True)
    )
    return SliceMap("users", slices, max_token=smap.max_token, epoch=epoch)


def kept_slots(smap: SliceMap) -> list[LeaseSlot]:
    """The group's slots as a reading returns them, with ``smap`` kept in them."""
    out = []
    for key, (offset, metadata) in encode_persisted(smap).slots.items():
        contents = decode_metadata(metadata)
        out.append(LeaseSlot(slot_of(GROUP, key).topic, contents.key, offset, contents.checkpoint))
    return out


def test_the_kept_map_is_read_back_from_the_slots() -> None:
    smap = users_map()
    assert kept_keyspaces(kept_slots(smap)) == {"users": smap}
    # Tansu keeps no metadata: the keyspace is known (its token slot), its map is not.
    bare = [replace(slot, key=None, checkpoint=None) for slot in kept_slots(smap)]
    assert kept_keyspaces(bare) == {}
    token_only = [s for s in kept_slots(smap) if s.key == "~keyspace/users/max-token"]
    assert kept_keyspaces([replace(token_only[0], checkpoint="v1 epoch=3 chunks=0")]) == {
        "users": None
    }
    assert kept_keyspaces([LeaseSlot("t", 5, 1, "x")]) == {}


def test_the_newest_map_wins_whether_carried_or_kept() -> None:
    older, newer = users_map(epoch=3), users_map(epoch=4)
    assert keyspace_map(GROUP, "users", {"users": older}, {"users": newer}) is newer
    assert keyspace_map(GROUP, "users", {"users": newer}, {"users": older}) is newer
    assert keyspace_map(GROUP, "users", {}, {"users": older}) is older


def test_a_slice_named_by_id_or_by_key_resolves_to_its_pool_slot() -> None:
    smap = users_map()
    second = smap.slices[1]
    piece, slot = find_slice(GROUP, smap, slice_id=second.id)
    assert piece == second
    assert slot == slot_of(GROUP, pool_slot_key("users", 0))
    assert slot != slot_of(GROUP, second.id)
    key = next(
        f"user-{i}" for i in range(1000) if second.start <= key_hash(f"user-{i}") < second.end
    )
    assert find_slice(GROUP, smap, key=key) == (second, slot)


def test_an_unknown_keyspace_or_slice_is_one_line_with_exit_status_2() -> None:
    smap = users_map()
    with pytest.raises(UnknownSliceError, match="has no slice 999 in its map") as slice_error:
        find_slice(GROUP, smap, slice_id=999)
    with pytest.raises(
        UnknownKeyspaceError, match=r"no keyspace 'orders' \(its keyspaces: users\)"
    ) as ks_error:
        keyspace_map(GROUP, "orders", {"users": smap}, {})
    with pytest.raises(UnknownKeyspaceError, match="has no map to find its slices in") as no_map:
        keyspace_map(GROUP, "users", {}, {"users": None})
    for error in (slice_error.value, ks_error.value, no_map.value):
        assert "\n" not in str(error)
        assert error.exit_code == 2
        assert not error.retriable
