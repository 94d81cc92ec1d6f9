"""Reading flexible Kafka messages that carry tagged fields we do not know.

Kafka's protocol lets a newer peer add tagged fields to a version that already exists
(KIP-482), and its rule is that a reader skips tags it does not know. kio instead raises
`KeyError("Unknown tagged field tag: N")`, which would make the coordinator drop a newer
client's connection, or the member drop a newer broker's answer. So `read_entity` reads
with kio as usual (the fast path) and, only when kio meets an unknown tag, rewrites the
bytes without the unknown tags, walking kio's schema, and reads them again.

The walk copies every non-tagged field byte for byte, recurses into structs and arrays of
structs (each has its own tagged-field section), and keeps the known tags' bytes as they
are: a tag's value is size-prefixed, so it never has to be understood to be skipped.
"""

from __future__ import annotations

from dataclasses import Field, fields
from typing import Any

from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._parse import get_field_reader

from kgroups.protocol import bounds
from kgroups.protocol.bounds import read_uvarint

__all__ = ["read_entity", "read_uvarint", "reader_for", "write_uvarint"]

_UNKNOWN_TAG = "Unknown tagged field"
_READERS: dict[type, Any] = {}


def reader_for(cls: type) -> Any:
    """kio's reader for `cls`, built once (building one walks the schema)."""
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_entity(cls: type, buf: bytes | memoryview, offset: int) -> Any:
    """The `cls` message at `offset` of `buf`, unknown tagged fields skipped as Kafka does.

    Every count and length is checked against the bytes remaining first
    (`bounds.check`, raising `LengthOutOfBounds`); anything else kio cannot read raises
    what kio raised."""
    bounds.check(cls, buf, offset)
    reader = reader_for(cls)
    try:
        return reader(buf, offset)[0]
    except KeyError as exc:
        if _UNKNOWN_TAG not in str(exc):
            raise
    view = memoryview(buf)
    out = bytearray()
    _copy_known(cls, view, offset, out)
    return reader(bytes(out), 0)[0]


def _copy_known(cls: type, buf: memoryview, offset: int, out: bytearray) -> int:
    """Append the `cls` entity at `offset` to `out` without unknown tags; its end offset."""
    known: set[int] = set()
    for field in fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            known.add(int(tag))
            continue
        offset = _copy_field(cls, field, buf, offset, out)
    return _copy_tags(known, buf, offset, out)


def _copy_field(cls: type, field: Field[Any], buf: memoryview, offset: int, out: bytearray) -> int:
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        if is_optional(field):  # a nullable struct: int8 -1 for null, 1 then the struct
            marker = buf[offset]
            out.append(marker)
            offset += 1
            if marker == 0xFF:
                return offset
        return _copy_known(kind.type_, buf, offset, out)
    if isinstance(kind, EntityTupleField):
        length, offset_after = read_uvarint(buf, offset)  # compact array: n + 1, 0 = null
        out += buf[offset:offset_after]
        offset = offset_after
        for _ in range(max(length - 1, 0)):
            offset = _copy_known(kind.type_, buf, offset, out)
        return offset
    _, size = get_field_reader(cls, field, False, False)(buf, offset)
    out += buf[offset : offset + size]
    return int(offset + size)


def _copy_tags(known: set[int], buf: memoryview, offset: int, out: bytearray) -> int:
    count, offset = read_uvarint(buf, offset)
    kept: list[memoryview] = []
    for _ in range(count):
        start = offset
        tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        offset += size
        if offset > len(buf):
            raise ValueError("tagged field runs past the message")
        if tag in known:
            kept.append(buf[start:offset])
    out += write_uvarint(len(kept))
    for entry in kept:
        out += entry
    return offset
