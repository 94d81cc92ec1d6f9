"""Group and topic configs are Kafka's types with Kafka's ranges (issue 23, finding 5).

Before: `group.initial.rebalance.delay.ms = 10^400` was accepted (a Python int has no
size) and that group's joins never completed; `1_000` was read as 1000; any integer was a
topic's `segment.bytes` and any float its `min.cleanable.dirty.ratio`. Kafka 4.4's
validators (LogConfig, GroupCoordinatorConfig) are the reference: every case below is
refused there too, with the same words.
"""

from __future__ import annotations

import pytest

from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core.topic_configs import TOPIC
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

DELAY = "group.initial.rebalance.delay.ms"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (str(10**400), "Not a number of type INT"),
        ("2147483648", "Not a number of type INT"),
        ("1_000", "Not a number of type INT"),
        ("٣٠٠٠", "Not a number of type INT"),
        ("3e3", "Not a number of type INT"),
        ("-1", "Value must be at least 0"),
        ("", "Not a number of type INT"),
    ],
)
def test_a_group_setting_outside_kafkas_int_is_refused_and_nothing_changes(
    value: str, why: str
) -> None:
    ctx = CoreContext()
    ctx.alter_group_config("g", {DELAY: "100"})
    outcome = ctx.alter_group_config("g", {DELAY: value, "group.max.size": "5"})
    assert outcome.error is ErrorCode.invalid_config
    assert why in (outcome.error_message or "")
    assert ctx.group_config("g")[DELAY][0] == "100"
    assert ctx.group_config("g")["group.max.size"][0] != "5"


def test_the_largest_int_and_a_padded_number_are_accepted() -> None:
    ctx = CoreContext()
    assert ctx.alter_group_config("g", {"group.max.size": "2147483647"}).error is ErrorCode.none
    assert ctx.alter_group_config("g", {DELAY: " 250 "}).error is ErrorCode.none
    assert ctx.group_config("g")[DELAY][0] == "250"


def alter_topic(ctx: CoreContext, name: str, value: str) -> mk.ResourceOutcome:
    req = mk.AlterConfigsRequest(
        (mk.AlterConfigsResource(TOPIC, "t", (mk.ConfigChange(name, 0, value),)),), False
    )
    outcome: mk.ResourceOutcome = ctx.reply(ctx.send(req, version=1)).results[0]
    return outcome


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("segment.bytes", "1000", "Value must be at least 1048576"),
        ("segment.bytes", "4294967296", "Not a number of type INT"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("retention.ms", str(2**63), "Not a number of type LONG"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "NaN", "Not a number of type DOUBLE"),
        ("min.cleanable.dirty.ratio", "1e400", "Not a number of type DOUBLE"),
        ("cleanup.policy", "compact,forever", "String must be one of: compact, delete"),
        ("compression.type", "brotli", "String must be one of: uncompressed"),
        ("message.timestamp.type", "createtime", "String must be one of: CreateTime"),
        ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
    ],
)
def test_a_topic_config_outside_kafkas_type_or_range_is_refused(
    name: str, value: str, why: str
) -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 1)
    outcome = alter_topic(ctx, name, value)
    assert outcome.error is ErrorCode.invalid_config
    assert f"Invalid value {value} for configuration {name}: {why}" in (outcome.error_message or "")
    assert ctx.core.topics["t"].configs == {}


def test_topic_configs_within_range_are_kept_as_kafka_normalizes_them() -> None:
    ctx = CoreContext()
    ctx.create_topic("t", 1)
    for name, value in (("cleanup.policy", "compact, delete"),
                        ("unclean.leader.election.enable", "TRUE"),
                        ("min.cleanable.dirty.ratio", "0.25"), ("retention.ms", "-1")):  # fmt: skip
        assert alter_topic(ctx, name, value).error is ErrorCode.none
    assert ctx.core.topics["t"].configs == {
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
        "min.cleanable.dirty.ratio": "0.25",
        "retention.ms": "-1",
    }
