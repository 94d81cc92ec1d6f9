"""DescribeConfigs for TOPIC resources: what `kafka-topics --describe`, confluent-kafka's
`describe_configs` and franz-go's `DescribeTopicConfigs` ask before they show a topic.

A kgroups topic is a name and a partition count; it stores no records, so nothing about
retention, compaction or message format applies to it and nothing can be changed. It
describes itself as a Kafka topic created with no overrides does: Kafka's defaults, each
marked as a default (so tools that print only overrides print none) and read-only.
"""

from __future__ import annotations

from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.msg_configs import (
    ConfigEntry,
    DescribeConfigsResource,
    DescribedResource,
)
from kgroups.protocol.errors import ErrorCode

TOPIC = 2
"""Kafka's ConfigResource.Type.TOPIC."""
DEFAULT_CONFIG_SOURCE = 5
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
"""Kafka's DescribeConfigs config types (ConfigEntry.ConfigType)."""

DEFAULTS: tuple[tuple[str, str, int], ...] = (
    ("cleanup.policy", "delete", LIST),
    ("compression.type", "producer", STRING),
    ("delete.retention.ms", "86400000", LONG),
    ("file.delete.delay.ms", "60000", LONG),
    ("flush.messages", "9223372036854775807", LONG),
    ("flush.ms", "9223372036854775807", LONG),
    ("index.interval.bytes", "4096", INT),
    ("max.compaction.lag.ms", "9223372036854775807", LONG),
    ("max.message.bytes", "1048588", INT),
    ("message.timestamp.after.max.ms", "3600000", LONG),
    ("message.timestamp.before.max.ms", "9223372036854775807", LONG),
    ("message.timestamp.type", "CreateTime", STRING),
    ("min.cleanable.dirty.ratio", "0.5", DOUBLE),
    ("min.compaction.lag.ms", "0", LONG),
    ("min.insync.replicas", "1", INT),
    ("retention.bytes", "-1", LONG),
    ("retention.ms", "604800000", LONG),
    ("segment.bytes", "1073741824", INT),
    ("segment.index.bytes", "10485760", INT),
    ("segment.jitter.ms", "0", LONG),
    ("segment.ms", "604800000", LONG),
    ("unclean.leader.election.enable", "false", BOOLEAN),
)
"""(name, Kafka's default value, type) of every topic config described."""


def describe_topic(core: Core, resource: DescribeConfigsResource) -> DescribedResource:
    if resource.name not in core.topics:
        return DescribedResource(
            TOPIC,
            resource.name,
            ErrorCode.unknown_topic_or_partition,
            f"Topic {resource.name} does not exist.",
        )
    wanted = None if resource.keys is None else set(resource.keys)
    entries = tuple(
        ConfigEntry(name, value, DEFAULT_CONFIG_SOURCE, read_only=True, config_type=kind)
        for name, value, kind in DEFAULTS
        if wanted is None or name in wanted
    )
    return DescribedResource(TOPIC, resource.name, entries=entries)
