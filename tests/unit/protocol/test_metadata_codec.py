"""The metadata / assignment codec: round trips, compatibility and bad input."""

from __future__ import annotations

import contextlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.errors import MessageTooLargeError, ProtocolError, UnsupportedVersionError
from workgroup.protocol import AssignmentData, BinaryCodec, MemberMetadata, catalog_hash
from workgroup.protocol.metadata import HEADER_SIZE

keys = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=20))
resources = st.lists(st.tuples(st.text(min_size=1, max_size=10), keys), max_size=30).map(tuple)
nullable = st.none() | st.text(max_size=20)

metadata = st.builds(
    MemberMetadata,
    kinds=st.lists(st.text(max_size=10), max_size=5).map(tuple),
    owned=resources,
    owned_generation=st.integers(-1, 2**31 - 1),
    rack=nullable,
    capacity=st.floats(allow_nan=False),
    instance_id=nullable,
    user_data=st.binary(max_size=50),
    catalog_hash=st.binary(max_size=16),
    tags=st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=4).map(tuple),
    warms_up=st.booleans(),
    warming=resources,
    ready=resources,
)
assignments = st.builds(
    AssignmentData,
    assigned=resources,
    revoked=resources,
    generation=st.integers(-1, 2**31 - 1),
    catalog_hash=st.binary(max_size=16),
    common_version=st.integers(1, 2),
    rejoin=st.booleans(),
    user_data=st.binary(max_size=50),
    warming=resources,
)


def _group_order(items: tuple[tuple[str, object], ...]) -> list[tuple[str, object]]:
    """Resources are written grouped by kind: compare as multisets per kind."""
    return sorted(items, key=repr)


@given(metadata, st.sampled_from([None, 0, 64]))
def test_metadata_round_trip(meta: MemberMetadata, compress_above: int | None) -> None:
    codec = BinaryCodec(compress_above=compress_above)
    decoded = codec.decode_metadata(codec.encode_metadata(meta))
    assert decoded.header.used_version == 4
    assert decoded.header.latest_supported_version == 4
    value = decoded.value
    for name in ("owned", "warming", "ready"):
        assert _group_order(getattr(value, name)) == _group_order(getattr(meta, name))
    assert value == MemberMetadata(
        **{**_fields(meta), "owned": value.owned, "warming": value.warming, "ready": value.ready}
    )


@given(assignments, st.sampled_from([None, 0]))
def test_assignment_round_trip(data: AssignmentData, compress_above: int | None) -> None:
    codec = BinaryCodec(compress_above=compress_above)
    decoded = codec.decode_assignment(codec.encode_assignment(data)).value
    assert _group_order(decoded.assigned) == _group_order(data.assigned)
    assert _group_order(decoded.revoked) == _group_order(data.revoked)
    assert _group_order(decoded.warming) == _group_order(data.warming)
    assert (decoded.generation, decoded.catalog_hash, decoded.rejoin, decoded.user_data) == (
        data.generation,
        data.catalog_hash,
        data.rejoin,
        data.user_data,
    )


@given(metadata)
def test_older_reader_reads_newer_metadata(meta: MemberMetadata) -> None:
    new, old = BinaryCodec(), BinaryCodec(latest_version=1)
    decoded = old.decode_metadata(new.encode_metadata(meta))
    # The header still tells the old reader what the writer could do.
    assert decoded.header.used_version == 4
    assert decoded.header.latest_supported_version == 4
    assert decoded.value.tags == ()
    assert decoded.value.catalog_hash == meta.catalog_hash
    assert decoded.value.instance_id == meta.instance_id


loads_of = st.one_of(
    st.floats(0, 1e12),
    st.just(float("nan")),
    st.just(-1.0),
    st.just(float("inf")),
)


@given(resources.map(lambda rs: tuple(dict.fromkeys(rs))), st.data(), st.sampled_from([None, 0]))
def test_loads_round_trip_within_a_fraction_of_the_largest(
    owned: tuple[tuple[str, object], ...], data: st.DataObject, compress_above: int | None
) -> None:
    loads = tuple(data.draw(loads_of) for _ in owned)
    codec = BinaryCodec(compress_above=compress_above)
    meta = MemberMetadata(owned=owned, loads=loads)  # type: ignore[arg-type]
    decoded = codec.decode_metadata(codec.encode_metadata(meta)).value
    measured = {r: x for r, x in zip(owned, loads, strict=True) if 0 <= x < float("inf")}
    if not measured:
        assert decoded.loads == ()  # nothing measured: nothing sent
        return
    largest = max(measured.values())
    assert len(decoded.loads) == len(decoded.owned)
    for resource, load in zip(decoded.owned, decoded.loads, strict=True):
        if resource in measured:
            assert abs(load - measured[resource]) <= largest / 65534 / 2 + 1e-9 * largest
        else:  # negative, infinite or NaN: not measured
            assert load != load


def test_loads_cost_two_bytes_per_resource() -> None:
    owned = tuple(("shard", k) for k in range(1000))
    codec = BinaryCodec(compress_above=None)
    plain = codec.encode_metadata(MemberMetadata(owned=owned))
    loaded = codec.encode_metadata(MemberMetadata(owned=owned, loads=(1.5,) * 1000))
    assert len(loaded) - len(plain) == 8 + 2 * 1000


