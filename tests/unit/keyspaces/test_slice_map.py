"""The slice map: always a valid cut of the hash space; lookups find the holding slice."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slice_map_strategies import slice_maps

from workgroup.errors import WorkgroupError
from workgroup.keyspaces import HASH_SPACE, InvalidSliceMapError, Slice, SliceMap, key_hash
from workgroup.keyspaces.errors import KeyspaceError

HALF = HASH_SPACE // 2


@given(slice_maps(), st.lists(st.integers(0, HASH_SPACE - 1), max_size=50))
def test_a_point_is_found_in_the_slice_that_holds_it(smap: SliceMap, points: list[int]) -> None:
    edges = [p for s in smap for p in (s.start, s.end - 1)]
    for point in [*points, *edges]:
        found = smap.slice_of(point)
        assert found.holds(point)
        assert smap.slices[smap.index_of(point)] is found


@given(slice_maps(), st.lists(st.one_of(st.text(), st.integers()), max_size=30))
def test_a_key_is_found_in_the_slice_of_its_point(smap: SliceMap, keys: list[str | int]) -> None:
    for key in keys:
        assert smap.slice_for_key(key) == smap.slice_of(key_hash(key))


@pytest.mark.parametrize("count", [1, 2, 3, 7, 1000, 70_000])
def test_uniform_maps_cut_even_ranges(count: int) -> None:
    smap = SliceMap.uniform("users", count)
    widths = {s.width for s in smap}
    assert len(smap) == count
    assert max(widths) - min(widths) <= 1
    assert smap.max_token == count
    assert [s.token for s in smap] == list(range(1, count + 1))


def test_points_outside_the_space_are_refused() -> None:
    smap = SliceMap.uniform("users", 4)
    for point in (-1, HASH_SPACE):
        with pytest.raises(KeyError, match="outside the hash space"):
            smap.slice_of(point)


def _map(*slices: Slice, max_token: int = 9) -> SliceMap:
    return SliceMap("users", slices, max_token=max_token)


@pytest.mark.parametrize(
    ("slices", "message"),
    [
        ((Slice(1, 0, HALF, 1), Slice(2, HALF + 1, HASH_SPACE, 2)), "a gap at"),
        ((Slice(1, 0, HALF, 1), Slice(2, HALF - 1, HASH_SPACE, 2)), "an overlap at"),
        ((Slice(1, 1, HASH_SPACE, 1),), "a gap at 0x0"),
        ((Slice(1, 0, HALF, 1),), "end at 0x8000000000000000, not at 2\\*\\*64"),
        ((Slice(1, 0, HASH_SPACE + 1, 1),), "end at .*, not at 2\\*\\*64"),
        ((Slice(1, 0, HALF, 1), Slice(1, HALF, HASH_SPACE, 2)), "slice id 1 repeats"),
        ((Slice(-1, 0, HASH_SPACE, 1),), "slice id -1 is not a token it held \\(1..1\\)"),
        ((Slice(3, 0, HASH_SPACE, 2),), "slice id 3 is not a token it held"),
        ((Slice(1, 0, HASH_SPACE, 10),), "token 10, outside 1..9"),
        ((Slice(0, 0, HASH_SPACE, 0),), "slice id 0 is not a token it held"),
        ((Slice(1, 0, HASH_SPACE, 1, ""),), "empty owner name"),
        ((Slice(1, 0, 0, 1), Slice(2, 0, HASH_SPACE, 2)), "slice 1 is empty"),
        ((), "end at 0x0"),
    ],
)
def test_invalid_maps_are_refused_in_one_line(slices: tuple[Slice, ...], message: str) -> None:
    with pytest.raises(InvalidSliceMapError, match=message) as caught:
        _map(*slices)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, KeyspaceError)
    assert isinstance(caught.value, WorkgroupError)


def test_name_epoch_and_counts_are_checked() -> None:
    whole = Slice(1, 0, HASH_SPACE, 1)
    with pytest.raises(InvalidSliceMapError, match="needs a keyspace name"):
        SliceMap("", (whole,), max_token=1)
    with pytest.raises(InvalidSliceMapError, match="epoch -1 is negative"):
        SliceMap("users", (whole,), max_token=1, epoch=-1)
    with pytest.raises(InvalidSliceMapError, match="1 to 2\\*\\*64 slices, not 0"):
        SliceMap.uniform("users", 0)


def test_owners_lists_each_owners_slices_in_hash_order() -> None:
    smap = SliceMap.uniform("users", 4)
    owned = SliceMap(
        "users",
        tuple(
            dataclasses.replace(s, owner=owner)
            for s, owner in zip(smap, ["b", "a", None, "b"], strict=True)
        ),
        max_token=smap.max_token,
    )
    assert owned.owners() == {"a": (owned.slices[1],), "b": (owned.slices[0], owned.slices[3])}
    assert owned.by_id()[3] is owned.slices[2]
