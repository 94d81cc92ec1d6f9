"""Writing a topic: the one place a topic's state and its record change together.

Creating, growing and reconfiguring a topic all replace the whole `TopicRecord`, so a
restart replays a topic exactly as it was last answered about.
"""

from __future__ import annotations

from kgroups.coordinator.core.context import Core, TopicInfo
from kgroups.coordinator.core.records import TopicRecord, TopicValue


def put_topic(core: Core, name: str, info: TopicInfo) -> None:
    core.topics[name] = info
    core.topic_names_by_id[info.topic_id] = name
    core.topics_version += 1
    configs = tuple(sorted(info.configs.items()))
    value = TopicValue(info.topic_id, info.partitions, info.created_ms, configs)
    core.out.persist(TopicRecord(name, value))