def test_loads_not_matching_the_owned_resources_are_corrupt() -> None:
    codec = BinaryCodec(compress_above=None)
    blob = codec.encode_metadata(MemberMetadata(owned=(("s", 1), ("s", 2)), loads=(1.0, 2.0)))
    # The loads' count (after the tags) says 2; claim 1 instead.
    index = blob.rindex(struct.pack(">i", 2))
    forged = blob[:index] + struct.pack(">i", 1) + blob[index + 4 :]
    with pytest.raises(ProtocolError, match="loads"):
        codec.decode_metadata(forged)


def test_older_readers_ignore_loads() -> None:
    meta = MemberMetadata(owned=(("s", 1),), loads=(3.0,), tags=(("a", "b"),))
    decoded = BinaryCodec(latest_version=2).decode_metadata(BinaryCodec().encode_metadata(meta))
    assert decoded.value.loads == ()
    assert decoded.value.tags == (("a", "b"),)
    # Written for an older group (version probing), the loads are left out.
    old = BinaryCodec().encode_metadata(meta, version=2)
    assert BinaryCodec().decode_metadata(old).value.loads == ()


@given(metadata)
def test_newer_reader_reads_older_metadata(meta: MemberMetadata) -> None:
    decoded = BinaryCodec().decode_metadata(BinaryCodec(latest_version=1).encode_metadata(meta))
    assert decoded.header.used_version == 1
    assert decoded.header.latest_supported_version == 1
    assert decoded.value.tags == ()
    assert decoded.value.user_data == meta.user_data


@given(metadata, st.binary(min_size=1, max_size=40), st.integers(5, 100))
def test_unknown_future_version_with_trailing_fields_is_readable(
    meta: MemberMetadata, future_fields: bytes, future_version: int
) -> None:
    blob = BinaryCodec(compress_above=None).encode_metadata(meta)
    future = b"wg" + struct.pack(">hhB", future_version, future_version, 0)
    future += blob[HEADER_SIZE:] + future_fields
    decoded = BinaryCodec().decode_metadata(future)
    assert decoded.header.used_version == future_version
    assert decoded.value.tags == meta.tags
    assert decoded.value.kinds == meta.kinds


@given(assignments, st.binary(min_size=1, max_size=40))
def test_unknown_future_assignment_version_is_readable(
    data: AssignmentData, future_fields: bytes
) -> None:
    blob = BinaryCodec(compress_above=None).encode_assignment(data)
    future = b"wg" + struct.pack(">hhB", 7, 7, 0) + blob[HEADER_SIZE:] + future_fields
    decoded = BinaryCodec().decode_assignment(future)
    assert decoded.value.generation == data.generation
    assert decoded.value.user_data == data.user_data


@settings(max_examples=300)
@given(metadata, st.data())
def test_truncated_metadata_raises_protocol_error(
    meta: MemberMetadata, data: st.DataObject
) -> None:
    blob = BinaryCodec(compress_above=None).encode_metadata(meta)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ProtocolError):
        BinaryCodec().decode_metadata(blob[:cut])


@settings(max_examples=300)
@given(assignments, st.data())
def test_truncated_assignment_raises_protocol_error(
    value: AssignmentData, data: st.DataObject
) -> None:
    blob = BinaryCodec(compress_above=None).encode_assignment(value)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ProtocolError):
        BinaryCodec().decode_assignment(blob[:cut])


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_garbage_raises_protocol_error_only(garbage: bytes) -> None:
    codec = BinaryCodec()
    for decode in (codec.decode_metadata, codec.decode_assignment):
        with contextlib.suppress(ProtocolError):
            decode(garbage)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_after_a_valid_header_raises_protocol_error_only(garbage: bytes) -> None:
    codec = BinaryCodec()
    for flags in (0, 1):
        blob = b"wg" + struct.pack(">hhB", 1, 2, flags) + garbage
        for decode in (codec.decode_metadata, codec.decode_assignment):
            with contextlib.suppress(ProtocolError):
                decode(blob)


def test_non_workgroup_metadata_is_rejected_clearly() -> None:
    # What a Kafka consumer's "range" subscription looks like (version 0 header).
    consumer_subscription = b"\x00\x00\x00\x00\x00\x01\x00\x03foo\xff\xff\xff\xff"
    with pytest.raises(UnsupportedVersionError, match="not in workgroup's format"):
        BinaryCodec().decode_metadata(consumer_subscription)


def test_version_zero_is_rejected() -> None:
    with pytest.raises(UnsupportedVersionError, match="unsupported version 0"):
        BinaryCodec().decode_metadata(b"wg" + struct.pack(">hhB", 0, 0, 0))


def test_writing_a_version_above_latest_is_refused() -> None:
    with pytest.raises(UnsupportedVersionError):
        BinaryCodec(latest_version=1).encode_metadata(MemberMetadata(), version=2)


