"""Bounded big-endian readers and writers for workgroup's metadata blobs.

Every read checks the remaining length first, so truncated or garbage input
raises :class:`~workgroup.errors.ProtocolError` instead of ``struct.error``,
``IndexError`` or a huge allocation.
"""

from __future__ import annotations

import functools
import struct
from itertools import repeat

from workgroup.errors import ProtocolError
from workgroup.types import Key, Resource

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

_KEY_INT = 0
_KEY_STR = 1
#: Keys read in one step at most (:meth:`Reader._int_keys`).
_INT_RUN = 256


@functools.lru_cache(maxsize=_INT_RUN)
def _int_run(n: int) -> struct.Struct:
    """``n`` int keys: each its tag and its value."""
    return struct.Struct(">" + "Bq" * n)


class Writer:
    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def u8(self, value: int) -> None:
        self._parts.append(bytes((value,)))

    def i16(self, value: int) -> None:
        self._parts.append(_I16.pack(value))

    def i32(self, value: int) -> None:
        self._parts.append(_I32.pack(value))

    def i64(self, value: int) -> None:
        self._parts.append(_I64.pack(value))

    def f64(self, value: float) -> None:
        self._parts.append(_F64.pack(value))

    def raw(self, value: bytes) -> None:
        self._parts.append(value)

    def u16s(self, values: list[int] | tuple[int, ...]) -> None:
        """Unsigned 16-bit integers, without a length (the caller writes it)."""
        self._parts.append(struct.pack(f">{len(values)}H", *values))

    def uvarint(self, value: int) -> None:
        """An unsigned integer below 2**64 in LEB128 (7 bits a byte, low first)."""
        if not 0 <= value < 1 << 64:
            raise ValueError(f"uvarint {value} is outside [0, 2**64)")
        out = bytearray()
        while value > 0x7F:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self._parts.append(bytes(out))

    def bytes_(self, value: bytes) -> None:
        self.i32(len(value))
        self._parts.append(value)

    def string(self, value: str) -> None:
        self.bytes_(value.encode("utf-8"))

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self.i32(-1)
        else:
            self.string(value)

    def strings(self, values: list[str] | tuple[str, ...]) -> None:
        self.i32(len(values))
        for value in values:
            self.string(value)

    def key(self, key: Key) -> None:
        if isinstance(key, bool) or not isinstance(key, int | str):
            raise TypeError(f"resource keys are str or int, not {type(key).__name__}")
        if isinstance(key, int):
            self.u8(_KEY_INT)
            self.i64(key)
        else:
            self.u8(_KEY_STR)
            self.string(key)

    def resources(self, resources: tuple[Resource, ...] | list[Resource]) -> None:
        """Resources grouped by kind (kinds repeat rarely, so this keeps blobs small)."""
        by_kind: dict[str, list[Key]] = {}
        for kind, key in resources:
            by_kind.setdefault(kind, []).append(key)
        self.i32(len(by_kind))
        for kind, keys in by_kind.items():
            self.string(kind)
            self.i32(len(keys))
            for key in keys:
                self.key(key)


class Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._data) - self._pos

    def _take(self, size: int) -> memoryview:
        if size < 0 or size > self.remaining:
            raise ProtocolError(
                f"{self._what} is truncated or corrupt: needs {size} bytes at offset "
                f"{self._pos}, {self.remaining} left"
            )
        chunk = self._data[self._pos : self._pos + size]
        self._pos += size
        return chunk

    def u8(self) -> int:
        return self._take(1)[0]

    def i16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def i64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def f64(self) -> float:
        value: float = _F64.unpack(self._take(8))[0]
        return value

    def u16s(self, n: int) -> tuple[int, ...]:
        """``n`` unsigned 16-bit integers (see :meth:`Writer.u16s`)."""
        values: tuple[int, ...] = struct.unpack(f">{n}H", self._take(2 * n))
        return values

    def uvarint(self) -> int:
        """An unsigned LEB128 integer (see :meth:`Writer.uvarint`): at most 10 bytes,
        below 2**64, in its shortest form."""
        data, pos = self._data, self._pos
        value = shift = 0
        for offset in range(10):
            if pos + offset >= len(data):
                break
            byte = data[pos + offset]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                if (byte == 0 and offset > 0) or value >= 1 << 64:
                    raise ProtocolError(f"{self._what} is corrupt: bad varint at offset {pos}")
                self._pos = pos + offset + 1
                return value
            shift += 7
        raise ProtocolError(f"{self._what} is truncated or corrupt: unended varint at offset {pos}")

    def skip(self, size: int) -> None:
        self._take(size)

    def rest(self) -> bytes:
        return bytes(self._take(self.remaining))

    def count(self, min_item_size: int) -> int:
        """An array length, checked against the bytes left (no huge allocations)."""
        n = self.i32()
        if n < 0 or n * min_item_size > self.remaining:
            raise ProtocolError(
                f"{self._what} is corrupt: array of {n} items at offset {self._pos}"
            )
        return n

    def bytes_(self) -> bytes:
        return bytes(self._take(self.i32()))

    def string(self) -> str:
        raw = self._take(self.i32())
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{self._what} is corrupt: invalid UTF-8 string") from exc

    def nullable_string(self) -> str | None:
        size = self.i32()
        if size == -1:
            return None
        self._pos -= 4
        return self.string()

    def strings(self) -> tuple[str, ...]:
        return tuple(self.string() for _ in range(self.count(4)))

    def key(self) -> Key:
        data, pos = self._data, self._pos
        if pos + 9 <= len(data) and data[pos] == _KEY_INT:
            # The common case, read in one step: a big group's assignments hold
            # 100,000 of them, and every outside reader decodes them each refresh.
            self._pos = pos + 9
            value: int = _I64.unpack_from(data, pos + 1)[0]
            return value
        tag = self.u8()
        if tag == _KEY_INT:
            return self.i64()
        if tag == _KEY_STR:
            return self.string()
        raise ProtocolError(f"{self._what} is corrupt: unknown key tag {tag}")

    def resources(self) -> tuple[Resource, ...]:
        out: list[Resource] = []
        for _ in range(self.count(8)):
            kind = self.string()
            left = self.count(5)
            while left:
                run = min(left, _INT_RUN)
                keys = self._int_keys(run)
                if keys is None:
                    out.extend((kind, self.key()) for _ in range(run))
                else:
                    out.extend(zip(repeat(kind), keys))
                left -= run
        return tuple(out)

    def _int_keys(self, n: int) -> tuple[int, ...] | None:
        """The next ``n`` keys if all are ints, read in one step (a big group's
        assignments hold 100,000 of them, and every outside reader decodes them
        each refresh); ``None``, reading nothing, if any is not."""
        pos, end = self._pos, self._pos + 9 * n
        if end > len(self._data):
            return None
        fields = _int_run(n).unpack_from(self._data, pos)
        if fields[0::2].count(_KEY_INT) != n:
            return None
        self._pos = end
        values: tuple[int, ...] = fields[1::2]
        return values
