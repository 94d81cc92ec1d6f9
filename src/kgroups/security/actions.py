"""What a request asks to do, in Kafka's authorization vocabulary.

An `Action` is (operation, resource type, resource name), Kafka's `Action` without the
pattern type: every kgroups resource is named literally. The operations and resource types
carry Kafka's codes (AclOperation, ResourceType), so an ACL file, DescribeGroups'
authorized_operations and a log line all speak the language a Kafka user knows.

The coordinator core decides which actions a request needs (`core/authz.py`) and, handed
the ones refused, answers with Kafka's error shapes; the server's edge asks an authorizer
(an ACL file, Kubernetes RBAC) about exactly those actions. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Operation(enum.IntEnum):
    """Kafka's AclOperation codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


CLUSTER_NAME = "kafka-cluster"
"""The one CLUSTER resource's name, as in Kafka."""


@dataclass(frozen=True, slots=True)
class Action:
    operation: Operation
    resource_type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.operation.name} {self.resource_type.name}:{self.name}"


def group(operation: Operation, name: str) -> Action:
    return Action(operation, ResourceType.GROUP, name)


def topic(operation: Operation, name: str) -> Action:
    return Action(operation, ResourceType.TOPIC, name)


def cluster(operation: Operation) -> Action:
    return Action(operation, ResourceType.CLUSTER, CLUSTER_NAME)


IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""Kafka's implied operations (for ALLOW rules only): a grant of any of these operations
also grants the key operation (StandardAuthorizerData)."""


def granting(operation: Operation) -> frozenset[Operation]:
    """The operations whose ALLOW grants `operation`."""
    return IMPLIED_BY.get(operation, frozenset({operation}))


SUPPORTED: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DELETE, Operation.DESCRIBE,
                         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
}  # fmt: skip
"""Operations that mean something on each resource type (Kafka's AclEntry)."""
