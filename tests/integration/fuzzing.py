"""A structure-aware request fuzzer: valid requests of every API and version the
coordinator advertises, then mutated where a parser is most likely to trust its input.

`valid_request(rng)` builds a random, well-formed request of a random (API, version) from
kio's schema (random values of each field's Kafka type, 0-3 elements per array, nulls
where a field is nullable), encodes it with its request header, and says where its
lengths are (`bounds.marks`). `mutate(request, rng)` then applies one to three of:

* a length, count or tagged-field size set to what no parser should believe (two billion,
  -2, one more than the bytes left, past Kafka's string limit...);
* a varint made overlong or left unterminated;
* an unknown tagged field added, or a known one made to lie about its size;
* the frame cut short, a random tail added, bytes flipped;
* the header's API version or client-id length changed.

Everything is drawn from one `random.Random`, so a seed replays a run exactly.
"""

from __future__ import annotations

import datetime
import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
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

from kgroups.protocol import bounds
from kgroups.protocol.apis import SUPPORTED, ApiKey, request_class
from kgroups.protocol.build import build
from kgroups.protocol.frames import writer_for
from kgroups.protocol.tags import write_uvarint

VERSIONS = sorted(
    (key, v) for key, s in SUPPORTED.items() for v in range(s.min_version, s.max_version + 1)
)
NAMES = ("fuzz", "fuzz-a", "fuzz-b", "t", "", "fuzz-" + "x" * 40)
"""Group ids, topic names, member ids... a victim's names are never among them, so a
well-formed request cannot legitimately disturb the victim's group."""
_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "timedelta_i32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "timedelta_i64": (-(2**40), 2**40),
}


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    version: int
    payload: bytes
    """The frame without its size prefix: header, then body."""
    body_at: int
    """Where the body starts in `payload`."""
    marks: bounds.Marks
    """The body's length prefixes, offsets relative to the body."""

    def frame(self) -> bytes:
        return struct.pack(">i", len(self.payload)) + self.payload


def _number(kafka_type: str, rng: random.Random) -> int:
    low, high = _RANGES[kafka_type]
    pick = rng.random()
    if pick < 0.5:
        return rng.choice([0, 1, -1, 2, 100]) if low < 0 else rng.choice([0, 1, 2, 100])
    if pick < 0.7:
        return rng.choice([low, high])
    return rng.randint(max(low, -1000), min(high, 100_000))


def _primitive(kafka_type: str, optional: bool, rng: random.Random) -> Any:
    if optional and rng.random() < 0.2:
        return None
    if kafka_type in _RANGES:
        return _number(kafka_type, rng)
    if kafka_type == "bool":
        return rng.random() < 0.5
    if kafka_type == "float64":
        return rng.choice([0.0, 1.5, -2.0])
    if kafka_type == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if kafka_type == "string":
        return rng.choice(NAMES)
    if kafka_type in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 1, 4, 16, 40]))
    if kafka_type == "error_code":
        return 0
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(rng.randint(0, 2**31), tz=datetime.UTC)
    raise TypeError(f"no generator for {kafka_type}")


