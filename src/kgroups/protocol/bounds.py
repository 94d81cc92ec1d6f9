"""Every length in a message checked against the bytes that remain, before kio reads it.

kio's native reader reserves room for an array's elements (8 bytes each) as soon as it has
read the array's count, before it reads the first element: a 9-byte request claiming two
billion group ids asks the allocator for 16 GiB, and when the allocation fails the process
aborts (Rust's out-of-memory handler), taking every group's coordinator with it. Whether it
fails depends on the host's overcommit setting, which a server must not depend on. Kafka's
generated readers refuse such input first: an array (or compact array) whose count is
larger than the bytes remaining, and a string longer than 32,767 bytes, raise before
anything is allocated. `check(cls, buf, offset)` applies exactly those rules: it walks the
message's wire layout, field by field, as kio is about to read it (kio's own schema: the
field types, which fields are tagged, flexible versions), and raises `LengthOutOfBounds`
at the first count or length that breaks them. Nothing is built while walking.

Three more rules, stricter than kio and as strict as Kafka: a non-nullable array may not
be null (kio reads it as None, where every handler iterates a tuple; Kafka's readers
refuse it), a tagged field's value must end where its declared size says (kio reads a
known tag's value without looking at the size), and a tagged field's size must fit in
the message. Unknown tags are skipped by their size, as
`tags.read_entity` skips them.

The walk is compiled once per message class into nested closures. A class with no array
anywhere (a Heartbeat, say) is not walked at all while the message is no longer than
the longest legal string: no count can be out of bounds, and no string can be too long.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

MAX_STRING_BYTES = 0x7FFF
"""Kafka's limit for a string (`Readable.readString`: "had invalid length")."""

_FIXED = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Marks = list[tuple[str, int, int]]
"""Where a message's lengths are: (what, first byte, byte after), in wire order."""
Walk = Callable[[Any, int, int, "Marks | None"], int]
"""(buffer, offset, end, marks) -> the offset after the value; raises LengthOutOfBounds.
With a `marks` list, every length prefix's place is appended to it."""


class LengthOutOfBounds(ValueError):
    """A count or length that the bytes remaining cannot hold, or too long a string."""


def check(cls: type, buf: bytes | memoryview, offset: int) -> None:
    """Raise `LengthOutOfBounds` unless every length in the `cls` message at `offset` is
    within bounds. The message runs to the end of `buf`."""
    walk, arrays = _compiled(cls)
    end = len(buf)
    if arrays or end - offset > MAX_STRING_BYTES:
        walk(buf, offset, end, None)


def marks(cls: type, buf: bytes | memoryview, offset: int) -> Marks:
    """Where every length prefix of the (valid) `cls` message at `offset` is: what a
    structure-aware fuzzer mutates. Kinds: string, bytes, array, struct (a nullable
    struct's marker), tags (a tagged-field count), tag, size (a tagged field's size)."""
    found: Marks = []
    _compiled(cls)[0](buf, offset, len(buf), found)
    return found


@cache
def _compiled(cls: type) -> tuple[Walk, bool]:
    """The walk for `cls` and whether any array occurs in it (tagged fields included)."""
    arrays: list[bool] = []
    return _entity(cls, nullable=False, arrays=arrays), bool(arrays)


def read_uvarint(buf: Any, offset: int, end: int | None = None) -> tuple[int, int]:
    """(value, next offset) of the unsigned varint at `offset` (at most five bytes, as
    Kafka's), read no further than `end` (default: the buffer's end); LengthOutOfBounds
    (a ValueError) if it is bad."""
    return _uvarint(buf, offset, len(buf) if end is None else end)


def _uvarint(buf: Any, o: int, end: int) -> tuple[int, int]:
    if o < end and buf[o] < 0x80:  # the usual one-byte varint
        return buf[o], o + 1
    shift = result = 0
    while True:
        if o >= end or shift > 28:
            raise LengthOutOfBounds(f"bad unsigned varint at byte {o}")
        byte = buf[o]
        o += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, o
        shift += 7


def _need(o: int, n: int, end: int, what: str) -> int:
    if n > end - o:
        raise LengthOutOfBounds(f"{what} of {n} bytes at byte {o}: only {end - o} remain")
    return o + n


def _fixed(size: int) -> Walk:
    def walk(buf: Any, o: int, end: int, marks: Marks | None) -> int:
        return _need(o, size, end, "a field")

    return walk


