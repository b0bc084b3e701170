"""The keyspace report members carry in their metadata: round trip and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slice_map_strategies import slice_maps

from workgroup.errors import ProtocolError
from workgroup.keyspaces import HASH_SPACE, SliceMap
from workgroup.keyspaces.codec import encode_partial_map
from workgroup.keyspaces.partial import PartialMap, part_of
from workgroup.keyspaces.report import (
    KeyspaceReport,
    decode_report,
    encode_map_only,
    encode_report,
)
from workgroup.keyspaces.slices import Slice

key_loads = st.dictionaries(
    st.integers(0, HASH_SPACE - 1), st.floats(0, 1e12, allow_nan=False), max_size=20
)


@given(st.none() | slice_maps(), key_loads)
def test_a_report_round_trips(smap: SliceMap | None, keys: dict[int, float]) -> None:
    report = decode_report(encode_report(KeyspaceReport(smap, keys)))
    assert report.map == smap
    assert dict(report.keys) == keys


@given(slice_maps(max_slices=10))
def test_the_leader_hands_out_the_map_without_keys(smap: SliceMap) -> None:
    report = decode_report(encode_map_only(smap))
    assert report.map == smap
    assert not report.keys


def test_a_map_read_before_is_not_decoded_again() -> None:
    smap = SliceMap.uniform("users", 8)
    maps: dict[bytes, SliceMap] = {}
    first = decode_report(encode_report(KeyspaceReport(smap, {5: 1.0})), maps)
    second = decode_report(encode_report(KeyspaceReport(smap, {9: 2.0})), maps)
    assert len(maps) == 1
    assert first.map is second.map
    assert dict(second.keys) == {9: 2.0}


@given(slice_maps(max_slices=6), key_loads, st.data())
def test_any_truncation_is_refused_in_one_line(
    smap: SliceMap, keys: dict[int, float], data: st.DataObject
) -> None:
    blob = encode_report(KeyspaceReport(smap, keys))
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ProtocolError) as caught:
        decode_report(blob[:cut])
    assert "\n" not in str(caught.value)


@given(slice_maps(max_slices=12), st.data(), key_loads)
def test_a_part_of_a_map_round_trips(
    smap: SliceMap, data: st.DataObject, keys: dict[int, float]
) -> None:
    ids = data.draw(st.sets(st.sampled_from([piece.id for piece in smap.slices])))
    part = part_of(smap, ids)
    report = decode_report(encode_report(KeyspaceReport(part, keys)))
    assert report.map == part
    assert report.whole is None
    assert dict(report.keys) == keys
    assert {piece.id for piece in part.slices} == ids


@given(slice_maps(max_slices=6), st.data())
def test_any_truncation_of_a_part_is_refused_in_one_line(
    smap: SliceMap, data: st.DataObject
) -> None:
    blob = encode_map_only(part_of(smap, {piece.id for piece in smap.slices[::2]}))
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ProtocolError) as caught:
        decode_report(blob[:cut])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("blob", "said"),
    [
        (b"\x03", "version 3 is not supported"),
        (b"\x02\x00\x00\x00\x00\x00\x05", "5 keys in 0 bytes"),
        (b"\x02\x07\x00\x00\x00\x00\x00", "a map of unknown form 7"),
        (
            b"\x02\x00\x00\x00\x00\x00\x01" + b"\x01" + b"\x7f\xf0" + b"\x00" * 6,
            "a key's load is inf",
        ),
        (b"\x02\x00\x00\x00\x00\x00\x00\x00", "1 unexpected trailing bytes"),
    ],
)
def test_bad_reports_say_what_is_wrong(blob: bytes, said: str) -> None:
    with pytest.raises(ProtocolError, match=said):
        decode_report(blob)


def test_a_part_with_a_token_above_its_map_s_is_refused_in_one_line() -> None:
    part = PartialMap("u", (Slice(1, 0, 2, 1), Slice(2, 2, 4, 2)), max_token=5)
    blob = encode_map_only(part)
    head = encode_partial_map(part)
    assert head in blob
    bad = blob.replace(head, head.replace(b"u\x00\x05", b"u\x00\x01", 1))
    assert bad != blob
    with pytest.raises(
        ProtocolError, match=r"part of a slice map is corrupt: .*slice 2 has token 2"
    ):
        decode_report(bad)
