"""Check the lengths a request declares before the codec allocates for them.

kio's native reader reserves memory for an array as soon as it reads the
array's declared element count; an absurd count (a compact array length is a
varint of up to 64 bits) makes that reservation fail, and a failed allocation
aborts the whole process rather than raising.  So before a body reaches kio,
:func:`check_lengths` walks it along the same schema, without building
anything, and refuses any array, string or byte string that declares more than
the bytes left in the frame (every element takes at least one byte), as well as
truncated bodies.  What passes is then safe to decode.

The walk is compiled once per schema into a flat list of steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from workgroup.errors import ProtocolError

_FIXED_SIZES = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_SIZED = {"string", "bytes", "records", "error_message"}

#: ``step(payload, offset) -> offset after the field``.
Step = Callable[[bytes, int], int]


def check_lengths(schema: type, payload: bytes, offset: int) -> None:
    """Raise :class:`ProtocolError` unless every length in the body fits the frame."""
    try:
        _walker(schema)(payload, offset)
    except IndexError as exc:
        raise ProtocolError("request body is truncated") from exc


def _read_uvarint(payload: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = payload[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise ProtocolError("varint longer than 64 bits")


def _read_signed(payload: bytes, offset: int, size: int) -> tuple[int, int]:
    end = offset + size
    if end > len(payload):
        raise IndexError(offset)
    return int.from_bytes(payload[offset:end], "big", signed=True), end


def _count(payload: bytes, offset: int, flexible: bool, width: int) -> tuple[int, int]:
    """A declared length (-1: null), checked against the bytes left."""
    if flexible:
        value, offset = _read_uvarint(payload, offset)
        value -= 1
    else:
        value, offset = _read_signed(payload, offset, width)
    if value < -1:
        raise ProtocolError(f"negative length {value}")
    if value > len(payload) - offset:
        left = len(payload) - offset
        raise ProtocolError(f"declared length {value} exceeds the {left} bytes left")
    return value, offset


def _skip_tagged_fields(payload: bytes, offset: int) -> int:
    count, offset = _read_uvarint(payload, offset)
    if count > len(payload) - offset:
        raise ProtocolError(f"{count} tagged fields exceed the frame")
    for _ in range(count):
        _tag, offset = _read_uvarint(payload, offset)
        size, offset = _read_uvarint(payload, offset)
        offset += size
        if offset > len(payload):
            raise IndexError(offset)
    return offset


def _primitive_step(kafka_type: str, flexible: bool) -> Step:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:

        def fixed(payload: bytes, offset: int) -> int:
            offset += size
            if offset > len(payload):
                raise IndexError(offset)
            return offset

        return fixed
    if kafka_type not in _SIZED:
        raise ProtocolError(f"no length rule for kafka type {kafka_type!r}")
    width = 2 if kafka_type in ("string", "error_message") else 4

    def sized(payload: bytes, offset: int) -> int:
        length, offset = _count(payload, offset, flexible, width)
        return offset + max(length, 0)

    return sized


def _array_step(element: Step, flexible: bool) -> Step:
    def array(payload: bytes, offset: int) -> int:
        count, offset = _count(payload, offset, flexible, 4)
        for _ in range(count):
            offset = element(payload, offset)
        return offset

    return array


def _nullable_step(walker: Step) -> Step:
    """A nullable struct: an int8 marker (-1: null) before its fields."""

    def nullable(payload: bytes, offset: int) -> int:
        marker, offset = _read_signed(payload, offset, 1)
        return offset if marker < 0 else walker(payload, offset)

    return nullable


def check_header_tagged_fields(payload: bytes, offset: int) -> None:
    """The tagged-field section of a v2 request header, which starts at ``offset``."""
    try:
        _skip_tagged_fields(payload, offset)
    except IndexError as exc:
        raise ProtocolError("request header is truncated") from exc


@cache
def _walker(schema: type) -> Step:
    flexible = bool(getattr(schema, "__flexible__", False))
    steps: list[Step] = []
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue  # tagged fields live in the tagged-field section
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            steps.append(_array_step(_walker(kind.type_), flexible))
        elif isinstance(kind, EntityField):
            walker = _walker(kind.type_)
            steps.append(_nullable_step(walker) if is_optional(field) else walker)
        elif isinstance(kind, PrimitiveTupleField):
            element = _primitive_step(get_schema_field_type(field), flexible)
            steps.append(_array_step(element, flexible))
        else:
            steps.append(_primitive_step(get_schema_field_type(field), flexible))
    if flexible:
        steps.append(_skip_tagged_fields)

    def walk(payload: bytes, offset: int) -> int:
        for step in steps:
            offset = step(payload, offset)
        return offset

    return walk