def test_corrupt_trailing_bytes_in_a_known_version_are_rejected() -> None:
    blob = BinaryCodec(compress_above=None).encode_metadata(MemberMetadata())
    with pytest.raises(ProtocolError, match="trailing"):
        BinaryCodec().decode_metadata(blob + b"\x00")


def test_size_limit_on_encode_and_decode() -> None:
    big = MemberMetadata(user_data=bytes(range(256)) * 100)
    with pytest.raises(MessageTooLargeError, match="above the limit"):
        BinaryCodec(max_bytes=1000, compress_above=None).encode_metadata(big)
    blob = BinaryCodec(compress_above=None).encode_metadata(big)
    with pytest.raises(MessageTooLargeError):
        BinaryCodec(max_bytes=1000).decode_metadata(blob)


def test_compression_bomb_is_rejected() -> None:
    bomb = zlib.compress(b"\x00" * 10_000_000)
    blob = b"wg" + struct.pack(">hhB", 1, 1, 1) + bomb
    with pytest.raises(MessageTooLargeError, match="decompresses"):
        BinaryCodec().decode_metadata(blob)


def test_compression_shrinks_many_owned_resources() -> None:
    meta = MemberMetadata(owned=tuple(("shard", i) for i in range(2000)), owned_generation=3)
    plain = BinaryCodec(compress_above=None).encode_metadata(meta)
    packed = BinaryCodec().encode_metadata(meta)
    assert len(packed) < len(plain) / 3
    assert BinaryCodec().decode_metadata(packed).value.owned == meta.owned


def test_catalog_hash_ignores_kind_order_but_not_key_order() -> None:
    assert catalog_hash({"a": [1, 2], "b": ["x"]}) == catalog_hash({"b": ["x"], "a": [1, 2]})
    assert catalog_hash({"a": [1, 2]}) != catalog_hash({"a": [2, 1]})
    assert catalog_hash({"a": [1]}) != catalog_hash({"a": ["1"]})


def _fields(meta: MemberMetadata) -> dict[str, object]:
    return {name: getattr(meta, name) for name in MemberMetadata.__dataclass_fields__}


def test_catalog_entries_carry_racks_and_attributes() -> None:
    from workgroup.protocol import ResourceSpec
    from workgroup.protocol.catalog import freeze_catalog

    frozen = freeze_catalog(
        {
            "shard": [
                0,
                ResourceSpec(1, frozenset({"r1"})),
                {"key": 2, "racks": ["r2"], "attributes": {"size": 7}},
            ],
        }
    )
    assert frozen.keys == {"shard": (0, 1, 2)}
    assert frozen.racks == {("shard", 1): frozenset({"r1"}), ("shard", 2): frozenset({"r2"})}
    assert frozen.attributes == {("shard", 2): {"size": "7"}}
    # Attributes count in the hash; plain catalogs keep theirs.
    assert catalog_hash({"shard": [0, 1, 2]}) != catalog_hash(
        {"shard": [0, 1, {"key": 2, "racks": ["r2"]}]}
    )
    assert catalog_hash({"shard": [0, {"key": 1}]}) == catalog_hash({"shard": [0, 1]})


@pytest.mark.parametrize(
    ("catalog", "message"),
    [
        ({"shard": [1, 1]}, "listed twice"),
        ({"shard": [1.5]}, "str or int"),
        ({"shard": [True]}, "str or int"),
        ({"shard": [{"racks": ["a"]}]}, "expected"),
        ({"shard": [{"key": 1, "rack": "a"}]}, "expected"),
        ({3: [1]}, "kinds are strings"),
    ],
)
def test_bad_catalogs_are_rejected(catalog: object, message: str) -> None:
    from workgroup.errors import ConfigError
    from workgroup.protocol.catalog import freeze_catalog

    with pytest.raises(ConfigError, match=message):
        freeze_catalog(catalog)  # type: ignore[arg-type]


#: Long runs of one kind's keys: int runs read in one step (up to 256 at once),
#: broken by a str key anywhere.
long_runs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(-(2**63), 2**63 - 1) | st.sampled_from(["s", "0"]),
    ),
    min_size=200,
    max_size=700,
).map(tuple)


@settings(max_examples=40, deadline=None)
@given(long_runs)
def test_long_runs_of_keys_read_back_as_written(
    assigned: tuple[tuple[str, int | str], ...],
) -> None:
    codec = BinaryCodec()
    data = AssignmentData(assigned=assigned, generation=3)
    decoded = codec.decode_assignment(codec.encode_assignment(data)).value
    by_kind: dict[str, list[int | str]] = {}
    for kind, key in assigned:
        by_kind.setdefault(kind, []).append(key)
    assert decoded.assigned == tuple((kind, key) for kind, keys in by_kind.items() for key in keys)


def test_a_run_of_int_keys_cut_short_is_a_protocol_error() -> None:
    codec = BinaryCodec()
    blob = codec.encode_assignment(
        AssignmentData(assigned=tuple(("a", k) for k in range(300)), generation=3)
    )
    for cut in (len(blob) - 1, len(blob) - 9 * 100):
        with pytest.raises(ProtocolError):
            codec.decode_assignment(blob[:cut])
