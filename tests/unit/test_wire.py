"""The wire adapter, for every version of every API we serve.

`build` drops fields a version lacks, which would also silently drop a misspelt field:
so the tests below check that every field an encoder writes exists in some version of
the schema, and that requests with every field set decode into the core's messages
without losing any.
"""

from __future__ import annotations

import dataclasses
import io
import typing
import uuid
from typing import Any

import pytest

from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.wire import DECODERS, api_versions_frame, decode, encode, refused_produce
from kgroups.coordinator.wire.encode import ENCODERS
from kgroups.coordinator.wire.sasl import authenticate_frame, handshake_frame
from kgroups.protocol.apis import SUPPORTED, ApiKey, request_class, response_class
from kgroups.protocol.build import build
from kgroups.protocol.client import encode_request
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.frames import parse_request, writer_for
from kgroups.protocol.tags import reader_for
from kgroups.security.session import AuthenticateAnswer, HandshakeAnswer

E = ErrorCode
TID = uuid.UUID(int=77)
NODE = mc.Node(0, "h", 9)

RESPONSES: dict[int, Any] = {
    ApiKey.JOIN_GROUP: mg.JoinGroupResponse(
        E.none, 3, "consumer", "range", "L", True, "M", (mg.JoinGroupMember("L", "i", b"md"),)
    ),
    ApiKey.SYNC_GROUP: mg.SyncGroupResponse(E.none, "consumer", "range", b"assignment"),
    ApiKey.HEARTBEAT: mg.HeartbeatResponse(E.rebalance_in_progress),
    ApiKey.LEAVE_GROUP: mg.LeaveGroupResponse(
        E.none, (mg.LeftMember("m", "i", E.fenced_instance_id),)
    ),
    ApiKey.OFFSET_COMMIT: mo.OffsetCommitResponse(
        (mo.CommitTopicResult("t", TID, ((0, E.none), (1, E.illegal_generation))),)
    ),
    ApiKey.OFFSET_FETCH: mo.OffsetFetchResponse(
        (mo.FetchedGroup("g", (mo.FetchedTopic("t", TID, (mo.FetchedPartition(0, 5, 2, "m"),)),)),)
    ),
    ApiKey.OFFSET_DELETE: mo.OffsetDeleteResponse(
        (("t", ((0, E.none), (1, E.group_subscribed_to_topic))),)
    ),
    ApiKey.DESCRIBE_GROUPS: mg.DescribeGroupsResponse(
        (
            mg.DescribedGroup(
                "g",
                "Stable",
                E.none,
                None,
                "consumer",
                "range",
                (mg.DescribedMember("m", "i", "c", "/h", b"md", b"as"),),
            ),
        )
    ),
    ApiKey.LIST_GROUPS: mg.ListGroupsResponse((mg.ListedGroup("g", "consumer", "Stable"),)),
    ApiKey.DELETE_GROUPS: mg.DeleteGroupsResponse((("g", E.non_empty_group),)),
    ApiKey.METADATA: mc.MetadataResponse(
        (NODE,),
        "cid",
        0,
        (mc.TopicMetadata("t", TID, (mc.PartitionMetadata(0, 0, 0, (0,), (0,)),)),),
    ),
    ApiKey.FIND_COORDINATOR: mc.FindCoordinatorResponse((mc.CoordinatorResult("g", 0, "h", 9),)),
    ApiKey.CREATE_TOPICS: mc.CreateTopicsResponse((mc.CreatedTopic("t", E.none, None, TID, 3, 1),)),
    ApiKey.CREATE_PARTITIONS: mc.CreatePartitionsResponse(
        (mc.TopicOutcome("t", E.invalid_partitions, "no"),)
    ),
    ApiKey.DELETE_TOPICS: mc.DeleteTopicsResponse((mc.TopicOutcome("t", E.none, None, TID),)),
    ApiKey.LIST_OFFSETS: mc.ListOffsetsResponse((("t", (mc.ListedOffset(0, E.none, -1, 0, 0),)),)),
    ApiKey.FETCH: mc.FetchResponse(
        ((mc.TopicRef("t", TID), (mc.FetchedPartitionData(0, E.none, 5, 5, 0),)),)
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: mk.AlterConfigsResponse(
        (mk.ResourceOutcome(32, "g", E.invalid_config, "bad"),)
    ),
    ApiKey.DESCRIBE_CONFIGS: mk.DescribeConfigsResponse(
        (mk.DescribedResource(32, "g", entries=(mk.ConfigEntry("group.max.size", "5", 8),)),)
    ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: mn.ConsumerHeartbeatResponse(
        E.none, None, "m", 5, 5000, (mn.AssignedTopic(TID, "t", (0, 2)),)
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: mn.ConsumerDescribeResponse(
        (
            mn.DescribedConsumerGroup(
                "g",
                E.none,
                None,
                "Reconciling",
                4,
                4,
                "uniform",
                (
                    mn.DescribedConsumerMember(
                        "m",
                        "i",
                        "r",
                        3,
                        "c",
                        "/h",
                        ("t",),
                        None,
                        (mn.AssignedTopic(TID, "t", (0,)),),
                        (mn.AssignedTopic(TID, "t", (0, 1)),),
                    ),
                ),
            ),
        )
    ),
}

EDGE = (ApiKey.API_VERSIONS, ApiKey.PRODUCE, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
VERSIONS = [
    (key, version)
    for key, spec in sorted(SUPPORTED.items())
    if key not in EDGE  # answered by the server's edge, never the core
    for version in range(spec.min_version, spec.max_version + 1)
]


def _roundtrip(obj: Any) -> Any:
    cls = type(obj)
    buf = io.BytesIO()
    writer_for(cls)(buf, obj)
    back, end = reader_for(cls)(memoryview(buf.getvalue()), 0)
    assert end == len(buf.getvalue())
    return back


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_every_response_encodes_in_every_version(key: int, version: int) -> None:
    kio_response = encode(key, version, RESPONSES[key])
    assert _roundtrip(kio_response) == kio_response
    fields = {f.name for f in dataclasses.fields(kio_response)}
    if "error_code" in fields and key == ApiKey.HEARTBEAT:
        assert kio_response.error_code is E.rebalance_in_progress


def _schema_fields(cls: type, seen: dict[str, set[str]], path: str = "") -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        seen.setdefault(path, set()).add(f.name)
        for arg in [hints[f.name], *typing.get_args(hints[f.name])]:
            for inner in [arg, *typing.get_args(arg)]:
                if dataclasses.is_dataclass(inner):
                    _schema_fields(inner, seen, f"{path}.{f.name}")  # type: ignore[arg-type]


def _dict_fields(value: Any, seen: dict[str, set[str]], path: str = "") -> None:
    if isinstance(value, dict):
        for name, inner in value.items():
            seen.setdefault(path, set()).add(name)
            _dict_fields(inner, seen, f"{path}.{name}")
    elif isinstance(value, list):
        for item in value:
            _dict_fields(item, seen, path)


@pytest.mark.parametrize("key", sorted(ENCODERS))
def test_encoders_only_write_fields_that_exist_in_some_version(key: int) -> None:
    spec = SUPPORTED[key]
    schema: dict[str, set[str]] = {}
    written: dict[str, set[str]] = {}
    for version in range(spec.min_version, spec.max_version + 1):
        _schema_fields(response_class(key, version), schema)
        _dict_fields(ENCODERS[key](RESPONSES[key], version), written)
    for path, names in written.items():
        assert names <= schema.get(path, set()), (spec.name, path, names - schema.get(path, set()))


FULL_REQUESTS: dict[int, dict[str, Any]] = {
    ApiKey.JOIN_GROUP: {
        "group_id": "g", "session_timeout": 7000, "rebalance_timeout": 9000, "member_id": "m",
        "group_instance_id": "i", "protocol_type": "consumer", "reason": "why",
        "protocols": [{"name": "range", "metadata": b"md"}],
    },
    ApiKey.SYNC_GROUP: {
        "group_id": "g", "generation_id": 4, "member_id": "m", "group_instance_id": "i",
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": "m", "assignment": b"a"}],
    },
    ApiKey.HEARTBEAT: {"group_id": "g", "generation_id": 4, "member_id": "m", "group_instance_id": "i"},
    ApiKey.LEAVE_GROUP: {
        "group_id": "g", "member_id": "m",
        "members": [{"member_id": "m", "group_instance_id": "i", "reason": "bye"}],
    },
    ApiKey.OFFSET_COMMIT: {
        "group_id": "g", "generation_id_or_member_epoch": 4, "member_id": "m",
        "group_instance_id": "i", "retention_time": 1000,
        "topics": [{"name": "t", "topic_id": TID, "partitions": [
            {"partition_index": 1, "committed_offset": 99, "committed_leader_epoch": 3,
             "committed_metadata": "meta"}]}],
    },
    ApiKey.OFFSET_FETCH: {
        "group_id": "g", "require_stable": True,
        "topics": [{"name": "t", "partition_indexes": [1, 2]}],
        "groups": [{"group_id": "g", "topics": [{"name": "t", "topic_id": TID, "partition_indexes": [1, 2]}]}],
    },
    ApiKey.OFFSET_DELETE: {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}]},
    ApiKey.DESCRIBE_GROUPS: {"groups": ["g", "h"]},
    ApiKey.LIST_GROUPS: {"states_filter": ["stable"], "types_filter": ["classic"]},
    ApiKey.DELETE_GROUPS: {"groups_names": ["g"]},
    ApiKey.METADATA: {"topics": [{"name": "t", "topic_id": TID}], "allow_auto_topic_creation": True},
    ApiKey.FIND_COORDINATOR: {"key": "g", "key_type": 0, "coordinator_keys": ["g"]},
    ApiKey.CREATE_TOPICS: {
        "topics": [{"name": "t", "num_partitions": 3, "replication_factor": 1}],
        "validate_only": True,
    },
    ApiKey.CREATE_PARTITIONS: {"topics": [{"name": "t", "count": 5, "assignments": None}], "validate_only": True},
    ApiKey.DELETE_TOPICS: {"topic_names": ["t"], "topics": [{"name": "t", "topic_id": TID}]},
    ApiKey.LIST_OFFSETS: {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "timestamp": -2}]}]},
    ApiKey.FETCH: {
        "max_wait": 500, "min_bytes": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "topic_id": TID, "partitions": [{"partition": 1, "fetch_offset": 10}]}],
    },
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {
        "resources": [{"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "group.max.size", "config_operation": 0, "value": "5"}]}],
        "validate_only": True,
    },
    ApiKey.DESCRIBE_CONFIGS: {
        "resources": [{"resource_type": 32, "resource_name": "g", "configuration_keys": ["group.max.size"]}],
    },
    ApiKey.CONSUMER_GROUP_HEARTBEAT: {
        "group_id": "g", "member_id": "m", "member_epoch": 3, "instance_id": "i", "rack_id": "r",
        "rebalance_timeout": 30000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": "t.*",
        "server_assignor": "range", "topic_partitions": [{"topic_id": TID, "partitions": [0, 2]}],
    },
    ApiKey.CONSUMER_GROUP_DESCRIBE: {"group_ids": ["g"], "include_authorized_operations": True},
}  # fmt: skip


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_every_request_version_decodes_through_a_real_frame(key: int, version: int) -> None:
    body = build(request_class(key, version), FULL_REQUESTS[key])
    frame = encode_request(body, correlation_id=42, client_id="app")
    request = parse_request(frame[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == (key, version, 42)
    assert request.client_id == "app"
    core = decode(key, version, request.body)
    has = {f.name for f in dataclasses.fields(body)}

    if key == ApiKey.JOIN_GROUP:
        assert isinstance(core, mg.JoinGroupRequest)
        assert core.session_timeout_ms == 7000
        assert core.rebalance_timeout_ms == (9000 if version >= 1 else 7000)
        assert core.group_instance_id == ("i" if version >= 5 else None)
        assert core.protocols == (mg.Protocol("range", b"md"),)
    elif key == ApiKey.SYNC_GROUP:
        assert isinstance(core, mg.SyncGroupRequest)
        assert core.assignments == (("m", b"a"),)
        assert core.protocol_name == ("range" if version >= 5 else None)
    elif key == ApiKey.LEAVE_GROUP:
        assert isinstance(core, mg.LeaveGroupRequest)
        expected_instance = "i" if version >= 3 else None
        assert core.members == (
            mg.LeavingMember("m", expected_instance, "bye" if version >= 5 else None),
        )
    elif key == ApiKey.OFFSET_COMMIT:
        assert isinstance(core, mo.OffsetCommitRequest)
        (topic,) = core.topics
        assert topic.name == (
            "t" if "name" in {f.name for f in dataclasses.fields(body.topics[0])} else None
        )
        assert topic.partitions[0].offset == 99
        assert core.retention_time_ms == (1000 if "retention_time" in has else -1)
        assert core.generation_id == 4
    elif key == ApiKey.OFFSET_FETCH:
        assert isinstance(core, mo.OffsetFetchRequest)
        (group,) = core.groups
        assert group.group_id == "g"
        assert group.topics is not None and group.topics[0].partitions == (1, 2)
        assert core.require_stable == ("require_stable" in has)
    elif key == ApiKey.OFFSET_DELETE:
        assert core == mo.OffsetDeleteRequest("g", (("t", (1,)),))
    elif key == ApiKey.METADATA:
        assert isinstance(core, mc.MetadataRequest)
        assert core.topics is not None and core.topics[0].name == "t"
    elif key == ApiKey.FIND_COORDINATOR:
        assert isinstance(core, mc.FindCoordinatorRequest)
        assert core.keys == ("g",)
    elif key == ApiKey.DELETE_TOPICS:
        assert isinstance(core, mc.DeleteTopicsRequest)
        assert core.topics[0].name == "t"
    elif key == ApiKey.FETCH:
        assert isinstance(core, mc.FetchRequest)
        assert core.max_wait_ms == 500
        assert core.topics[0].partitions[0].fetch_offset == 10
    elif key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        assert isinstance(core, mk.AlterConfigsRequest)
        assert core.validate_only
        assert core.resources == (
            mk.AlterConfigsResource(32, "g", (mk.ConfigChange("group.max.size", 0, "5"),)),
        )
    elif key == ApiKey.DESCRIBE_CONFIGS:
        assert isinstance(core, mk.DescribeConfigsRequest)
        assert core.resources == (mk.DescribeConfigsResource(32, "g", ("group.max.size",)),)
    elif key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        assert core == mn.ConsumerHeartbeatRequest(
            "g",
            "m",
            3,
            "i",
            "r",
            30000,
            ("t",),
            "t.*" if version >= 1 else None,
            "range",
            ((TID, (0, 2)),),
        )
    elif key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        assert core == mn.ConsumerDescribeRequest(("g",), True)
    elif key == ApiKey.LIST_GROUPS:
        assert isinstance(core, mg.ListGroupsRequest)
        assert core.states_filter == (("stable",) if "states_filter" in has else ())
    assert key in DECODERS


def test_api_versions_answers_the_table_or_unsupported_in_v0() -> None:
    from kio.schema.api_versions.v0.response import ApiVersionsResponse as V0
    from kio.schema.api_versions.v3.response import ApiVersionsResponse as V3

    ok, _ = reader_for(V3)(memoryview(api_versions_frame(7, 3)), 8)
    assert ok.error_code is E.none
    keys = {k.api_key: (k.min_version, k.max_version) for k in ok.api_keys}
    assert keys[ApiKey.JOIN_GROUP] == (0, 9)
    assert set(keys) == set(SUPPORTED)
    frame = api_versions_frame(8, 99)
    assert int.from_bytes(frame[4:8], "big") == 8
    old, _ = reader_for(V0)(memoryview(frame), 8)
    assert old.error_code is E.unsupported_version
    assert {k.api_key for k in old.api_keys} == set(SUPPORTED)


@pytest.mark.parametrize("version", range(SUPPORTED[ApiKey.PRODUCE].min_version,
                                          SUPPORTED[ApiKey.PRODUCE].max_version + 1))  # fmt: skip
def test_produce_is_listed_and_refused_as_kafka_refuses_a_principal_without_write(
    version: int,
) -> None:
    """kgroups stores no records: every partition of a Produce gets
    TOPIC_AUTHORIZATION_FAILED (with the reason where the version carries messages), and
    an acks=0 Produce, which has no response, closes the connection (None here)."""
    values = {
        "acks": -1, "timeout": 1000,
        "topic_data": [{"name": "t", "topic_id": uuid.uuid4(),
                        "partition_data": [{"index": 0, "records": b""},
                                           {"index": 2, "records": b""}]}],
    }  # fmt: skip
    frame = encode_request(build(request_class(ApiKey.PRODUCE, version), values), correlation_id=9)
    request = parse_request(frame[4:])
    answer = refused_produce(version, 9, request.body)
    assert answer is not None and int.from_bytes(answer[4:8], "big") == 9
    body_at = 9 if version >= 9 else 8  # response header v1: an (empty) tagged-field buffer
    response, size = reader_for(response_class(ApiKey.PRODUCE, version))(
        memoryview(answer), body_at
    )
    assert body_at + size == len(answer)
    [topic] = response.responses
    assert [p.index for p in topic.partition_responses] == [0, 2]
    for p in topic.partition_responses:
        assert p.error_code is E.topic_authorization_failed
        if version >= 8:
            assert "stores no records" in (p.error_message or "")
    zero = build(request_class(ApiKey.PRODUCE, version), {**values, "acks": 0})
    assert refused_produce(version, 10, parse_request(
        encode_request(zero, correlation_id=10)[4:]).body) is None  # fmt: skip


@pytest.mark.parametrize(
    ("key", "version"),
    [(k, v) for k in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
     for v in range(SUPPORTED[k].min_version, SUPPORTED[k].max_version + 1)],
)  # fmt: skip
def test_sasl_answers_encode_in_every_version(key: int, version: int) -> None:
    """SaslHandshake and SaslAuthenticate are the edge's: their frames read back as sent
    (the session lifetime only from SaslAuthenticate v1, KIP-368)."""
    if key == ApiKey.SASL_HANDSHAKE:
        answer = HandshakeAnswer(ErrorCode.unsupported_sasl_mechanism, ("PLAIN", "SCRAM-SHA-512"))
        frame = handshake_frame(version, 7, answer)
    else:
        auth = AuthenticateAnswer(ErrorCode.sasl_authentication_failed, "no", b"\x01\x02", 5000)
        frame = authenticate_frame(version, 7, auth)
    cls = response_class(key, version)
    body_at = 9 if cls.__flexible__ else 8
    response, size = reader_for(cls)(memoryview(frame), body_at)
    assert int.from_bytes(frame[4:8], "big") == 7 and body_at + size == len(frame)
    if key == ApiKey.SASL_HANDSHAKE:
        assert response.mechanisms == ("PLAIN", "SCRAM-SHA-512")
        assert response.error_code is E.unsupported_sasl_mechanism
    else:
        assert (response.error_message, bytes(response.auth_bytes)) == ("no", b"\x01\x02")
        if version >= 1:
            assert response.session_lifetime.total_seconds() == 5


def _commit_with_log_end(version: int) -> Any:
    spec = FULL_REQUESTS[ApiKey.OFFSET_COMMIT]
    (topic,) = spec["topics"]
    parts = [{**p, "log_end_offset": 120} for p in topic["partitions"]]
    spec = {**spec, "topics": [{**topic, "partitions": parts}]}
    return build(request_class(ApiKey.OFFSET_COMMIT, version), spec)


@pytest.mark.parametrize("version", [8, 9])
def test_a_commit_carries_the_sources_log_end_in_a_tagged_field(version: int) -> None:
    frame = encode_request(_commit_with_log_end(version), correlation_id=1)
    request = parse_request(frame[4:])
    core = decode(ApiKey.OFFSET_COMMIT, version, request.body)
    assert isinstance(core, mo.OffsetCommitRequest)
    assert core.topics[0].partitions[0].log_end == 120


def test_a_reader_without_the_log_end_extension_skips_it_as_kafka_does() -> None:
    """The kgroups member sends `log_end_offset` to any broker: Kafka's schema (here kio's
    plain v8 class, read the way the protocol says unknown tags are read) must skip it."""
    from kio.schema.offset_commit.v8 import request as plain

    from kgroups.protocol.tags import read_entity

    body = _commit_with_log_end(8)
    buf = io.BytesIO()
    writer_for(type(body))(buf, body)
    read = read_entity(plain.OffsetCommitRequest, memoryview(buf.getvalue()), 0)
    assert type(read) is plain.OffsetCommitRequest
    assert read.topics[0].partitions[0].committed_offset == 99
