"""The SQLite store: a compacted log of records that survives the process."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from kgroups.coordinator.core.msg_group import Protocol
from kgroups.coordinator.core.records import (
    GroupRecord,
    GroupValue,
    MemberValue,
    OffsetRecord,
    OffsetValue,
    TopicRecord,
    TopicValue,
)
from kgroups.coordinator.core.states import GroupState
from kgroups.coordinator.store import DB_FILE, Store, StoreError

MEMBER = MemberValue("m-1", "i-1", "client", "/10.0.0.1", 30_000, 10_000,
                     (Protocol("range", b"\x00\x01"), Protocol("sticky", b"")), b"\xff\x00")  # fmt: skip
GROUP = GroupValue(7, GroupState.STABLE, 123, "consumer", "range", "m-1", (MEMBER,))


def opened(path: Path) -> Store:
    store = Store(path)
    store.open()
    return store


def test_records_round_trip_with_tombstones(tmp_path: Path) -> None:
    store = opened(tmp_path)
    topic = TopicRecord("t", TopicValue(uuid.UUID(int=5), 3, 99, (("retention.ms", "5"),)))
    offset = OffsetRecord("g", "t", 2, OffsetValue(42, 1, "meta", 1000, None))
    store.append([topic, GroupRecord("g", GROUP), offset, GroupRecord("gone", GROUP)])
    store.append([GroupRecord("gone", None), OffsetRecord("g", "t", 9, None)])
    store.close()
    store = opened(tmp_path)
    assert list(store.load()) == [topic, GroupRecord("g", GROUP), offset]
    store.close()


def test_a_store_from_before_topic_configs_is_upgraded_in_place(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE topics (name TEXT PRIMARY KEY, topic_id TEXT NOT NULL,"
        " partitions INTEGER NOT NULL, created_ms INTEGER NOT NULL);"
        f"INSERT INTO topics VALUES ('t', '{uuid.UUID(int=5)}', 3, 99);"
    )
    db.commit()
    db.close()
    store = opened(tmp_path)
    assert list(store.load()) == [TopicRecord("t", TopicValue(uuid.UUID(int=5), 3, 99))]
    store.append([TopicRecord("t", TopicValue(uuid.UUID(int=5), 3, 99, (("a", "b"),)))])
    store.close()
    store = opened(tmp_path)  # opened again: already upgraded
    (topic,) = store.load()
    assert isinstance(topic, TopicRecord) and topic.value and topic.value.configs == (("a", "b"),)
    store.close()


def test_the_latest_value_of_a_key_wins(tmp_path: Path) -> None:
    store = opened(tmp_path)
    for n in range(5):
        store.append([OffsetRecord("g", "t", 0, OffsetValue(n, -1, "", n, None))])
    assert [r.value.offset for r in store.load() if isinstance(r, OffsetRecord) and r.value] == [4]
    store.close()


def test_cluster_id_is_created_once(tmp_path: Path) -> None:
    store = opened(tmp_path)
    first = store.cluster_id()
    store.close()
    store = opened(tmp_path)
    assert store.cluster_id() == first
    store.close()


def test_a_data_dir_serves_one_coordinator_at_a_time(tmp_path: Path) -> None:
    store = opened(tmp_path)
    with pytest.raises(StoreError, match="in use"):
        opened(tmp_path)
    store.close()
    opened(tmp_path).close()


def test_a_store_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    opened(tmp_path).close()
    db = sqlite3.connect(tmp_path / "coordinator.db")
    db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema 999"):
        opened(tmp_path)


def test_a_failed_write_raises_and_leaves_nothing_half_written(tmp_path: Path) -> None:
    store = opened(tmp_path)
    store.append([OffsetRecord("g", "t", 0, OffsetValue(1, -1, "", 1, None))])
    store.db.execute("DROP TABLE groups")
    with pytest.raises(StoreError, match="write"):
        store.append(
            [OffsetRecord("g", "t", 0, OffsetValue(2, -1, "", 2, None)), GroupRecord("g", GROUP)]
        )
    # The whole batch rolled back: the offset update before the failing record is gone too.
    assert store.db.execute("SELECT committed_offset FROM offsets").fetchall() == [(1,)]
