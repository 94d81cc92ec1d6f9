"""Lengths are checked before kio allocates (issue 23, finding 1).

On main before this check, `parse_request` of a 19-byte DescribeGroups claiming two
billion group ids aborted the process (kio reserved 16 GiB); the subprocess test below
fails there (the child dies with SIGABRT) and passes now. The property tests prove the
check never refuses what a peer may legally send: every request and response class of
every API and version we advertise, with random values, round-trips through it.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from kgroups.protocol import bounds
from kgroups.protocol.apis import SUPPORTED, request_class, response_class
from kgroups.protocol.frames import MalformedFrame, parse_request, writer_for
from kgroups.protocol.tags import read_entity, write_uvarint

st.register_type_strategy(Records, st.binary(max_size=24))  # type: ignore[arg-type]

VERSIONS = sorted(
    (key, v) for key, s in SUPPORTED.items() for v in range(s.min_version, s.max_version + 1)
)
CLASSES = sorted(
    {request_class(k, v) for k, v in VERSIONS} | {response_class(k, v) for k, v in VERSIONS},
    key=lambda c: (c.__module__, c.__qualname__),
)


def encoded(entity: object) -> bytes:
    out = io.BytesIO()
    writer_for(type(entity))(out, entity)
    return out.getvalue()


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_legal_message_of_every_advertised_version_passes_the_check(
    data: st.DataObject,
) -> None:
    cls = data.draw(st.sampled_from(CLASSES))
    entity = data.draw(st.from_type(cls))
    wire = encoded(entity)
    bounds.check(cls, wire, 0)
    try:
        decoded = read_entity(cls, wire, 0)
    except ValueError as exc:
        # kio writes any timedelta hypothesis makes, but reads back only those its
        # millisecond arithmetic can hold: not a message a peer could send to be read.
        assume("timedelta" not in str(exc))
        raise
    assert decoded == entity


def describe_groups_v0(count: int) -> bytes:
    return struct.pack(">hhih", 15, 0, 1, 1) + b"x" + struct.pack(">i", count)


def test_a_count_beyond_the_bytes_remaining_is_refused_before_kio_allocates() -> None:
    with pytest.raises(MalformedFrame, match="array of 2147483647 elements"):
        parse_request(describe_groups_v0(2**31 - 1))
    # exactly as many one-byte... elements as bytes remain is not refused by the count
    ok = struct.pack(">hhih", 15, 0, 1, 1) + b"x" + struct.pack(">ih", 1, 1) + b"g"
    assert parse_request(ok).body.groups == ("g",)


def test_the_process_survives_an_address_space_limit() -> None:
    """The regression itself, in a child with a 1 GiB address-space limit: kio's
    reservation would abort it (SIGABRT) without the check."""
    code = textwrap.dedent(f"""
        import resource, struct
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from kgroups.protocol.frames import MalformedFrame, parse_request
        for count in (2**31 - 1, 2**27, 10**6):
            try:
                parse_request({describe_groups_v0(0)[:-4]!r} + struct.pack(">i", count))
            except MalformedFrame:
                pass
        print("alive")
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "alive"


def test_a_string_longer_than_kafkas_limit_is_refused_and_the_longest_legal_one_is_not() -> None:
    from kio.schema.heartbeat.v4.request import HeartbeatRequest

    def heartbeat(group_len: int) -> bytes:
        group = b"g" * group_len
        return write_uvarint(group_len + 1) + group + b"\0\0\0\1" + b"\2m" + b"\0" + b"\0"

    assert read_entity(HeartbeatRequest, heartbeat(0x7FFF), 0).group_id == "g" * 0x7FFF
    with pytest.raises(bounds.LengthOutOfBounds, match="32767"):
        bounds.check(HeartbeatRequest, heartbeat(0x8000), 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_array_count_and_length_set_past_the_end_is_refused(data: st.DataObject) -> None:
    """Structure-aware: take a legal message, set one of its counts or lengths to more
    than the bytes that follow it: it is refused, an array count by the check (kio would
    reserve first), a string or bytes length by kio or the check."""
    cls = data.draw(st.sampled_from(CLASSES))
    wire = encoded(data.draw(st.from_type(cls)))
    places = [m for m in bounds.marks(cls, wire, 0) if m[0] in ("array", "string", "bytes")]
    if not places:
        return
    kind, start, stop = data.draw(st.sampled_from(places))
    remaining = len(wire) - stop
    huge = data.draw(st.sampled_from([remaining + 1, 2**31 - 1, 0x8000 + remaining]))
    width = stop - start
    if width == 2:
        huge = min(huge, 0x7FFF)
        if huge <= remaining:
            return  # a legacy string can claim at most 32767: not past the end here
        prefix = struct.pack(">h", huge)
    elif width == 4:
        prefix = struct.pack(">i", huge)
    else:
        prefix = write_uvarint(huge + 1)
    mutated = wire[:start] + prefix + wire[stop:]
    if kind == "array":  # the check itself refuses it, before kio reserves anything
        with pytest.raises(bounds.LengthOutOfBounds):
            bounds.check(cls, mutated, 0)
    with pytest.raises(Exception):  # noqa: B017  (kio refuses a short string itself)
        read_entity(cls, mutated, 0)
