"""Topic configs: kept, validated and described as Kafka does, though none changes anything.

`kafka-topics --describe`, confluent-kafka's `describe_configs` and franz-go's
`DescribeTopicConfigs` ask for a topic's configs before they show it; `kafka-topics
--create --config`, Strimzi-style tools and admin clients set them. A kgroups topic stores
no records, so retention, compaction and message format do not apply to it, but a tool
that set `cleanup.policy=compact` must read back what it set, not be told "done" and then
shown the default. So configs are validated as Kafka validates them (a known name, a value
of the right type; INVALID_CONFIG otherwise, nothing changed), kept with the topic in its
record, and described: each override as DYNAMIC_TOPIC_CONFIG, every other name with
Kafka's default as DEFAULT_CONFIG (tools that print only overrides print exactly those).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

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
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
"""Kafka's DescribeConfigs config types (ConfigEntry.ConfigType)."""
SET, DELETE = 0, 1

DEFAULTS: dict[str, tuple[str, int]] = {
    "cleanup.policy": ("delete", LIST),
    "compression.type": ("producer", STRING),
    "delete.retention.ms": ("86400000", LONG),
    "file.delete.delay.ms": ("60000", LONG),
    "flush.messages": ("9223372036854775807", LONG),
    "flush.ms": ("9223372036854775807", LONG),
    "index.interval.bytes": ("4096", INT),
    "max.compaction.lag.ms": ("9223372036854775807", LONG),
    "max.message.bytes": ("1048588", INT),
    "message.timestamp.after.max.ms": ("3600000", LONG),
    "message.timestamp.before.max.ms": ("9223372036854775807", LONG),
    "message.timestamp.type": ("CreateTime", STRING),
    "min.cleanable.dirty.ratio": ("0.5", DOUBLE),
    "min.compaction.lag.ms": ("0", LONG),
    "min.insync.replicas": ("1", INT),
    "retention.bytes": ("-1", LONG),
    "retention.ms": ("604800000", LONG),
    "segment.bytes": ("1073741824", INT),
    "segment.index.bytes": ("10485760", INT),
    "segment.jitter.ms": ("0", LONG),
    "segment.ms": ("604800000", LONG),
    "unclean.leader.election.enable": ("false", BOOLEAN),
}
"""Every topic config kgroups knows: name -> (Kafka's default, type)."""


def _check(name: str, value: str | None) -> str:
    if name not in DEFAULTS:
        raise ConfigRejected(f"Unknown topic config name: {name}")
    if value is None:
        raise ConfigRejected(f"Null value not supported for topic config: {name}")
    kind = DEFAULTS[name][1]
    try:
        if kind in (INT, LONG):
            int(value)
        elif kind == DOUBLE:
            float(value)
    except ValueError:
        raise ConfigRejected(f"Invalid value {value} for configuration {name}") from None
    if kind == BOOLEAN and value.lower() not in ("true", "false"):
        raise ConfigRejected(f"Invalid value {value} for configuration {name}: not a boolean")
    return value


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
        ConfigEntry(name, info.configs[name], DYNAMIC_TOPIC_CONFIG_SOURCE, config_type=kind)
        if name in info.configs
        else ConfigEntry(name, default, DEFAULT_CONFIG_SOURCE, config_type=kind)
        for name, (default, kind) in DEFAULTS.items()
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
                if change.name not in DEFAULTS:
                    raise ConfigRejected(f"Unknown topic config name: {change.name}")
                updated.pop(change.name, None)
            else:
                raise ConfigRejected(f"{change.name}: only SET and DELETE are supported")
    except ConfigRejected as exc:
        return dataclasses.replace(outcome, error=ErrorCode.invalid_config, error_message=str(exc))
    if not validate_only and updated != info.configs:
        put_topic(core, resource.name, dataclasses.replace(info, configs=updated))
    return outcome
