"""Topic configs: kept, validated and described as Kafka does, though none changes anything.

`kafka-topics --describe`, confluent-kafka's `describe_configs` and franz-go's
`DescribeTopicConfigs` ask for a topic's configs before they show it; `kafka-topics
--create --config`, Strimzi-style tools and admin clients set them. A kgroups topic stores
no records, so retention, compaction and message format do not apply to it, but a tool
that set `cleanup.policy=compact` must read back what it set, not be told "done" and then
shown the default. So configs are validated as Kafka 4 validates them (a known name, a
value of its type within its range or among its choices, `config_values.py`;
INVALID_CONFIG with Kafka's message otherwise, nothing changed), kept with the topic in its
record, and described: each override as DYNAMIC_TOPIC_CONFIG, every other name with
Kafka's default as DEFAULT_CONFIG (tools that print only overrides print exactly those).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from kgroups.coordinator.core.config_values import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    STRING,
    ConfigSpec,
)
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.msg_configs import (
    AlterConfigsResource,
    ConfigEntry,
    ConfigRejected,
    DescribeConfigsResource,
    DescribedResource,
    ResourceOutcome,
)
from kgroups.coordinator.core.topics import put_topic
from kgroups.protocol.errors import ErrorCode

TOPIC = 2
"""Kafka's ConfigResource.Type.TOPIC."""
DYNAMIC_TOPIC_CONFIG_SOURCE, DEFAULT_CONFIG_SOURCE = 1, 5
SET, DELETE = 0, 1
_LONG_MAX = str(2**63 - 1)

SPECS: dict[str, ConfigSpec] = {
    "cleanup.policy": ConfigSpec(LIST, "delete", choices=("compact", "delete")),
    "compression.type": ConfigSpec(
        STRING, "producer", choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    ),
    "delete.retention.ms": ConfigSpec(LONG, "86400000", low=0),
    "file.delete.delay.ms": ConfigSpec(LONG, "60000", low=0),
    "flush.messages": ConfigSpec(LONG, _LONG_MAX, low=1),
    "flush.ms": ConfigSpec(LONG, _LONG_MAX, low=0),
    "index.interval.bytes": ConfigSpec(INT, "4096", low=0),
    "max.compaction.lag.ms": ConfigSpec(LONG, _LONG_MAX, low=1),
    "max.message.bytes": ConfigSpec(INT, "1048588", low=0),
    "message.timestamp.after.max.ms": ConfigSpec(LONG, "3600000", low=0),
    "message.timestamp.before.max.ms": ConfigSpec(LONG, _LONG_MAX, low=0),
    "message.timestamp.type": ConfigSpec(
        STRING, "CreateTime", choices=("CreateTime", "LogAppendTime")
    ),
    "min.cleanable.dirty.ratio": ConfigSpec(DOUBLE, "0.5", low=0, high=1),
    "min.compaction.lag.ms": ConfigSpec(LONG, "0", low=0),
    "min.insync.replicas": ConfigSpec(INT, "1", low=1),
    "retention.bytes": ConfigSpec(LONG, "-1"),
    "retention.ms": ConfigSpec(LONG, "604800000", low=-1),
    "segment.bytes": ConfigSpec(INT, "1073741824", low=1048576),
    "segment.index.bytes": ConfigSpec(INT, "10485760", low=4),
    "segment.jitter.ms": ConfigSpec(LONG, "0", low=0),
    "segment.ms": ConfigSpec(LONG, "604800000", low=1),
    "unclean.leader.election.enable": ConfigSpec(BOOLEAN, "false"),
}
"""Every topic config kgroups knows: Kafka 4's default, type and validator (LogConfig)."""


def _check(name: str, value: str | None) -> str:
    spec = SPECS.get(name)
    if spec is None:
        raise ConfigRejected(f"Unknown topic config name: {name}")
    return spec.parse(name, value)


def validate_configs(pairs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """CreateTopics' configs as overrides; `ConfigRejected` for the first bad one."""
    return {name: _check(name, value) for name, value in pairs}


def describe_topic(core: Core, resource: DescribeConfigsResource) -> DescribedResource:
    info = core.topics.get(resource.name)
    if info is None:
        return DescribedResource(
            TOPIC,
            resource.name,
            ErrorCode.unknown_topic_or_partition,
            f"Topic {resource.name} does not exist.",
        )
    wanted = None if resource.keys is None else set(resource.keys)
    entries = tuple(
        ConfigEntry(name, info.configs[name], DYNAMIC_TOPIC_CONFIG_SOURCE, config_type=spec.kind)
        if name in info.configs
        else ConfigEntry(name, spec.default, DEFAULT_CONFIG_SOURCE, config_type=spec.kind)
        for name, spec in SPECS.items()
        if wanted is None or name in wanted
    )
    return DescribedResource(TOPIC, resource.name, entries=entries)


def alter_topic(core: Core, resource: AlterConfigsResource, validate_only: bool) -> ResourceOutcome:
    """IncrementalAlterConfigs on one topic: SET or DELETE each name, all or nothing."""
    outcome = ResourceOutcome(TOPIC, resource.name)
    info = core.topics.get(resource.name)
    if info is None:
        message = f"Topic {resource.name} does not exist."
        return dataclasses.replace(
            outcome, error=ErrorCode.unknown_topic_or_partition, error_message=message
        )
    updated = dict(info.configs)
    try:
        for change in resource.changes:
            if change.operation == SET:
                updated[change.name] = _check(change.name, change.value)
            elif change.operation == DELETE:
                if change.name not in SPECS:
                    raise ConfigRejected(f"Unknown topic config name: {change.name}")
                updated.pop(change.name, None)
            else:
                raise ConfigRejected(f"{change.name}: only SET and DELETE are supported")
    except ConfigRejected as exc:
        return dataclasses.replace(outcome, error=ErrorCode.invalid_config, error_message=str(exc))
    if not validate_only and updated != info.configs:
        put_topic(core, resource.name, dataclasses.replace(info, configs=updated))
    return outcome
