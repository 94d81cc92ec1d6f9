"""Tagged fields we do not know are skipped, as Kafka's readers do (KIP-482).

A newer client may add tagged fields to a request version we already serve, and a newer
broker to a response our member reads. kio alone raises on such a tag. The tests find
every tagged-field section of a message by asking kio itself: a byte where an injected
tag makes kio complain about exactly that tag is a real section. Then each section in
turn carries an unknown tag, and the message must still read back as it was written, for
every flexible version of every request we serve and every response we send.
"""

from __future__ import annotations

import io
import re
import uuid
from typing import Any

import pytest
from kio.schema.api_versions.v3 import response as av3
from kio.schema.consumer_group_heartbeat.v0 import response as cgh0

from kgroups.coordinator.wire import encode
from kgroups.protocol.apis import ApiKey, request_class, response_class
from kgroups.protocol.build import build
from kgroups.protocol.client import encode_request
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.frames import parse_request, writer_for
from kgroups.protocol.tags import read_entity, reader_for, write_uvarint
from tests.unit.test_wire import FULL_REQUESTS, RESPONSES, VERSIONS

UNKNOWN = 9999
"""Far above any tag Kafka's schemas use."""


def _encoded(obj: Any) -> bytes:
    buf = io.BytesIO()
    writer_for(type(obj))(buf, obj)
    return buf.getvalue()


def _with_tag(data: bytes, at: int, tag: int = UNKNOWN, value: bytes = b"\xab\xcd") -> bytes:
    """`data` with its empty tagged-field section at `at` carrying one tag."""
    assert data[at] == 0
    section = write_uvarint(1) + write_uvarint(tag) + write_uvarint(len(value)) + value
    return data[:at] + section + data[at + 1 :]


def _tag_sections(cls: type, data: bytes) -> list[int]:
    """Offsets of the empty tagged-field sections of `data`, as kio itself locates them."""
    found = []
    for at, byte in enumerate(data):
        if byte != 0:
            continue
        try:
            reader_for(cls)(_with_tag(data, at), 0)
        except KeyError as exc:
            if re.search(rf"\btag: {UNKNOWN}\b", str(exc)):
                found.append(at)
        except Exception:  # noqa: BLE001 - kio raises many types; the bytes were not a section
            continue
    return found


def _assert_reads_with_unknown_tags(obj: Any) -> int:
    cls = type(obj)
    data = _encoded(obj)
    sections = _tag_sections(cls, data)
    assert sections, f"{cls.__module__}: no tagged-field section found"
    for at in sections:
        assert read_entity(cls, _with_tag(data, at), 0) == obj, (cls.__module__, at)
    everywhere = data
    for at in reversed(sections):
        everywhere = _with_tag(everywhere, at)
    assert read_entity(cls, everywhere, 0) == obj
    return len(sections)


def _flexible(cls: type) -> bool:
    return bool(cls.__flexible__)  # type: ignore[attr-defined]


FLEXIBLE_REQUESTS = [(k, v) for k, v in VERSIONS if _flexible(request_class(k, v))]
FLEXIBLE_RESPONSES = [(k, v) for k, v in VERSIONS if _flexible(response_class(k, v))]


@pytest.mark.parametrize(("key", "version"), FLEXIBLE_REQUESTS)
def test_a_request_with_unknown_tags_anywhere_reads_as_sent(key: int, version: int) -> None:
    _assert_reads_with_unknown_tags(build(request_class(key, version), FULL_REQUESTS[key]))


@pytest.mark.parametrize(("key", "version"), FLEXIBLE_RESPONSES)
def test_a_response_with_unknown_tags_anywhere_reads_as_sent(key: int, version: int) -> None:
    _assert_reads_with_unknown_tags(encode(key, version, RESPONSES[key]))


def test_nested_structs_and_arrays_each_have_their_section_found_and_skipped() -> None:
    join: Any = build(request_class(ApiKey.JOIN_GROUP, 9), FULL_REQUESTS[ApiKey.JOIN_GROUP])
    assert _assert_reads_with_unknown_tags(join) == 2  # the request and its one protocol
    commit: Any = build(request_class(ApiKey.OFFSET_COMMIT, 9), FULL_REQUESTS[ApiKey.OFFSET_COMMIT])
    assert _assert_reads_with_unknown_tags(commit) == 3  # request, topic, partition


def test_a_nullable_struct_present_or_null_is_walked() -> None:
    def response(assignment: Any) -> Any:
        fields = {"error_code": ErrorCode.none, "member_id": "m", "member_epoch": 3,
                  "heartbeat_interval": 5000, "assignment": assignment}  # fmt: skip
        return build(cgh0.ConsumerGroupHeartbeatResponse, fields)

    present = {"topic_partitions": [{"topic_id": uuid.UUID(int=7), "partitions": [1]}]}
    # the response, the assignment and its one topic
    assert _assert_reads_with_unknown_tags(response(present)) == 3
    assert _assert_reads_with_unknown_tags(response(None)) == 1


def test_known_tags_are_kept_while_unknown_ones_go() -> None:
    fields = {"error_code": ErrorCode.none, "finalized_features_epoch": 17,
              "api_keys": [{"api_key": 12, "min_version": 0, "max_version": 4}]}  # fmt: skip
    response = build(av3.ApiVersionsResponse, fields)
    data = _encoded(response)
    assert read_entity(av3.ApiVersionsResponse, data, 0).finalized_features_epoch == 17
    # The top-level section ends the message: one tag, tag 1, 8 bytes (the epoch). Add an
    # unknown tag after it (tags go in ascending order).
    count_at = len(data) - 11
    assert data[count_at : count_at + 3] == b"\x01\x01\x08"
    mixed = data[:count_at] + b"\x02" + data[count_at + 1 :] + write_uvarint(UNKNOWN) + b"\x01\x00"
    with pytest.raises(KeyError):
        reader_for(av3.ApiVersionsResponse)(mixed, 0)
    assert read_entity(av3.ApiVersionsResponse, mixed, 0) == response


def test_the_coordinator_decodes_a_request_frame_with_an_unknown_tag() -> None:
    body: Any = build(request_class(ApiKey.HEARTBEAT, 4), FULL_REQUESTS[ApiKey.HEARTBEAT])
    frame = encode_request(body, correlation_id=7, client_id="newer-client")[4:]
    tagged = frame[:-1] + write_uvarint(1) + write_uvarint(UNKNOWN) + b"\x00"
    assert parse_request(tagged).body == body


def test_a_broken_tag_section_is_still_an_error() -> None:
    body: Any = build(request_class(ApiKey.HEARTBEAT, 4), FULL_REQUESTS[ApiKey.HEARTBEAT])
    data = _encoded(body)
    runs_past = data[:-1] + write_uvarint(1) + write_uvarint(UNKNOWN) + b"\x40"
    with pytest.raises(ValueError, match="runs past"):
        read_entity(type(body), runs_past, 0)
