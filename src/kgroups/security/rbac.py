"""Kafka's actions as Kubernetes RBAC questions (SubjectAccessReview attributes).

On Kubernetes the natural policy is RBAC: a Role names the ConsumerGroups a workload may
join and commit to and the Topics it may consume, and a RoleBinding grants it to the
workload's ServiceAccount. So each Kafka action becomes a verb on a kgroups.io resource,
with the Kafka name as the resource name, in the namespace the coordinator authorizes in:

| Kafka action                         | resource         | verb                         |
|--------------------------------------|------------------|------------------------------|
| READ GROUP (Join/Sync/Heartbeat/Leave)| consumergroups  | join                         |
| READ GROUP (OffsetCommit in a generation) | consumergroups | commit                    |
| READ GROUP (OffsetCommit, generation -1: a reset) | consumergroups | reset             |
| DESCRIBE GROUP                       | consumergroups   | get, or any verb above       |
| DELETE GROUP (DeleteGroups)          | consumergroups   | delete                       |
| DELETE GROUP (OffsetDelete)          | consumergroups   | reset                        |
| DESCRIBE_CONFIGS / ALTER_CONFIGS GROUP | consumergroups | get / update                 |
| READ TOPIC (commit, fetch)           | topics           | consume                      |
| DESCRIBE TOPIC                       | topics           | get, or consume              |
| CREATE TOPIC / CLUSTER               | topics           | create                       |
| DELETE TOPIC                         | topics           | delete                       |
| ALTER, ALTER_CONFIGS TOPIC           | topics           | update                       |
| DESCRIBE_CONFIGS TOPIC               | topics           | get                          |
| DESCRIBE CLUSTER (ListGroups)        | consumergroups   | list (no name)               |
| DESCRIBE_CONFIGS / ALTER_CONFIGS CLUSTER | coordinators | get / update (no name)       |

"or": Kafka's implied operations (READ implies DESCRIBE) become several verbs any of which
allows: a member granted `join` can also find its coordinator and read its offsets.
Identities: SASL user names are Kubernetes user names, so a SCRAM user or a token's
subject `system:serviceaccount:NS:NAME` is that ServiceAccount to RBAC (with the groups
the API server gives service accounts); a certificate's `CN=...,O=...` is user CN in the
O groups, as the API server reads client certificates.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.security.actions import Action, Operation, ResourceType

API_GROUP = "kgroups.io"
JOIN_APIS = frozenset({11, 12, 13, 14})  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup
OFFSET_COMMIT, OFFSET_DELETE, DELETE_GROUPS = 8, 47, 42


@dataclass(frozen=True, slots=True)
class Attributes:
    """A SubjectAccessReview's resourceAttributes (namespace added by the caller)."""

    resource: str
    verb: str
    name: str = ""


def _group_verbs(action: Action, api_key: int, reset: bool) -> tuple[str, ...]:
    op = action.operation
    if op is Operation.READ:
        if api_key == OFFSET_COMMIT:
            return ("reset",) if reset else ("commit",)
        return ("join",)
    if op is Operation.DESCRIBE:
        return ("get", "join", "commit")
    if op is Operation.DELETE:
        return ("reset",) if api_key == OFFSET_DELETE else ("delete",)
    if op is Operation.DESCRIBE_CONFIGS:
        return ("get", "update")
    return ("update",)  # ALTER_CONFIGS


_TOPIC_VERBS: dict[Operation, tuple[str, ...]] = {
    Operation.READ: ("consume",),
    Operation.DESCRIBE: ("get", "consume"),
    Operation.CREATE: ("create",),
    Operation.DELETE: ("delete",),
    Operation.ALTER: ("update",),
    Operation.ALTER_CONFIGS: ("update",),
    Operation.DESCRIBE_CONFIGS: ("get", "update"),
}


def attributes(action: Action, api_key: int, *, reset: bool = False) -> tuple[Attributes, ...]:
    """The RBAC questions any one of which, answered yes, allows `action` in a request
    with `api_key` (`reset`: an OffsetCommit outside any generation)."""
    if action.resource_type is ResourceType.GROUP:
        verbs = _group_verbs(action, api_key, reset)
        return tuple(Attributes("consumergroups", v, action.name) for v in verbs)
    if action.resource_type is ResourceType.TOPIC:
        verbs = _TOPIC_VERBS.get(action.operation, ("update",))
        return tuple(Attributes("topics", v, action.name) for v in verbs)
    op = action.operation
    if op is Operation.CREATE:
        return (Attributes("topics", "create"),)
    if op is Operation.DESCRIBE:
        return (Attributes("consumergroups", "list"),)
    verb = "get" if op is Operation.DESCRIBE_CONFIGS else "update"
    return (Attributes("coordinators", verb),)


def subject(principal: str) -> tuple[str, tuple[str, ...]]:
    """(user, groups) for a Kafka principal `User:name`."""
    _, _, name = principal.partition(":")
    if name.startswith("system:serviceaccount:"):
        parts = name.split(":")
        if len(parts) == 4:
            return name, ("system:serviceaccounts", f"system:serviceaccounts:{parts[2]}",
                          "system:authenticated")  # fmt: skip
    if name.startswith("CN="):
        fields = [f.split("=", 1) for f in name.split(",") if "=" in f]
        cn = next((v for k, v in fields if k == "CN"), name)
        return cn, (*(v for k, v in fields if k == "O"), "system:authenticated")
    return name, ("system:authenticated",)
