"""confluent-kafka's AdminClient (librdkafka 2.16) against the coordinator.

What an operator's tooling built on librdkafka does: topics, groups, committed offsets,
group configs, log offsets. The coordinator stores no records, so "the log" it describes
is a topic's name and partition count; its end offsets are the highest it knows of.

confluent-kafka's Python binding does not expose DeleteConsumerGroupOffsets, which
librdkafka implements; `delete_group_offsets` below calls librdkafka's own C function
(the library confluent-kafka ships) so OffsetDelete is still librdkafka's request.
"""

from __future__ import annotations

import ctypes
import logging
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.integration.harness import (
    Coordinator,
    Member,
    converged,
    create_topic,
    wait_converged,
    wait_until,
)

TIMEOUT_S = 20


@pytest.fixture
def admin(coordinator: Coordinator) -> AdminClient:
    # librdkafka's own log goes through logging (pytest shows it with a failure), not to
    # stderr, where a client outliving its coordinator would complain after the test.
    config = {"bootstrap.servers": coordinator.bootstrap, "client.id": "ops"}
    return AdminClient(config, logger=logging.getLogger("librdkafka.admin"))


def outcome(future: Future[Any]) -> Any:
    """A future's result, or the name of the Kafka error it failed with."""
    try:
        return future.result(TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].name()


def outcomes(futures: dict[Any, Future[Any]]) -> dict[Any, Any]:
    return {key: outcome(f) for key, f in futures.items()}


def committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    listed = admin.list_consumer_group_offsets(request)[group].result(TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions}


def start(coordinator: Coordinator, members: list[Member], group: str, topics: list[str],
          name: str) -> Member:  # fmt: skip
    m = Member("confluent", coordinator.bootstrap, group, topics, client_id=name)
    members.append(m)
    return m


def owned(m: Member) -> set[tuple[str, int]]:
    """The partitions `m` last reported as its own."""
    report = m.assignment
    assert report is not None, f"{m.name} has no assignment"
    return {(t, p) for t, p in report["partitions"]}


# --- OffsetDelete through librdkafka's C API --------------------------------------------------


