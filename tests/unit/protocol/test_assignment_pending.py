"""The assignment's ``pending`` and ``loads_known`` flags: readable by older and
newer releases alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workgroup.protocol import AssignmentData, BinaryCodec

DATA = AssignmentData(
    assigned=(("shard", 0), ("shard", "eu")),
    revoked=(("shard", 3),),
    generation=7,
    catalog_hash=b"\x01\x02",
    common_version=2,
    rejoin=True,
    user_data=b"u",
)
#: What the release before the flag wrote for DATA, per version (uncompressed).
OLD_BLOBS = {
    1: "77670001000200000000010000000573686172640000000200000000000000000001000000026575"
    "000000010000000573686172640000000100000000000000000300000007000000020102000201",
    2: "77670002000200000000010000000573686172640000000200000000000000000001000000026575"
    "0000000100000005736861726400000001000000000000000003000000070000000201020002010000000175",
}
CODEC = BinaryCodec(compress_above=None)
#: The same codec as the release before the flag (its header names version 2 as
#: the latest it supports; later releases only raise that number).
CODEC_V2 = BinaryCodec(compress_above=None, latest_version=2)


@pytest.mark.parametrize("version", [1, 2])
def test_without_pending_the_blob_is_what_older_releases_wrote(version: int) -> None:
    blob = CODEC_V2.encode_assignment(DATA, version)
    assert blob.hex() == OLD_BLOBS[version]
    # Newer codecs change only the header's "latest supported version".
    newer = CODEC.encode_assignment(DATA, version)
    assert newer[:4] + newer[6:] == blob[:4] + blob[6:]
    decoded = CODEC.decode_assignment(bytes.fromhex(OLD_BLOBS[version])).value
    assert decoded.pending is False
    assert decoded.rejoin is True


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("rejoin", [False, True])
def test_pending_only_sets_a_bit_older_readers_ignore(version: int, rejoin: bool) -> None:
    plain = CODEC.encode_assignment(AssignmentData(**{**_fields(DATA), "rejoin": rejoin}), version)
    flagged = CODEC.encode_assignment(
        AssignmentData(**{**_fields(DATA), "rejoin": rejoin, "pending": True}), version
    )
    # One byte differs: the flags byte, and only in bit 1; bit 0 (rejoin, the only
    # bit older releases read) is unchanged, so they decode both blobs alike.
    diff = [i for i, (a, b) in enumerate(zip(plain, flagged, strict=True)) if a != b]
    assert len(diff) == 1
    assert flagged[diff[0]] ^ plain[diff[0]] == 0x02
    assert flagged[diff[0]] & 0x01 == plain[diff[0]] & 0x01 == int(rejoin)
    for reader in (BinaryCodec(latest_version=1), BinaryCodec()):
        old_view = reader.decode_assignment(plain).value
        new_view = reader.decode_assignment(flagged).value
        assert new_view.pending
        assert not old_view.pending
        assert _fields(new_view) | {"pending": False} == _fields(old_view)


@given(st.booleans(), st.booleans(), st.sampled_from([None, 0]))
def test_pending_round_trips(pending: bool, rejoin: bool, compress_above: int | None) -> None:
    codec = BinaryCodec(compress_above=compress_above)
    data = AssignmentData(assigned=(("k", 1),), rejoin=rejoin, pending=pending)
    decoded = codec.decode_assignment(codec.encode_assignment(data)).value
    assert (decoded.pending, decoded.rejoin) == (pending, rejoin)


def test_a_newer_writers_unknown_flag_bits_are_ignored() -> None:
    blob = bytearray(CODEC.encode_assignment(AssignmentData(pending=True), 3))
    flags_at = len(blob) - 5  # v2/v3: the flags byte, then the empty user data's i32 length
    assert blob[flags_at] == 0x02
    blob[flags_at] |= 0x80
    decoded = CODEC.decode_assignment(bytes(blob)).value
    assert decoded.pending
    assert not decoded.rejoin


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_loads_known_only_sets_bit_2(version: int) -> None:
    plain = CODEC.encode_assignment(AssignmentData(**{**_fields(DATA), "pending": True}), version)
    flagged = CODEC.encode_assignment(
        AssignmentData(**{**_fields(DATA), "pending": True, "loads_known": True}), version
    )
    diff = [i for i, (a, b) in enumerate(zip(plain, flagged, strict=True)) if a != b]
    assert len(diff) == 1
    assert flagged[diff[0]] ^ plain[diff[0]] == 0x04
    decoded = CODEC.decode_assignment(flagged).value
    assert (decoded.loads_known, decoded.pending, decoded.rejoin) == (True, True, True)
    assert decoded.assigned == DATA.assigned
    # A reader of version 1 sees the other flags as they were.
    old_view = BinaryCodec(latest_version=1).decode_assignment(flagged).value
    assert (old_view.pending, old_view.rejoin) == (True, True)


def _fields(data: AssignmentData) -> dict[str, object]:
    return {name: getattr(data, name) for name in AssignmentData.__slots__}
