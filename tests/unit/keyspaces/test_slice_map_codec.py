"""The slice map's encoding: round trips, its size, and one-line errors for bad bytes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slice_map_strategies import slice_maps

from workgroup.errors import ProtocolError, UnsupportedVersionError
from workgroup.keyspaces import SliceMap, decode_slice_map, encode_slice_map
from workgroup.keyspaces.codec import SLICE_MAP_VERSION
from workgroup.keyspaces.hashing import HASH_SCHEME
from workgroup.protocol.binary import Reader, Writer


@given(slice_maps())
def test_round_trip(smap: SliceMap) -> None:
    assert decode_slice_map(encode_slice_map(smap)) == smap


def test_ten_thousand_slices_fit_in_join_metadata() -> None:
    smap = SliceMap.uniform("users", 10_000)
    owned = SliceMap(
        "users",
        tuple(dataclasses.replace(s, owner=f"member-{i % 100:03d}") for i, s in enumerate(smap)),
        max_token=smap.max_token,
    )
    blob = encode_slice_map(owned)
    # About 15 bytes a slice (2 of them its pool slot): well under the metadata
    # codec's 1 MiB default limit.
    assert len(blob) < 16 * 10_000
    assert decode_slice_map(blob) == owned


def _one_line_protocol_error(data: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode_slice_map(data)
    message = str(caught.value)
    assert message.startswith("slice map")
    assert "\n" not in message
    return caught.value


@given(slice_maps(max_slices=8), st.data())
def test_truncated_bytes_are_refused(smap: SliceMap, data: st.DataObject) -> None:
    blob = encode_slice_map(smap)
    cut = data.draw(st.integers(0, len(blob) - 1))
    _one_line_protocol_error(blob[:cut])


def _decoded_or_error(data: bytes) -> SliceMap | str:
    """The map ``data`` decodes to, or the ProtocolError's message."""
    try:
        return decode_slice_map(data)
    except ProtocolError as exc:
        return str(exc)


@given(st.binary(max_size=200))
def test_garbage_either_decodes_to_a_valid_map_or_is_refused(data: bytes) -> None:
    outcome = _decoded_or_error(data)
    if isinstance(outcome, str):
        assert "\n" not in outcome
    else:
        assert decode_slice_map(encode_slice_map(outcome)) == outcome


@given(slice_maps(max_slices=8), st.data())
def test_flipped_bytes_never_raise_anything_else(smap: SliceMap, data: st.DataObject) -> None:
    blob = bytearray(encode_slice_map(smap))
    position = data.draw(st.integers(0, len(blob) - 1))
    blob[position] ^= data.draw(st.integers(1, 255))
    outcome = _decoded_or_error(bytes(blob))
    if isinstance(outcome, str):
        assert "\n" not in outcome
    else:
        assert outcome != smap


def _header(
    *, version: int = SLICE_MAP_VERSION, scheme: int = HASH_SCHEME, max_token: int = 5
) -> Writer:
    out = Writer()
    out.u8(version)
    out.u8(scheme)
    out.string("users")
    out.uvarint(0)
    out.uvarint(max_token)
    return out


def _with_slices(
    out: Writer,
    owners: list[str],
    rows: list[tuple[int, ...]],
    retired: tuple[tuple[int, int], ...] = (),
) -> bytes:
    """Rows: ``(id, token, owner, slot + 1)`` for the first slice, then
    ``(start step, id, token, owner, slot + 1)``."""
    out.uvarint(len(owners))
    for owner in owners:
        out.string(owner)
    out.uvarint(len(rows))
    for row in rows:
        for value in row:
            out.uvarint(value)
    out.uvarint(len(retired))
    for slot, piece_id in retired:
        out.uvarint(slot)
        out.uvarint(piece_id)
    return out.getvalue()


def test_a_valid_handmade_blob_decodes() -> None:
    smap = decode_slice_map(
        _with_slices(_header(), ["a"], [(1, 1, 1, 4), (2**63, 2, 2, 0, 0)], ((0, 5),))
    )
    assert [(s.id, s.start, s.token, s.owner, s.slot) for s in smap] == [
        (1, 0, 1, "a", 3),
        (2, 2**63, 2, None, None),
    ]
    assert smap.retired == ((0, 5),)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"", "truncated or corrupt: needs 1 bytes"),
        (_header(version=9).getvalue(), "version 9 is not supported"),
        (_header(scheme=7).getvalue(), "hashes keys with scheme 7"),
        (_with_slices(_header(), [], []), "corrupt: 0 slices"),
        (_with_slices(_header(), [], [(1, 1, 0, 0), (0, 2, 2, 0, 0)]), "slice 1 is empty"),
        (
            _with_slices(_header(), [], [(1, 1, 0, 0), (2**63, 2, 2, 0, 0), (2**63, 3, 3, 0, 0)]),
            "a slice starts past the hash space",
        ),
        (_with_slices(_header(), [], [(1, 1, 2, 0)]), "slice 0 names owner 2"),
        (_with_slices(_header(), [], [(1, 9, 0, 0)]), "token 9, outside 1..5"),
        (_with_slices(_header(), [], [(1, 1, 0, 0), (5, 1, 2, 0, 0)]), "slice id 1 repeats"),
        (_with_slices(_header(), [""], [(1, 1, 1, 0)]), "empty owner name"),
        (_with_slices(_header(), ["a", "a"], [(1, 1, 2, 0)]), "owner 'a' is listed twice"),
        (_with_slices(_header(), [], [(1, 1, 0, 0)]) + b"\x00", "1 unexpected trailing bytes"),
        (_with_slices(_header(), [], [(1, 1, 0, 1), (5, 2, 2, 0, 1)]), "slot 0 is given twice"),
        (_with_slices(_header(), [], [(1, 1, 0, 1)], ((0, 7),)), "slot 0 is given twice"),
        (_with_slices(_header(), [], [(1, 1, 0, 1)], ((3, 1),)), "slice 1 is live and retired"),
        (_with_slices(_header(), [], [(1, 1, 0, 0)])[:-1] + b"\x05", "5 retired slots in 0"),
        (_header(version=1).getvalue(), "version 1 is not supported"),
        (_header().getvalue() + b"\xff" * 11, "varint"),
        (_header().getvalue() + b"\x80\x00", "bad varint"),
        (_header().getvalue() + b"\xff" * 9 + b"\x7f", "bad varint"),
        (_header().getvalue() + b"\x7f", "127 owners in 0 bytes"),
        (b"\x02\x01\x00\x00\x00\x02\xff\xfe", "invalid UTF-8"),
    ],
)
def test_malformed_blobs_get_one_line_errors(blob: bytes, message: str) -> None:
    error = _one_line_protocol_error(blob)
    assert message in str(error)
    if "version" in message or "scheme" in message:
        assert isinstance(error, UnsupportedVersionError)


def test_varints_round_trip_at_their_edges() -> None:
    values = [0, 1, 127, 128, 2**63, 2**64 - 1]
    out = Writer()
    for value in values:
        out.uvarint(value)
    reader = Reader(out.getvalue(), "test")
    assert [reader.uvarint() for _ in values] == values
    with pytest.raises(ValueError, match="outside"):
        Writer().uvarint(2**64)