class _TopicPartition(ctypes.Structure):
    """rd_kafka_topic_partition_t (rdkafka.h)."""

    _fields_ = [
        ("topic", ctypes.c_char_p),
        ("partition", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("metadata", ctypes.c_void_p),
        ("metadata_size", ctypes.c_size_t),
        ("opaque", ctypes.c_void_p),
        ("err", ctypes.c_int),
        ("_private", ctypes.c_void_p),
    ]


class _TopicPartitionList(ctypes.Structure):
    """rd_kafka_topic_partition_list_t (rdkafka.h)."""

    _fields_ = [
        ("cnt", ctypes.c_int),
        ("size", ctypes.c_int),
        ("elems", ctypes.POINTER(_TopicPartition)),
    ]


def _librdkafka() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).parent.with_name("confluent_kafka.libs")
    found = sorted(libs.glob("librdkafka*.so*"))
    assert found, f"no librdkafka shipped with confluent-kafka in {libs}"
    lib = ctypes.CDLL(str(found[0]))
    ptr, char_p = ctypes.c_void_p, ctypes.c_char_p
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "rd_kafka_conf_new": (ptr, []),
        "rd_kafka_conf_set": (ctypes.c_int, [ptr, char_p, char_p, char_p, ctypes.c_size_t]),
        "rd_kafka_new": (ptr, [ctypes.c_int, ptr, char_p, ctypes.c_size_t]),
        "rd_kafka_destroy": (None, [ptr]),
        "rd_kafka_queue_new": (ptr, [ptr]),
        "rd_kafka_queue_destroy": (None, [ptr]),
        "rd_kafka_queue_poll": (ptr, [ptr, ctypes.c_int]),
        "rd_kafka_topic_partition_list_new": (ptr, [ctypes.c_int]),
        "rd_kafka_topic_partition_list_add": (ptr, [ptr, char_p, ctypes.c_int32]),
        "rd_kafka_topic_partition_list_destroy": (None, [ptr]),
        "rd_kafka_DeleteConsumerGroupOffsets_new": (ptr, [char_p, ptr]),
        "rd_kafka_DeleteConsumerGroupOffsets_destroy": (None, [ptr]),
        "rd_kafka_DeleteConsumerGroupOffsets": (
            None,
            [ptr, ctypes.POINTER(ptr), ctypes.c_size_t, ptr, ptr],
        ),
        "rd_kafka_event_error": (ctypes.c_int, [ptr]),
        "rd_kafka_event_destroy": (None, [ptr]),
        "rd_kafka_event_DeleteConsumerGroupOffsets_result": (ptr, [ptr]),
        "rd_kafka_DeleteConsumerGroupOffsets_result_groups": (
            ctypes.POINTER(ptr),
            [ptr, ctypes.POINTER(ctypes.c_size_t)],
        ),
        "rd_kafka_group_result_error": (ptr, [ptr]),
        "rd_kafka_group_result_partitions": (ctypes.POINTER(_TopicPartitionList), [ptr]),
        "rd_kafka_error_code": (ctypes.c_int, [ptr]),
        "rd_kafka_err2name": (char_p, [ctypes.c_int]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def delete_group_offsets(
    bootstrap: str, group: str, partitions: list[tuple[str, int]]
) -> str | dict[tuple[str, int], str]:
    """librdkafka's DeleteConsumerGroupOffsets: the group's error name, or each
    partition's ("NO_ERROR" where the offset is gone)."""
    lib = _librdkafka()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    assert lib.rd_kafka_conf_set(conf, b"bootstrap.servers", bootstrap.encode(), errstr, 512) == 0
    rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER, as the AdminClient
    assert rk, errstr.value
    queue = lib.rd_kafka_queue_new(rk)
    wanted = lib.rd_kafka_topic_partition_list_new(len(partitions))
    for topic, partition in partitions:
        lib.rd_kafka_topic_partition_list_add(wanted, topic.encode(), partition)
    request = lib.rd_kafka_DeleteConsumerGroupOffsets_new(group.encode(), wanted)
    event = None
    try:
        lib.rd_kafka_DeleteConsumerGroupOffsets(rk, (ctypes.c_void_p * 1)(request), 1, None, queue)
        event = lib.rd_kafka_queue_poll(queue, TIMEOUT_S * 1000)
        assert event, "no DeleteConsumerGroupOffsets result"
        error = lib.rd_kafka_event_error(event)
        if error:
            return str(lib.rd_kafka_err2name(error).decode())
        result = lib.rd_kafka_event_DeleteConsumerGroupOffsets_result(event)
        count = ctypes.c_size_t()
        groups = lib.rd_kafka_DeleteConsumerGroupOffsets_result_groups(result, ctypes.byref(count))
        assert count.value == 1
        group_error = lib.rd_kafka_group_result_error(groups[0])
        if group_error:
            return str(lib.rd_kafka_err2name(lib.rd_kafka_error_code(group_error)).decode())
        answered = lib.rd_kafka_group_result_partitions(groups[0]).contents
        return {
            (tp.topic.decode(), tp.partition): lib.rd_kafka_err2name(tp.err).decode()
            for tp in answered.elems[: answered.cnt]
        }
    finally:
        if event:
            lib.rd_kafka_event_destroy(event)
        lib.rd_kafka_DeleteConsumerGroupOffsets_destroy(request)
        lib.rd_kafka_topic_partition_list_destroy(wanted)
        lib.rd_kafka_queue_destroy(queue)
        lib.rd_kafka_destroy(rk)


# --- topics ---------------------------------------------------------------------------------


def test_topics_through_the_confluent_admin_client(
    coordinator: Coordinator, admin: AdminClient
) -> None:
    assert outcomes(admin.create_topics([NewTopic("orders", 3)])) == {"orders": None}
    assert outcomes(admin.create_topics([NewTopic("orders", 3), NewTopic("audit", 1)])) == {
        "orders": "TOPIC_ALREADY_EXISTS",
        "audit": None,
    }

    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert {name: len(t.partitions) for name, t in metadata.topics.items()} == {
        "orders": 3,
        "audit": 1,
    }
    assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [
        (0, "127.0.0.1", coordinator.port)
    ]
    assert all(p.leader == 0 for p in metadata.topics["orders"].partitions.values())
    cluster = admin.describe_cluster().result(TIMEOUT_S)
    assert cluster.cluster_id and [n.id for n in cluster.nodes] == [0]

    assert outcomes(admin.create_partitions([NewPartitions("orders", 5)])) == {"orders": None}
    described = outcomes(admin.describe_topics(TopicCollection(["orders", "missing"])))
    assert described["missing"] == "UNKNOWN_TOPIC_OR_PART"
    orders = described["orders"]
    assert orders.name == "orders" and not orders.is_internal
    assert [p.id for p in orders.partitions] == [0, 1, 2, 3, 4]
    assert {(p.leader.id, tuple(r.id for r in p.replicas)) for p in orders.partitions} == {
        (0, (0,))
    }
    # Shrinking is refused, as Kafka refuses it.
    assert outcomes(admin.create_partitions([NewPartitions("orders", 2)])) == {
        "orders": "INVALID_PARTITIONS"
    }

    assert outcomes(admin.delete_topics(["orders", "missing"])) == {
        "orders": None,
        "missing": "UNKNOWN_TOPIC_OR_PART",
    }
    assert set(admin.list_topics(timeout=TIMEOUT_S).topics) == {"audit"}


def test_describe_configs_of_a_topic(coordinator: Coordinator, admin: AdminClient) -> None:
    """Tools describe a topic's configs before they touch it (retention, cleanup policy);
    a topic that exists answers with its configs, as a Kafka broker's defaults."""
    create_topic(coordinator, "orders", 2)
    answers = outcomes(
        admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, "orders"), ConfigResource(ResourceType.TOPIC, "x")]
        )
    )
    assert answers[ConfigResource(ResourceType.TOPIC, "x")] == "UNKNOWN_TOPIC_OR_PART"
    configs = answers[ConfigResource(ResourceType.TOPIC, "orders")]
    assert isinstance(configs, dict), configs
    assert configs["cleanup.policy"].value == "delete"
    assert int(configs["retention.ms"].value) != 0
    assert all(entry.name == name for name, entry in configs.items())


