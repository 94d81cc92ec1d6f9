"""The protocol's vocabulary is defined once (kgroups.protocol.groups) and used by all.

The chart cannot import Python, so its defaults are compared here; in Python, a second
definition of a shared constant is the drift this module exists to prevent.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core.group_configs import SETTINGS
from kgroups.operator.groups import SETTING_NAMES
from kgroups.protocol.groups import COORDINATOR, MEMBER, GroupConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_charts_coordinator_defaults_are_kafkas() -> None:
    values = yaml.safe_load((ROOT / "charts/kgroups/values.yaml").read_text())
    config = values["coordinator"]["config"]
    assert config == {
        "initialRebalanceDelayMs": COORDINATOR.initial_rebalance_delay_ms,
        "minSessionTimeoutMs": COORDINATOR.min_session_timeout_ms,
        "maxSessionTimeoutMs": COORDINATOR.max_session_timeout_ms,
        "maxGroupSize": COORDINATOR.max_size,
        "offsetsRetentionMinutes": COORDINATOR.offsets_retention_minutes,
        "consumerSessionTimeoutMs": COORDINATOR.consumer_session_timeout_ms,
        "consumerHeartbeatIntervalMs": COORDINATOR.consumer_heartbeat_interval_ms,
        "consumerMigrationPolicy": CoordinatorConfig().group_consumer_migration_policy.value,
    }
    assert CoordinatorConfig().group_consumer_migration_policy == "bidirectional"  # Kafka's


def test_the_coordinator_the_operator_and_the_protocol_name_the_same_settings() -> None:
    assert set(SETTINGS) == set(GroupConfig)
    assert set(SETTING_NAMES.values()) == set(GroupConfig)
    defaults = CoordinatorConfig()
    assert defaults.group_min_session_timeout_ms == COORDINATOR.min_session_timeout_ms
    assert defaults.group_initial_rebalance_delay_ms == COORDINATOR.initial_rebalance_delay_ms


def test_member_defaults_are_kafkas_consumer_defaults() -> None:
    # session.timeout.ms, heartbeat.interval.ms, max.poll.interval.ms (Kafka 3.0+)
    assert (MEMBER.session_timeout_ms, MEMBER.heartbeat_interval_ms,
            MEMBER.rebalance_timeout_ms) == (45_000, 3_000, 300_000)  # fmt: skip


def test_shared_constants_are_defined_once() -> None:
    patterns = {
        "NO_GENERATION": re.compile(r"^NO_GENERATION\s*=", re.M),
        "the GROUP resource type": re.compile(r"^\w*GROUP\w*\s*=\s*32\b", re.M),
        "a group state name": re.compile(r'=\s*"(PreparingRebalance|CompletingRebalance)"'),
        "a group config name": re.compile(r'"group\.(min|max)\.session\.timeout\.ms"\s*[:,)]'),
    }
    home = ROOT / "src/kgroups/protocol/groups.py"
    for path in (ROOT / "src/kgroups").rglob("*.py"):
        if path == home:
            continue
        text = path.read_text()
        for what, pattern in patterns.items():
            assert not pattern.search(text), f"{path.relative_to(ROOT)} defines {what} again"
