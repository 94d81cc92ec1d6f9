"""Config values read as Kafka's ConfigDef reads them: a type, then a range or a choice.

A config value arrives as text (IncrementalAlterConfigs, CreateTopics' configs, a
ConsumerGroup's settings through the operator). Kafka trims it, parses it as its type
(`Integer.parseInt` for an INT: 32 bits, so `group.initial.rebalance.delay.ms =
10^400` is "Not a number of type INT", not a delay that never ends) and hands it to the
config's validator (`atLeast`, `between`, `in`). `ConfigSpec.parse` does the same and
raises `ConfigRejected` with Kafka's words; the value kept is the normalized text.

Stricter than Java where Java is loose: numbers are ASCII digits with an optional sign
(no underscores, no Unicode digits), and a DOUBLE is finite (Java's NaN passes `between`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from kgroups.coordinator.core.msg_configs import ConfigRejected

BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
"""Kafka's DescribeConfigs config types (ConfigEntry.ConfigType)."""
_BOUNDS = {INT: (-(2**31), 2**31 - 1), LONG: (-(2**63), 2**63 - 1)}
_TYPE_NAMES = {INT: "INT", LONG: "LONG", DOUBLE: "DOUBLE", BOOLEAN: "BOOLEAN"}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    kind: int
    default: str
    low: float | None = None
    """`atLeast(low)`: the smallest value accepted."""
    high: float | None = None
    """`between(low, high)`: the largest value accepted."""
    choices: tuple[str, ...] = ()
    """`in(...)`: the values a STRING, or each item of a LIST, may take."""

    def parse(self, name: str, value: str | None) -> str:
        """The value as kept (trimmed), or ConfigRejected saying why, as Kafka says it."""
        if value is None:
            raise ConfigRejected(f"Null value not supported for config: {name}")
        text = value.strip()

        def invalid(why: str) -> ConfigRejected:
            return ConfigRejected(f"Invalid value {text[:100]} for configuration {name}: {why}")

        if self.kind in _BOUNDS:
            low, high = _BOUNDS[self.kind]
            if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
                raise invalid(f"Not a number of type {_TYPE_NAMES[self.kind]}")
            self._check_range(int(text), invalid)
        elif self.kind == DOUBLE:
            if not _DECIMAL.fullmatch(text) or not math.isfinite(float(text)):
                raise invalid("Not a number of type DOUBLE")
            self._check_range(float(text), invalid)
        elif self.kind == BOOLEAN:
            if text.lower() not in ("true", "false"):
                raise invalid("Expected value to be either true or false")
            text = text.lower()
        elif self.kind == LIST:
            items = [item.strip() for item in text.split(",")] if text else []
            bad = [item for item in items if self.choices and item not in self.choices]
            if bad or not items:
                raise invalid(f"String must be one of: {', '.join(self.choices)}")
            text = ",".join(items)
        elif self.choices and text not in self.choices:
            raise invalid(f"String must be one of: {', '.join(self.choices)}")
        return text

    def _check_range(self, number: float, invalid: Callable[[str], ConfigRejected]) -> None:
        if self.low is not None and number < self.low:
            raise invalid(f"Value must be at least {_shown(self.low)}")
        if self.high is not None and number > self.high:
            raise invalid(f"Value must be no more than {_shown(self.high)}")


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)