# --- groups ---------------------------------------------------------------------------------


def test_list_describe_and_delete_groups(
    coordinator: Coordinator, members: list[Member], admin: AdminClient
) -> None:
    partitions = create_topic(coordinator, "orders", 4)
    group = [start(coordinator, members, "billing", ["orders"], name) for name in ("a", "b")]
    gen = wait_converged(group, partitions, 40)
    group[0].send("commit 7")
    group[0].wait_event("committed")

    def listed(**filters: Any) -> list[tuple[str, Any, Any, bool]]:
        result = admin.list_consumer_groups(**filters).result(TIMEOUT_S)
        assert result.errors == []
        return [(g.group_id, g.state, g.type, g.is_simple_consumer_group) for g in result.valid]

    stable = ("billing", ConsumerGroupState.STABLE, ConsumerGroupType.CLASSIC, False)
    assert listed() == [stable]
    assert listed(states={ConsumerGroupState.STABLE}) == [stable]
    assert listed(states={ConsumerGroupState.EMPTY}) == []
    assert listed(types={ConsumerGroupType.CLASSIC}) == [stable]
    assert listed(types={ConsumerGroupType.CONSUMER}) == []

    described = outcomes(admin.describe_consumer_groups(["billing", "unknown"]))
    billing = described["billing"]
    assert billing.state is ConsumerGroupState.STABLE
    assert billing.type is ConsumerGroupType.CLASSIC
    assert billing.partition_assignor == "range"
    assert not billing.is_simple_consumer_group
    assert (billing.coordinator.id, billing.coordinator.port) == (0, coordinator.port)
    assignments = {
        m.client_id: sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
        for m in billing.members
    }
    assert assignments == {m.name: sorted(owned(m)) for m in group}
    assert all(m.host and m.group_instance_id is None for m in billing.members)
    assert described["unknown"].state is ConsumerGroupState.DEAD
    assert converged(group, partitions) == gen

    mine = owned(group[0])
    assert committed(admin, "billing") == dict.fromkeys(mine, 7)
    some = ConsumerGroupTopicPartitions("billing", [TopicPartition("orders", p) for p in (0, 3)])
    asked = admin.list_consumer_group_offsets([some])["billing"].result(TIMEOUT_S)
    assert {tp.partition: tp.offset for tp in asked.topic_partitions} == {
        p: 7 if ("orders", p) in mine else confluent_kafka.OFFSET_INVALID for p in (0, 3)
    }

    assert outcomes(admin.delete_consumer_groups(["billing"])) == {"billing": "NON_EMPTY_GROUP"}
    for m in group:
        m.close()
    wait_until(lambda: listed(states={ConsumerGroupState.EMPTY}), 20, "the group to empty")
    assert outcomes(admin.delete_consumer_groups(["billing", "unknown"])) == {
        "billing": None,
        "unknown": "GROUP_ID_NOT_FOUND",
    }
    assert listed() == []
    assert committed(admin, "billing") == {}


