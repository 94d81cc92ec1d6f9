"""Admin operations against a coordinator (or any Kafka broker) over the Kafka protocol.

Topics and groups are managed with the standard admin APIs, so the coordinator stays a
plain Kafka endpoint: the CLI, the operator and any Kafka admin client do the same thing.
`Admin` (`single.py`) keeps one connection open and reopens it after a failure; the
module-level functions are one-shot conveniences for the CLI. `Cluster` (`cluster.py`)
routes requests the way Kafka's admin client does, so `kgroups group` works against a
Kafka cluster as well as against kgroups. What their answers are made of is in
`views.py`.
"""

from kgroups.admin.cluster import RETRY_COORDINATOR, Cluster
from kgroups.admin.single import (
    Admin,
    create_partitions,
    create_topic,
    delete_topic,
    list_topics,
)
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
