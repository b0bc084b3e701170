"""Compiled writers for kio response entities (the bytes of kio's writer, faster).

kio's generic writer walks every field through checked primitive types and a
scratch buffer for tagged fields; for a JoinGroup leader response or an
OffsetFetch of many partitions that costs 10-15 µs per element.  This module
builds, once per entity class, a closure that appends the same bytes to a
``bytearray`` with ``struct``.

Rules:

* The layout follows kio's field metadata: ``kafka_type`` for primitives, the
  annotation for arrays and nested entities, ``X | None`` for nullability and
  ``__flexible__`` for compact lengths and the (empty) tagged-field section.
* A class this module does not know how to write — one with tagged fields, or
  a type it has no encoder for — gets ``None`` and the caller uses kio's writer.
  ``tests/wire/test_writers.py`` checks byte equality with kio for every
  response version the coordinator supports.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from typing import Any

from workgroup.kafka.direct import uvarint

Write = Callable[[bytearray, Any], None]

_I8 = struct.Struct(">b").pack
_I16 = struct.Struct(">h").pack
_I32 = struct.Struct(">i").pack
_I64 = struct.Struct(">q").pack
_U16 = struct.Struct(">H").pack
_U32 = struct.Struct(">I").pack
_F64 = struct.Struct(">d").pack
_ZERO_UUID = bytes(16)


class _Unsupported(Exception):
    """A field layout this module leaves to kio."""


def _fixed(pack: Callable[[Any], bytes]) -> Write:
    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return write


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> Write:
    match kafka_type:
        case "int8":
            return _fixed(_I8)
        case "int16":
            return _fixed(_I16)
        case "int32":
            return _fixed(_I32)
        case "int64":
            return _fixed(_I64)
        case "uint16":
            return _fixed(_U16)
        case "uint32":
            return _fixed(_U32)
        case "float64":
            return _fixed(_F64)
        case "bool":

            def write_bool(out: bytearray, value: Any) -> None:
                out.append(1 if value else 0)

            return write_bool
        case "error_code":

            def write_error(out: bytearray, value: Any) -> None:
                out += _I16(int(value))

            return write_error
        case "timedelta_i32":

            def write_ms(out: bytearray, value: Any) -> None:
                out += _I32(round(value.total_seconds() * 1000))

            return write_ms
        case "uuid":

            def write_uuid(out: bytearray, value: Any) -> None:
                out += _ZERO_UUID if value is None else value.bytes

            return write_uuid
        case "string" | "bytes":
            return _sized(kafka_type == "string", flexible, nullable)
    raise _Unsupported(kafka_type)


def _sized(text: bool, flexible: bool, nullable: bool) -> Write:
    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise TypeError("unexpected None for a non-nullable field")
            out += b"\x00" if flexible else (_I16(-1) if text else _I32(-1))
            return
        data = value.encode() if isinstance(value, str) else value
        if flexible:
            out += uvarint(len(data) + 1)
        else:
            out += _I16(len(data)) if text else _I32(len(data))
        out += data

    return write


def _array(item: Write, flexible: bool) -> Write:
    def write(out: bytearray, items: Any) -> None:
        if items is None:
            out += b"\x00" if flexible else _I32(-1)
            return
        out += uvarint(len(items) + 1) if flexible else _I32(len(items))
        for element in items:
            item(out, element)

    return write


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise _Unsupported(str(annotation))
        return args[0], True
    return annotation, False


def _field_writer(cls: type[Any], field: dataclasses.Field[Any]) -> Write:
    if "tag" in field.metadata:
        raise _Unsupported("tagged field")
    flexible = bool(cls.__flexible__)
    annotation, nullable = _unwrap_optional(field.type)
    if typing.get_origin(annotation) is tuple:
        (element,) = {a for a in typing.get_args(annotation) if a is not Ellipsis}
        if dataclasses.is_dataclass(element):
            return _array(_entity(typing.cast(type[Any], element)), flexible)
        return _array(_primitive(field.metadata["kafka_type"], flexible, False), flexible)
    if dataclasses.is_dataclass(annotation):
        raise _Unsupported("nested entity field")
    return _primitive(field.metadata["kafka_type"], flexible, nullable)


_COMPILED: dict[type[Any], Write] = {}


def _entity(cls: type[Any]) -> Write:
    compiled = _COMPILED.get(cls)
    if compiled is not None:
        return compiled
    steps = tuple((f.name, _field_writer(cls, f)) for f in dataclasses.fields(cls))
    flexible = bool(cls.__flexible__)

    def write(out: bytearray, entity: Any) -> None:
        for name, step in steps:
            step(out, getattr(entity, name))
        if flexible:
            out.append(0)  # no tagged fields

    _COMPILED[cls] = write
    return write


def compile_writer(cls: type[Any]) -> Callable[[Any], bytes] | None:
    """A function encoding an entity of ``cls``; ``None`` if kio must do it."""
    try:
        write = _entity(cls)
    except (_Unsupported, KeyError, ValueError):
        return None

    def encode(entity: Any) -> bytes:
        out = bytearray()
        write(out, entity)
        return bytes(out)

    return encode
