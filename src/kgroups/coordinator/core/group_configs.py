"""IncrementalAlterConfigs and DescribeConfigs (TOPIC resources go to `topic_configs.py`).

Per-group overrides of the coordinator's group settings (what a ConsumerGroup's
`spec.settings` becomes), set and read through the standard admin APIs.

Kafka 4 configures groups as a ConfigResource of type GROUP (KIP-848) through
IncrementalAlterConfigs and DescribeConfigs; kgroups uses the same resource for the classic
settings a Kafka operator would otherwise set broker-wide: session-timeout bounds, the
initial rebalance delay, the group size limit and offset retention. Each is a Kafka
INT, parsed and range-checked as Kafka's ConfigDef does (`config_values.py`). Each
resource is applied whole or not at all: a bad name or value, or bounds that would cross,
changes nothing. Overrides are a record of their own, persisted before the reply, and may exist
before any member has joined (the operator registers a group ahead of its pods).

Each resource is authorized on its own, before anything else is checked: DESCRIBE_CONFIGS
or ALTER_CONFIGS on the group, the topic, or the cluster (for broker resources), refused
with that resource's kind of authorization error and left unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kgroups.coordinator.core.authz import MESSAGES, allowed, config_action, config_refusal
from kgroups.coordinator.core.config import CoordinatorConfig
from kgroups.coordinator.core.config_values import INT, ConfigSpec
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.msg_configs import (
    AlterConfigsRequest,
    AlterConfigsResource,
    AlterConfigsResponse,
    ConfigEntry,
    ConfigRejected,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedResource,
    ResourceOutcome,
)
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.records import GroupConfigRecord
from kgroups.coordinator.core.topic_configs import TOPIC, alter_topic, describe_topic
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import GROUP_RESOURCE_TYPE, GroupConfig
from kgroups.security.actions import Operation

GROUP = GROUP_RESOURCE_TYPE
SET, DELETE = 0, 1
GROUP_CONFIG_SOURCE, STATIC_BROKER_CONFIG_SOURCE = 8, 4

SETTINGS: dict[str, str] = {
    GroupConfig.MIN_SESSION_TIMEOUT_MS: "group_min_session_timeout_ms",
    GroupConfig.MAX_SESSION_TIMEOUT_MS: "group_max_session_timeout_ms",
    GroupConfig.INITIAL_REBALANCE_DELAY_MS: "group_initial_rebalance_delay_ms",
    GroupConfig.MAX_SIZE: "group_max_size",
    GroupConfig.OFFSETS_RETENTION_MINUTES: "offsets_retention_minutes",
    GroupConfig.CONSUMER_SESSION_TIMEOUT_MS: "group_consumer_session_timeout_ms",
    GroupConfig.CONSUMER_HEARTBEAT_INTERVAL_MS: "group_consumer_heartbeat_interval_ms",
}
"""Kafka config name -> CoordinatorConfig field, for every setting a group may override."""
SPECS: dict[str, ConfigSpec] = {
    GroupConfig.MIN_SESSION_TIMEOUT_MS: ConfigSpec(INT, "", low=1),
    GroupConfig.MAX_SESSION_TIMEOUT_MS: ConfigSpec(INT, "", low=1),
    GroupConfig.INITIAL_REBALANCE_DELAY_MS: ConfigSpec(INT, "", low=0),
    GroupConfig.MAX_SIZE: ConfigSpec(INT, "", low=1),
    GroupConfig.OFFSETS_RETENTION_MINUTES: ConfigSpec(INT, "", low=1),
    GroupConfig.CONSUMER_SESSION_TIMEOUT_MS: ConfigSpec(INT, "", low=1),
    GroupConfig.CONSUMER_HEARTBEAT_INTERVAL_MS: ConfigSpec(INT, "", low=1),
}
"""Each setting's type and range: all Kafka INTs (32 bits); Kafka's own validators
(`atLeast(1)` for group.max.size and offsets.retention.minutes), and positive session
timeouts and a delay of 0 or more where Kafka leaves them unchecked."""


def group_config(core: Core, group_id: str) -> CoordinatorConfig:
    """The settings in force for one group: the coordinator's, with the group's overrides."""
    overrides = core.group_configs.get(group_id)
    if not overrides:
        return core.config
    made = core.configs_made.get(group_id)
    if made is not None and made[1] is core.config and made[0] == overrides:
        return made[2]
    if len(core.configs_made) > 2 * len(core.group_configs) + 16:
        core.configs_made.clear()  # groups whose overrides went: forget, never grow
    config = _with(core.config, overrides)
    core.configs_made[group_id] = (dict(overrides), core.config, config)
    return config


def _with(config: CoordinatorConfig, overrides: dict[str, int]) -> CoordinatorConfig:
    fields: dict[str, Any] = {SETTINGS[name]: value for name, value in overrides.items()}
    return dataclasses.replace(config, **fields)


def _apply(current: dict[str, int], resource: AlterConfigsResource) -> dict[str, int]:
    updated = dict(current)
    for change in resource.changes:
        if change.name not in SETTINGS:
            raise ConfigRejected(
                f"unknown group config {change.name!r}; known: {', '.join(sorted(SETTINGS))}"
            )
        if change.operation == DELETE:
            updated.pop(change.name, None)
        elif change.operation == SET:
            updated[change.name] = int(SPECS[change.name].parse(change.name, change.value))
        else:
            raise ConfigRejected(f"{change.name}: only SET and DELETE apply to a number")
    return updated


def _validate(core: Core, overrides: dict[str, int]) -> None:
    for name, value in overrides.items():  # stored ones included (older, laxer versions)
        SPECS[name].parse(name, str(value))
    merged = _with(core.config, overrides)
    try:
        merged.validate()
    except ValueError as exc:
        raise ConfigRejected(str(exc).replace("_", ".")) from exc


def _refused(ctx: RequestContext, operation: Operation, resource_type: int, name: str) -> bool:
    action = config_action(operation, resource_type, name)
    return action is not None and not allowed(ctx, action)


def handle_alter(core: Core, ctx: RequestContext, req: AlterConfigsRequest) -> None:
    results: list[ResourceOutcome] = []
    for resource in req.resources:
        outcome = ResourceOutcome(resource.resource_type, resource.name)
        if _refused(ctx, Operation.ALTER_CONFIGS, resource.resource_type, resource.name):
            code = config_refusal(resource.resource_type)
            outcome = dataclasses.replace(outcome, error=code, error_message=MESSAGES[code])
        elif resource.resource_type == TOPIC:
            outcome = alter_topic(core, resource, req.validate_only)
        elif resource.resource_type != GROUP:
            outcome = dataclasses.replace(
                outcome,
                error=ErrorCode.invalid_request,
                error_message="a kgroups coordinator configures GROUP and TOPIC resources only",
            )
        elif not resource.name:
            outcome = dataclasses.replace(outcome, error=ErrorCode.invalid_group_id)
        else:
            try:
                updated = _apply(core.group_configs.get(resource.name, {}), resource)
                _validate(core, updated)
            except ConfigRejected as exc:
                outcome = dataclasses.replace(
                    outcome, error=ErrorCode.invalid_config, error_message=str(exc)
                )
            else:
                if not req.validate_only:
                    set_overrides(core, resource.name, updated)
        results.append(outcome)
    core.out.reply(ctx.ref, AlterConfigsResponse(tuple(results)))


def set_overrides(core: Core, group_id: str, overrides: dict[str, int]) -> None:
    if overrides == core.group_configs.get(group_id, {}):
        return
    if overrides:
        core.group_configs[group_id] = overrides
    else:
        core.group_configs.pop(group_id, None)
    value = tuple(sorted(overrides.items())) if overrides else None
    core.out.persist(GroupConfigRecord(group_id, value))


def handle_describe(core: Core, ctx: RequestContext, req: DescribeConfigsRequest) -> None:
    results: list[DescribedResource] = []
    for resource in req.resources:
        kind, name = resource.resource_type, resource.name
        if _refused(ctx, Operation.DESCRIBE_CONFIGS, kind, name):
            code = config_refusal(kind)
            results.append(DescribedResource(kind, name, code, MESSAGES[code]))
            continue
        if resource.resource_type == TOPIC:
            results.append(describe_topic(core, resource))
            continue
        if resource.resource_type != GROUP:
            results.append(
                DescribedResource(
                    resource.resource_type,
                    resource.name,
                    ErrorCode.invalid_request,
                    "a kgroups coordinator describes GROUP and TOPIC resources only",
                )
            )
            continue
        overrides = core.group_configs.get(resource.name, {})
        effective = group_config(core, resource.name)
        names = sorted(SETTINGS) if resource.keys is None else resource.keys
        entries = tuple(
            ConfigEntry(
                name,
                str(getattr(effective, SETTINGS[name])),
                GROUP_CONFIG_SOURCE if name in overrides else STATIC_BROKER_CONFIG_SOURCE,
            )
            for name in names
            if name in SETTINGS
        )
        results.append(DescribedResource(resource.resource_type, resource.name, entries=entries))
    core.out.reply(ctx.ref, DescribeConfigsResponse(tuple(results)))
