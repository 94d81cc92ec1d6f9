"""Admin operations against a coordinator (or any Kafka broker) over the Kafka protocol.

Topics and groups are managed with the standard admin APIs, so the coordinator stays a
plain Kafka endpoint: the CLI, the operator and any Kafka admin client do the same thing.
`Admin` (`single.py`) keeps one connection open and reopens it after a failure; the
module-level functions are one-shot conveniences for the CLI. `Cluster` (`cluster.py`)
routes requests the way Kafka's admin client does, so `kgroups group` works against a
Kafka cluster as well as against kgroups. What their answers are made of is in
`views.py`, loaded with the package; the clients load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kgroups.admin.views import (
    DELETE,
    EARLIEST,
    GROUP_RESOURCE,
    LATEST,
    SET,
    TIMEOUT_MS,
    TP,
    AdminError,
    Committed,
    GroupView,
    ListedGroup,
    MemberView,
    Node,
    Topology,
    error_message,
    error_text,
)

if TYPE_CHECKING:
    from kgroups.admin.cluster import RETRY_COORDINATOR, Cluster
    from kgroups.admin.single import (
        Admin,
        create_partitions,
        create_topic,
        delete_topic,
        list_topics,
    )

_CLIENTS = {
    "Admin": "single", "create_partitions": "single", "create_topic": "single",
    "delete_topic": "single", "list_topics": "single",
    "Cluster": "cluster", "RETRY_COORDINATOR": "cluster",
}  # fmt: skip
"""Loaded on first use: the kubectl plugin and the operator's status code need only the
views, and every Kafka API's schema (what the clients import) costs a command's start
half a second."""


def __getattr__(name: str) -> Any:
    module = _CLIENTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kgroups.admin' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kgroups.admin.{module}"), name)


__all__ = [
    "DELETE",
    "EARLIEST",
    "GROUP_RESOURCE",
    "LATEST",
    "RETRY_COORDINATOR",
    "SET",
    "TIMEOUT_MS",
    "TP",
    "Admin",
    "AdminError",
    "Cluster",
    "Committed",
    "GroupView",
    "ListedGroup",
    "MemberView",
    "Node",
    "Topology",
    "create_partitions",
    "create_topic",
    "delete_topic",
    "error_message",
    "error_text",
    "list_topics",
]
