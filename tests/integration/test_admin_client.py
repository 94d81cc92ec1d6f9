"""kafka-python's KafkaAdminClient against the coordinator: what operators run day to day."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.structs import OffsetAndMetadata

from tests.integration.harness import Coordinator, Member, converged, wait_until


@pytest.fixture
def admin_client(coordinator: Coordinator) -> KafkaAdminClient:
    client = KafkaAdminClient(bootstrap_servers=coordinator.bootstrap, client_id="test-admin")
    yield client
    client.close()


def test_topics_through_the_admin_client(admin_client: KafkaAdminClient) -> None:
    created = admin_client.create_topics([NewTopic("orders", 3, 1)])
    assert created["topics"][0]["error_code"] == 0
    assert admin_client.list_topics() == ["orders"]
    admin_client.create_partitions({"orders": NewPartitions(5)})
    (described,) = admin_client.describe_topics(["orders"])
    assert [p["partition_index"] for p in described["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader_id"] == 0 for p in described["partitions"])
    admin_client.delete_topics(["orders"])
    assert admin_client.list_topics() == []


def test_describe_list_and_delete_groups(
    coordinator: Coordinator, members: list[Member], admin_client: KafkaAdminClient
) -> None:
    admin_client.create_topics([NewTopic("orders", 4, 1)])
    group = [
        Member("kafka-python", coordinator.bootstrap, "billing", ["orders"], client_id="kp"),
        Member("aiokafka", coordinator.bootstrap, "billing", ["orders"], client_id="aio"),
    ]
    members.extend(group)
    partitions = {("orders", p) for p in range(4)}
    wait_until(lambda: converged(group, partitions), 40, "the group to converge")
    group[0].send("commit 7")
    group[0].wait_event("committed")

    listed = admin_client.list_groups()
    assert {g["group_id"]: g["group_state"] for g in listed} == {"billing": "Stable"}
    assert admin_client.list_groups(states_filter=["empty"]) == []

    described = admin_client.describe_groups(["billing", "unknown"])
    billing = described["billing"]
    assert billing["group_state"] == "Stable"
    assert billing["protocol_type"] == "consumer"
    assert billing["protocol_data"] == "range"
    assert {m["client_id"] for m in billing["members"]} == {"kp", "aio"}
    assigned = sorted(
        (a["topic"], p)
        for m in billing["members"]
        for a in m["member_assignment"]["assigned_partitions"]
        for p in a["partitions"]
    )
    assert assigned == sorted(partitions)
    assert described["unknown"]["group_state"] == "Dead"
    assert "GroupIdNotFound" in (described["unknown"]["error"] or "")

    offsets = admin_client.list_group_offsets({"billing": None})["billing"]
    kp_partitions = group[0].assignment["partitions"]  # type: ignore[index]
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: 7 for _, p in kp_partitions}

    assert admin_client.delete_groups(["billing"]) == {"billing": "NonEmptyGroupError"}
    for m in group:
        m.close()
    wait_until(
        lambda: admin_client.describe_groups(["billing"])["billing"]["group_state"] == "Empty",
        20,
        "the group to empty",
    )
    assert admin_client.delete_groups(["billing", "unknown"]) == {
        "billing": "OK",
        "unknown": "GroupIdNotFoundError",
    }
    assert admin_client.list_groups() == []
    assert admin_client.list_group_offsets({"billing": None})["billing"] == {}


def test_offsets_of_an_empty_group_can_be_set_by_an_admin(
    admin_client: KafkaAdminClient,
) -> None:
    """Generation -1 commits (a "simple" group) are how reset tools move offsets."""
    admin_client.create_topics([NewTopic("orders", 2, 1)])
    tp = TopicPartition("orders", 1)
    admin_client.alter_group_offsets("ops", {tp: OffsetAndMetadata(100, "reset", -1)})
    offsets = admin_client.list_group_offsets({"ops": None})["ops"]
    assert offsets[tp].offset == 100
    assert offsets[tp].metadata == "reset"
    assert {g["group_id"]: g["protocol_type"] for g in admin_client.list_groups()} == {"ops": ""}
