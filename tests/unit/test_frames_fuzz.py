"""No bytes make request parsing fail other than with its two defined errors.

The server closes the connection on `MalformedFrame`, and on `UnsupportedRequest` once
earlier answers are written; any other exception would be a bug reachable by any client.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.coordinator.wire import DECODERS, decode
from kgroups.protocol.apis import SUPPORTED
from kgroups.protocol.frames import MalformedFrame, UnsupportedRequest, parse_request

KNOWN = sorted(
    (key, v) for key, s in SUPPORTED.items() for v in range(s.min_version, s.max_version + 1)
)


def check(frame: bytes) -> None:
    try:
        request = parse_request(frame)
        if request.api_key in DECODERS:
            decode(request.api_key, request.api_version, request.body)
    except (MalformedFrame, UnsupportedRequest):
        return


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes(frame: bytes) -> None:
    check(frame)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(KNOWN), st.binary(max_size=200), st.integers(-1, 40))
def test_a_valid_header_over_a_random_body(
    api: tuple[int, int], body: bytes, client_len: int
) -> None:
    key, version = api
    header = struct.pack(">hhih", key, version, 7, client_len) + b"x" * max(client_len, 0)
    check(header + body)


# -- well-formed requests with arbitrary values, through the real core ------------------

CORE = [(key, v) for key, v in KNOWN if key in DECODERS]


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_arbitrary_well_formed_requests_never_trip_a_handler_bug(data: st.DataObject) -> None:
    """Random field values (negative timeouts, odd ids, empty lists, missing groups...)
    get answers, never a HandlerFailed."""
    from kgroups.coordinator.core.msg_group import RequestContext
    from kgroups.protocol.apis import request_class
    from tests.core_context import CoreContext

    ctx = CoreContext()
    ctx.stable_group(n=2)
    ctx.create_topic("t", 3)
    for ref in range(1000, 1000 + data.draw(st.integers(1, 6))):
        key, version = data.draw(st.sampled_from(CORE))
        body = data.draw(st.from_type(request_class(key, version)))
        try:
            request = decode(key, version, body)
        except MalformedFrame:
            continue
        effects = ctx.coordinator.handle(
            RequestContext(ref, version, "fuzz", "/h"), request, now_ms=ctx.now_ms
        )
        ctx.store.append(effects.records)
        ctx.sleep(data.draw(st.integers(0, 20_000)))
