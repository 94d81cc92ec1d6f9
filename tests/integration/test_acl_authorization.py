"""Kafka ACLs from a file decide who may join, commit and see topics, with real clients.

alice may read group `billing` and topic `orders`; bob nothing; admin is a super user.
kafka-python and librdkafka are refused with Kafka's GROUP_AUTHORIZATION_FAILED and
TOPIC_AUTHORIZATION_FAILED, nothing changes for a refused request, and an edited ACL file
applies without a restart.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

from kgroups.files import write_atomically
from tests.integration.conftest import FAST
from tests.integration.harness import (
    Coordinator,
    polled_assignment,
    refused_while_polling,
    wait_until,
)
from tests.waits import within

PASSWORD = "pw"
ALICE_RULES: list[dict[str, Any]] = [
    {"principal": "User:alice", "operations": ["READ"],
     "resource": {"type": "GROUP", "name": "billing"}},
    {"principal": "User:alice", "operations": ["READ"],
     "resource": {"type": "TOPIC", "name": "orders"}},
]  # fmt: skip


def write_acls(path: Path, rules: list[dict[str, Any]]) -> None:
    """Atomically, as a mounted ConfigMap changes: a reload that read the file between
    write_text's truncation and its write once installed an empty ACL file (deny all,
    and "reloaded" in the log the test waits for)."""
    data = yaml.safe_dump({"superUsers": ["User:admin"], "acls": rules}).encode()
    write_atomically(path, data)


@pytest.fixture(scope="module")
def acl_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("acls") / "acls.yaml"


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory, acl_file: Path) -> Iterator[Coordinator]:
    tmp = tmp_path_factory.mktemp("acl-coordinator")
    users = {u: {"password": PASSWORD} for u in ("alice", "bob", "admin")}
    (tmp / "users.yaml").write_text(yaml.safe_dump({"users": users}))
    write_acls(acl_file, ALICE_RULES)
    coord = Coordinator(
        tmp / "data", *FAST, "--sasl-mechanisms", "SCRAM-SHA-256",
        "--credentials", str(tmp / "users.yaml"), "--acl-file", str(acl_file),
        "--reload-interval", "0.2", listeners=("SASL_PLAINTEXT",),
    )  # fmt: skip
    coord.start()
    admin = KafkaAdminClient(**config(coord, "admin"))
    try:
        admin.create_topics([NewTopic("orders", 2, 1), NewTopic("payroll", 2, 1)])
    finally:
        admin.close()
    yield coord
    coord.kill()


def config(coord: Coordinator, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": coord.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": user,
            "sasl_plain_password": PASSWORD, "request_timeout_ms": 10_000}  # fmt: skip


def consumer(coord: Coordinator, user: str, group: str, topic: str) -> KafkaConsumer:
    c = KafkaConsumer(group_id=group, enable_auto_commit=False, session_timeout_ms=6000,
                      heartbeat_interval_ms=500, **config(coord, user))  # fmt: skip
    c.subscribe([topic])
    return c


def admin_groups(coord: Coordinator) -> dict[str, Any]:
    admin = KafkaAdminClient(**config(coord, "admin"))
    try:
        return {g["group_id"]: g for g in admin.list_groups()}
    finally:
        admin.close()


def test_an_allowed_member_joins_and_commits(coordinator: Coordinator) -> None:
    c = consumer(coordinator, "alice", "billing", "orders")
    try:
        tps = polled_assignment(c)
        c.commit({tp: OffsetAndMetadata(3, "", -1) for tp in tps})
        assert {c.committed(tp) for tp in tps} == {3}
    finally:
        c.close()


def test_a_member_without_an_acl_is_refused_and_nothing_is_created(
    coordinator: Coordinator,
) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = consumer(coordinator, "bob", group, "orders")
    try:
        refused_while_polling(c, (GroupAuthorizationFailedError, TopicAuthorizationFailedError))
    finally:
        c.close()
    assert group not in admin_groups(coordinator)
    assert "refused READ GROUP:" in coordinator.log() or "refused DESCRIBE" in coordinator.log()


def test_a_topic_without_an_acl_is_refused_by_name(coordinator: Coordinator) -> None:
    """alice may join `billing` but not read `payroll`: Metadata reports the topic as
    TOPIC_AUTHORIZATION_FAILED (not unknown): kafka-python files it under its cluster's
    unauthorized topics (it does not raise from poll as Java does) and never gets a
    partition of it."""
    c = consumer(coordinator, "alice", "billing", "payroll")
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            c.poll(timeout_ms=200)
            assert not c.assignment()
        assert "payroll" in c._client.cluster.unauthorized_topics
    finally:
        c.close()


def test_librdkafka_reports_a_group_authorization_failure(coordinator: Coordinator) -> None:
    c = confluent_kafka.Consumer({
        "bootstrap.servers": coordinator.bootstrap, "group.id": "not-bobs",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "bob", "sasl.password": PASSWORD, "session.timeout.ms": 6000,
    })  # fmt: skip
    errors: list[Any] = []
    try:
        c.subscribe(["orders"])
        deadline = time.monotonic() + within(15)
        while time.monotonic() < deadline and not errors:
            message = c.poll(0.2)
            if message is not None and message.error() is not None:
                errors.append(message.error())
    finally:
        c.close()
    codes = {e.code() for e in errors}
    assert codes & {confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED,
                    confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}, errors  # fmt: skip


def test_an_edited_acl_file_applies_without_a_restart(
    coordinator: Coordinator, acl_file: Path
) -> None:
    group = "bobs"
    write_acls(acl_file, [*ALICE_RULES,
                          {"principal": "User:bob", "operations": ["READ"],
                           "resource": {"type": "GROUP", "name": group}},
                          {"principal": "User:bob", "operations": ["READ"],
                           "resource": {"type": "TOPIC", "name": "orders"}}])  # fmt: skip
    wait_until(lambda: "ACL file" in coordinator.log() and "reloaded" in coordinator.log(), 10,
               "the ACL file to reload")  # fmt: skip
    c = consumer(coordinator, "bob", group, "orders")
    try:
        assert len(polled_assignment(c)) == 2
    finally:
        c.close()
    write_acls(acl_file, ALICE_RULES)