def test_alter_and_delete_committed_offsets(
    coordinator: Coordinator, members: list[Member], admin: AdminClient
) -> None:
    """Offsets are moved by tools while a group is down (generation -1 commits); OffsetDelete
    removes those nobody uses: all of an Empty group's, and a live group's only for topics
    it does not subscribe to (Kafka's rule: GROUP_SUBSCRIBED_TO_TOPIC for the others)."""
    orders = create_topic(coordinator, "orders", 2)
    create_topic(coordinator, "audit", 1)

    def alter(group: str, *offsets: tuple[str, int, int]) -> Any:
        tps = [TopicPartition(t, p, o, metadata="reset") for t, p, o in offsets]
        return outcome(
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group]
        )

    done = alter("ops", ("orders", 0, 100), ("orders", 1, 101), ("audit", 0, 5))
    assert sorted((tp.topic, tp.partition, tp.offset, tp.error) for tp in done.topic_partitions) == [
        ("audit", 0, 5, None), ("orders", 0, 100, None), ("orders", 1, 101, None),
    ]  # fmt: skip
    assert committed(admin, "ops") == {("orders", 0): 100, ("orders", 1): 101, ("audit", 0): 5}
    groups = admin.list_consumer_groups().result(TIMEOUT_S).valid
    assert [(g.group_id, g.is_simple_consumer_group) for g in groups] == [("ops", True)]

    # A live group: an admin's commit is refused (it is no member), and only offsets of
    # topics the group does not subscribe to can be deleted.
    member = start(coordinator, members, "ops", ["orders"], "worker")
    wait_converged([member], orders, 40)
    refused = alter("ops", ("orders", 0, 1))
    assert [tp.error.name() for tp in refused.topic_partitions] == ["UNKNOWN_MEMBER_ID"]
    assert delete_group_offsets(coordinator.bootstrap, "ops", [("orders", 0), ("audit", 0)]) == {
        ("orders", 0): "GROUP_SUBSCRIBED_TO_TOPIC",
        ("audit", 0): "NO_ERROR",
    }
    assert committed(admin, "ops") == {("orders", 0): 100, ("orders", 1): 101}

    # Empty again: anything goes.
    member.close()
    wait_until(
        lambda: (
            admin.describe_consumer_groups(["ops"])["ops"].result(TIMEOUT_S).state
            is ConsumerGroupState.EMPTY
        ),
        20,
        "the group to empty",
    )
    assert delete_group_offsets(coordinator.bootstrap, "ops", [("orders", 0)]) == {
        ("orders", 0): "NO_ERROR"
    }
    assert committed(admin, "ops") == {("orders", 1): 101}
    assert delete_group_offsets(coordinator.bootstrap, "nobody", [("orders", 0)]) == (
        "GROUP_ID_NOT_FOUND"
    )


