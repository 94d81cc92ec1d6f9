"""The Kafka APIs kgroups serves, their version ranges, and kio's class for each version.

The ranges are kio's (generated from Kafka's message schemas, so they start where Kafka
4.x starts after KIP-896 and end at the newest schema kio knows). That covers what
kafka-python 3.x, aiokafka and the current Java client send.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from kio.schema.index import schema_name_map
from kio.static.constants import EntityType


class ApiKey:
    """Kafka API keys (`ApiKeys.java`) of the APIs kgroups serves."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DESCRIBE_CONFIGS = 32
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


_NAMES = {
    ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch",
    ApiKey.LIST_OFFSETS: "list_offsets",
    ApiKey.METADATA: "metadata",
    ApiKey.OFFSET_COMMIT: "offset_commit",
    ApiKey.OFFSET_FETCH: "offset_fetch",
    ApiKey.FIND_COORDINATOR: "find_coordinator",
    ApiKey.JOIN_GROUP: "join_group",
    ApiKey.HEARTBEAT: "heartbeat",
    ApiKey.LEAVE_GROUP: "leave_group",
    ApiKey.SYNC_GROUP: "sync_group",
    ApiKey.DESCRIBE_GROUPS: "describe_groups",
    ApiKey.LIST_GROUPS: "list_groups",
    ApiKey.SASL_HANDSHAKE: "sasl_handshake",
    ApiKey.API_VERSIONS: "api_versions",
    ApiKey.SASL_AUTHENTICATE: "sasl_authenticate",
    ApiKey.CREATE_TOPICS: "create_topics",
    ApiKey.DELETE_TOPICS: "delete_topics",
    ApiKey.CREATE_PARTITIONS: "create_partitions",
    ApiKey.DELETE_GROUPS: "delete_groups",
    ApiKey.DESCRIBE_CONFIGS: "describe_configs",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "incremental_alter_configs",
    ApiKey.OFFSET_DELETE: "offset_delete",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "consumer_group_heartbeat",
    ApiKey.CONSUMER_GROUP_DESCRIBE: "consumer_group_describe",
}


@dataclass(frozen=True, slots=True)
class ApiRange:
    key: int
    name: str
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _range(key: int, name: str) -> ApiRange:
    versions = sorted(schema_name_map[name])
    return ApiRange(key, name, versions[0], versions[-1])


SUPPORTED: dict[int, ApiRange] = {key: _range(key, name) for key, name in _NAMES.items()}
"""Every API served, by key: what ApiVersions advertises."""
SUPPORTED[ApiKey.SASL_HANDSHAKE] = ApiRange(ApiKey.SASL_HANDSHAKE, "sasl_handshake", 1, 1)
"""SaslHandshake v0 is followed by raw, unframed SASL tokens (before KIP-152); every client
kgroups meets sends v1 and then SaslAuthenticate, which is all that is served."""


def _load(path: str) -> type:
    module, _, name = path.partition(":")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


@cache
def request_class(key: int, version: int) -> type:
    from kgroups.protocol.extensions import REQUESTS

    extended = REQUESTS.get((key, version))
    if extended is not None:
        return extended
    return _load(schema_name_map[_NAMES[key]][version][EntityType.request])


@cache
def response_class(key: int, version: int) -> type:
    from kgroups.protocol.extensions import RESPONSES

    extended = RESPONSES.get((key, version))
    if extended is not None:
        return extended
    return _load(schema_name_map[_NAMES[key]][version][EntityType.response])


def api_name(key: int) -> str:
    return _NAMES.get(key, f"api-{key}")


@cache
def metric_api_name(key: int) -> str:
    """An API as Kafka's request metrics spell it (`OffsetCommit`): a metric label."""
    return "".join(word.capitalize() for word in api_name(key).split("_"))
