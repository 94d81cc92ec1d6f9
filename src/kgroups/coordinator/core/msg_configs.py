"""IncrementalAlterConfigs and DescribeConfigs as the core sees them (GROUP and TOPIC
resources, for both)."""

from __future__ import annotations

from dataclasses import dataclass

from kgroups.protocol.errors import ErrorCode

NONE = ErrorCode.none


class ConfigRejected(ValueError):
    """A config change that cannot apply; the message says why (INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class ConfigChange:
    name: str
    operation: int
    """0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT (Kafka's AlterConfigOp.OpType)."""
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int
    name: str
    changes: tuple[ConfigChange, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool


@dataclass(frozen=True, slots=True)
class ResourceOutcome:
    resource_type: int
    name: str
    error: ErrorCode = NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResponse:
    results: tuple[ResourceOutcome, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsResource:
    resource_type: int
    name: str
    keys: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: int
    """Kafka's ConfigSource: 8 GROUP_CONFIG for a group's override, 4 STATIC_BROKER_CONFIG
    for the coordinator's setting, 5 DEFAULT_CONFIG for a topic's."""
    read_only: bool = False
    config_type: int = 3
    """Kafka's ConfigType: 3 INT (every group setting), others for topic configs."""


@dataclass(frozen=True, slots=True)
class DescribedResource:
    resource_type: int
    name: str
    error: ErrorCode = NONE
    error_message: str | None = None
    entries: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    results: tuple[DescribedResource, ...]