def test_group_configs_through_describe_and_incremental_alter_configs(
    coordinator: Coordinator, members: list[Member], admin: AdminClient
) -> None:
    """A group's own settings (KIP-848's GROUP config resource), and that they apply: a
    member below the group's minimum session timeout is refused until the override goes."""
    create_topic(coordinator, "orders", 2)
    resource = ConfigResource(ResourceType.GROUP, "strict")

    def describe() -> dict[str, tuple[str, ConfigSource]]:
        configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
        return {name: (e.value, ConfigSource(e.source)) for name, e in configs.items()}

    def alter(name: str, value: str | None, **kw: Any) -> Any:
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        change = ConfigEntry(name, value or "", incremental_operation=op)
        target = ConfigResource(ResourceType.GROUP, "strict", incremental_configs=[change])
        return outcome(admin.incremental_alter_configs([target], **kw)[target])

    defaults = describe()
    assert defaults["group.min.session.timeout.ms"] == ("1000", ConfigSource.STATIC_BROKER_CONFIG)
    assert defaults["group.max.size"][0] == str(2**31 - 1)

    assert alter("group.min.session.timeout.ms", "5000", validate_only=True) is None
    assert describe() == defaults
    assert alter("group.min.session.timeout.ms", "5000") is None
    assert describe()["group.min.session.timeout.ms"] == ("5000", ConfigSource.GROUP_CONFIG)
    assert alter("no.such.config", "1") == "INVALID_CONFIG"
    assert alter("group.max.size", "many") == "INVALID_CONFIG"

    member = start(coordinator, members, "strict", ["orders"], "m")  # session 4000 ms
    refused = member.wait_event("poll_error")
    assert refused["code"] == "INVALID_SESSION_TIMEOUT", refused
    assert member.assignment is None

    assert alter("group.min.session.timeout.ms", None) is None
    assert describe() == defaults
    member.wait_event("assigned", timeout=30)


def test_list_offsets_earliest_and_latest(coordinator: Coordinator, admin: AdminClient) -> None:
    """EARLIEST is 0 (nothing was ever deleted); LATEST is the highest offset the coordinator
    knows of a partition: 0 for one nobody read, else at least any offset committed on it."""
    create_topic(coordinator, "orders", 3)

    def offsets(spec: OffsetSpec) -> dict[int, Any]:
        asked = {TopicPartition("orders", p): spec for p in range(3)}
        answers = outcomes(admin.list_offsets(asked))
        return {tp.partition: getattr(a, "offset", a) for tp, a in answers.items()}

    def commit(group: str, offsets: dict[int, int]) -> None:
        tps = [TopicPartition("orders", p, o) for p, o in offsets.items()]
        request = [ConsumerGroupTopicPartitions(group, tps)]
        admin.alter_consumer_group_offsets(request)[group].result(TIMEOUT_S)

    assert offsets(OffsetSpec.earliest()) == {0: 0, 1: 0, 2: 0}
    assert offsets(OffsetSpec.latest()) == {0: 0, 1: 0, 2: 0}

    commit("a", {0: 10, 1: 2})
    commit("b", {0: 25, 1: 5})
    assert offsets(OffsetSpec.latest()) == {0: 25, 1: 5, 2: 0}
    assert offsets(OffsetSpec.earliest()) == {0: 0, 1: 0, 2: 0}
    # A later, lower commit does not move the end back.
    commit("b", {0: 3})
    assert offsets(OffsetSpec.latest()) == {0: 25, 1: 5, 2: 0}