def _string(flexible: bool, is_string: bool) -> Walk:
    """A (compact or legacy) string or bytes value, nullable or not: null is accepted
    here, kio decides whether the field may be null."""
    limit = MAX_STRING_BYTES if is_string else None
    what = "a string" if is_string else "bytes"

    kind = "string" if is_string else "bytes"

    def walk(buf: Any, o: int, end: int, marks: Marks | None) -> int:
        start = o
        if flexible:
            n, o = _uvarint(buf, o, end)
            n -= 1
        elif is_string:
            n = _I16.unpack_from(buf, _need(o, 2, end, "a string length") - 2)[0]
            o += 2
        else:
            n = _I32.unpack_from(buf, _need(o, 4, end, "a bytes length") - 4)[0]
            o += 4
        if marks is not None:
            marks.append((kind, start, o))
        if n < 0:
            return o  # null (or a negative length, which kio refuses)
        if limit is not None and n > limit:
            raise LengthOutOfBounds(f"{what} of {n} bytes: Kafka's strings hold {limit}")
        return _need(o, n, end, what)

    return walk


def _array(flexible: bool, element: Walk, nullable: bool) -> Walk:
    def walk(buf: Any, o: int, end: int, marks: Marks | None) -> int:
        start = o
        if flexible:
            n, o = _uvarint(buf, o, end)
            n -= 1
        else:
            n = _I32.unpack_from(buf, _need(o, 4, end, "an array count") - 4)[0]
            o += 4
        if marks is not None:
            marks.append(("array", start, o))
        if n < 0:
            if not nullable:  # kio would read None where every handler expects a tuple
                raise LengthOutOfBounds(f"a non-nullable array at byte {start} is null")
            return o
        if n > end - o:
            raise LengthOutOfBounds(
                f"an array of {n} elements at byte {o}: only {end - o} bytes remain"
            )
        for _ in range(n):
            o = element(buf, o, end, marks)
        return o

    return walk


def _field(owner: type, field: Any, arrays: list[bool]) -> Walk:
    flexible = bool(owner.__flexible__)  # type: ignore[attr-defined]
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        return _entity(kind.type_, nullable=is_optional(field), arrays=arrays)
    if isinstance(kind, EntityTupleField):
        arrays.append(True)
        element = _entity(kind.type_, nullable=False, arrays=arrays)
        return _array(flexible, element, is_optional(field))
    kafka_type = get_schema_field_type(field)
    size = _FIXED.get(kafka_type)
    if size is not None:
        element = _fixed(size)
    elif kafka_type in ("string", "bytes", "records"):
        element = _string(flexible, kafka_type == "string")
    else:
        raise TypeError(f"{owner.__name__}.{field.name}: no bounds for kafka_type {kafka_type}")
    if isinstance(kind, PrimitiveTupleField):
        arrays.append(True)
        return _array(flexible, element, is_optional(field))
    return element


def _fixed_size(field: Any) -> int | None:
    """The size of a field that is one fixed-size value (not an array, not a struct)."""
    if field.metadata.get("kafka_type") is None or classify_field(field).is_array:
        return None
    return _FIXED.get(get_schema_field_type(field))


def _entity(cls: type, *, nullable: bool, arrays: list[bool]) -> Walk:
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    regular: list[Walk] = []
    tagged: dict[int, Walk] = {}
    fixed = 0  # consecutive fixed-size fields are skipped in one step
    for field in fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = _field(cls, field, arrays)
            continue
        size = _fixed_size(field)
        if size is not None:
            fixed += size
            continue
        if fixed:
            regular.append(_fixed(fixed))
            fixed = 0
        regular.append(_field(cls, field, arrays))
    if fixed:
        regular.append(_fixed(fixed))
    steps = tuple(regular)

    def walk(buf: Any, o: int, end: int, marks: Marks | None) -> int:
        if nullable:
            o = _need(o, 1, end, "a struct marker")
            if marks is not None:
                marks.append(("struct", o - 1, o))
            if buf[o - 1] == 0xFF:
                return o
        for step in steps:
            o = step(buf, o, end, marks)
        if not flexible:
            return o
        start = o
        count, o = _uvarint(buf, o, end)
        if marks is not None:
            marks.append(("tags", start, o))
        if count > end - o:
            raise LengthOutOfBounds(f"{count} tagged fields at byte {o}: only {end - o} remain")
        for _ in range(count):
            at = o
            tag, o = _uvarint(buf, o, end)
            if marks is not None:
                marks.append(("tag", at, o))
            at = o
            size, o = _uvarint(buf, o, end)
            if marks is not None:
                marks.append(("size", at, o))
            stop = _need(o, size, end, f"tagged field {tag}")
            value = tagged.get(tag)
            if value is not None and value(buf, o, stop, marks) != stop:
                raise LengthOutOfBounds(f"tagged field {tag} does not fill its {size} bytes")
            o = stop
        return o

    return walk