def random_values(cls: type, rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """Plain values for every field of `cls` (nested dicts and lists), for `build`."""
    values: dict[str, Any] = {}
    for field in fields(cls):  # type: ignore[arg-type]
        if get_field_tag(field) is not None and rng.random() < 0.5:
            continue  # a tagged field left at its default
        kind = classify_field(field)
        optional = is_optional(field)
        count = rng.choice([0, 1, 1, 2, 3]) if depth < 3 else 0
        if isinstance(kind, EntityField):
            values[field.name] = (
                None
                if optional and rng.random() < 0.2
                else random_values(kind.type_, rng, depth + 1)
            )
        elif isinstance(kind, EntityTupleField):
            values[field.name] = [random_values(kind.type_, rng, depth + 1) for _ in range(count)]
        else:
            kafka_type = get_schema_field_type(field)
            if isinstance(kind, PrimitiveTupleField):
                values[field.name] = [_primitive(kafka_type, False, rng) for _ in range(count)]
            else:
                values[field.name] = _primitive(kafka_type, optional, rng)
    return values


def encode(key: int, version: int, body: Any, correlation_id: int) -> Request:
    import io

    cls = type(body)
    out = io.BytesIO()
    writer_for(cls)(out, body)
    raw = out.getvalue()
    header = struct.pack(">hhih", key, version, correlation_id, 4) + b"fuzz"
    if cls.__flexible__:  # type: ignore[attr-defined]
        header += b"\0"
    return Request(key, version, header + raw, len(header), bounds.marks(cls, raw, 0))


def valid_request(rng: random.Random, correlation_id: int) -> Request:
    """A well-formed request of a random advertised API and version."""
    while True:
        key, version = rng.choice(VERSIONS)
        if key == ApiKey.PRODUCE and rng.random() < 0.7:
            continue  # refused anyway: spend the budget elsewhere
        cls = request_class(key, version)
        try:
            body = build(cls, random_values(cls, rng))
            return encode(key, version, body, correlation_id)
        except (TypeError, ValueError, OverflowError, struct.error):
            continue  # a value its field cannot hold (a schema corner): draw again


# -- mutations ----------------------------------------------------------------------------


def _uvarint_bytes(value: int) -> bytes:
    return write_uvarint(value & 0xFFFFFFFF)


def _lie_about_length(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    marks = [m for m in req.marks if m[0] in ("string", "bytes", "array", "size", "tags")]
    if not marks:
        return _flip(req, payload, rng)
    kind, start, stop = rng.choice(marks)
    start, stop = start + req.body_at, stop + req.body_at
    remaining = len(payload) - stop
    value = rng.choice([2**31 - 1, 2**28, remaining + 1, remaining * 2 + 7, 0x8000, 0x7FFF,
                        -2, -1, 0, 2**32 - 1])  # fmt: skip
    width = stop - start
    if width == 2:
        prefix = struct.pack(">h", max(-(2**15), min(value, 2**15 - 1)))
    elif width == 4:
        prefix = struct.pack(">i", max(-(2**31), min(value, 2**31 - 1)))
    else:  # a varint: compact lengths carry n + 1
        prefix = _uvarint_bytes(value + (1 if kind in ("string", "bytes", "array") else 0))
    return payload[:start] + prefix + payload[stop:]


def _break_varint(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    marks = [m for m in req.marks if m[2] - m[1] not in (2, 4)]  # varints only
    if not marks:
        return _truncate(req, payload, rng)
    _, start, stop = rng.choice(marks)
    start, stop = start + req.body_at, stop + req.body_at
    broken = rng.choice([b"\xff" * 6, b"\x80" * 5 + b"\x01", b"\xff\xff\xff\xff\x0f", b"\x80"])
    return payload[:start] + broken + payload[stop:]


def _add_tag(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    tags = [m for m in req.marks if m[0] == "tags"]
    if not tags:
        return _tail(req, payload, rng)
    _, start, stop = tags[-1]  # the top-level section: the body's last bytes
    start, stop = start + req.body_at, stop + req.body_at
    count = payload[start]
    if count >= 0x7F:
        return _tail(req, payload, rng)
    data = rng.randbytes(rng.choice([0, 1, 8]))
    size = rng.choice([len(data), len(data) + 5, 2**30])
    tag = rng.choice([0, 1, 3, 99, 10_003, 2**28])
    extra = write_uvarint(tag) + _uvarint_bytes(size) + data
    return payload[:start] + bytes([count + 1]) + payload[stop:] + extra


def _truncate(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    return payload[: rng.randint(0, max(len(payload) - 1, 0))]


def _tail(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    return payload + rng.randbytes(rng.randint(1, 64))


def _flip(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        if payload:
            at = rng.randrange(len(payload))
            payload[at] ^= 1 << rng.randrange(8)
    return payload


def _header(req: Request, payload: bytearray, rng: random.Random) -> bytearray:
    if rng.random() < 0.5:
        spec = SUPPORTED[req.api_key]
        version = rng.choice([-1, spec.max_version + 1, spec.max_version + 50, 32767])
        struct.pack_into(">h", payload, 2, version)
    elif len(payload) >= 10:
        struct.pack_into(">h", payload, 8, rng.choice([32767, -2, 200, len(payload)]))
    return payload


MUTATIONS: tuple[Callable[[Request, bytearray, random.Random], bytearray], ...] = (
    _lie_about_length,
    _lie_about_length,
    _lie_about_length,
    _break_varint,
    _add_tag,
    _truncate,
    _tail,
    _flip,
    _header,
)


def mutate(req: Request, rng: random.Random) -> bytes:
    """The request's frame (size prefix included), mutated one to three times."""
    payload = bytearray(req.payload)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        try:
            payload = rng.choice(MUTATIONS)(req, payload, rng)
        except (IndexError, struct.error):  # an earlier mutation moved or cut what they use
            payload = _flip(req, payload, rng)
    return struct.pack(">i", len(payload)) + bytes(payload)
