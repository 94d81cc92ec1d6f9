"""The embedded store: one coordinator's records in SQLite (WAL), in its data directory.

The single-replica default (`--data-dir`): the store of `base.RecordStore`, durable once
SQLite says so (`synchronous=FULL` by default), held by one process at a time (an
exclusive `flock`). Group values are JSON (`codec`), versioned by the `schema_version` row.

A consumer-protocol group's members are rows of their own (`consumer_members`, in the
group's order by `seq`), and a snapshot writes only the members whose value changed since
this store last wrote the group: after a join into a thousand members each of their next
heartbeats moves that member's epoch alone, and rewriting the whole group (300 KB) per
batch took most of the server's time until the group settled.
"""

from __future__ import annotations

import base64
import fcntl
import os
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from kgroups.coordinator.core.records import (
    ConsumerGroupValue,
    GroupConfigRecord,
    GroupRecord,
    OffsetRecord,
    OffsetValue,
    Record,
    TopicRecord,
    TopicValue,
)
from kgroups.coordinator.store.base import StoreError
from kgroups.coordinator.store.codec import (
    decode_group,
    decode_group_configs,
    decode_topic_configs,
    encode_consumer_head,
    encode_group,
    encode_pairs,
)
from kgroups.coordinator.store.member_rows import WrittenMembers, member_writes

SCHEMA_VERSION = 3
"""1: the first; 2: topics.configs (topic config overrides, JSON [[name, value], ...]);
3: consumer_members (a consumer group's members, a row each; a group document written
before keeps its members inside, and is read as it is)."""
DB_FILE = "coordinator.db"
LOCK_FILE = "coordinator.lock"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY, topic_id TEXT NOT NULL, partitions INTEGER NOT NULL,
    created_ms INTEGER NOT NULL, configs TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS groups (group_id TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS consumer_members (
    group_id TEXT NOT NULL, member_id TEXT NOT NULL, seq INTEGER NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (group_id, member_id));
CREATE TABLE IF NOT EXISTS group_configs (group_id TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS offsets (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL, leader_epoch INTEGER NOT NULL, metadata TEXT NOT NULL,
    commit_ms INTEGER NOT NULL, expire_ms INTEGER,
    PRIMARY KEY (group_id, topic, partition));
"""


class Store:
    """One coordinator's records in `data_dir/coordinator.db`; one writer at a time."""

    def __init__(self, data_dir: Path, *, synchronous: str = "FULL") -> None:
        self.data_dir = data_dir
        self.path = data_dir / DB_FILE
        self._synchronous = synchronous
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._written: dict[str, WrittenMembers] = {}
        """Each consumer group's members as this store last wrote them."""

    def open(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:  # read-only, full, not a directory, not ours
            raise StoreError(f"cannot open {self.data_dir}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise StoreError(
                f"{self.data_dir} is in use by another coordinator (lock held on {LOCK_FILE})"
            ) from None
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) in (1, 2):
                db.execute("BEGIN IMMEDIATE")
                if int(row[0]) == 1:  # a store from before topic configs: its topics have none
                    db.execute("ALTER TABLE topics ADD COLUMN configs TEXT NOT NULL DEFAULT '[]'")
                # 2 to 3: consumer_members is made above; the groups written keep theirs.
                db.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                           (str(SCHEMA_VERSION),))  # fmt: skip
                db.execute("COMMIT")
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema {row[0]}, expected {SCHEMA_VERSION}")
            self._written = {}
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        self._db = db

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    @property
    def where(self) -> str:
        return f"data dir {self.data_dir}"

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def cluster_id(self) -> str:
        """This coordinator's cluster id, created on first start and kept forever."""
        row = self.db.execute("SELECT value FROM meta WHERE key='cluster_id'").fetchone()
        if row is not None:
            return str(row[0])
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.db.execute("INSERT INTO meta VALUES ('cluster_id', ?)", (cluster_id,))
        return cluster_id

    def load(self) -> Iterator[Record]:
        db = self.db
        for name, topic_id, partitions, created, configs in db.execute(
            "SELECT name, topic_id, partitions, created_ms, configs FROM topics ORDER BY name"
        ):
            overrides = decode_topic_configs(configs)
            yield TopicRecord(name, TopicValue(uuid.UUID(topic_id), partitions, created, overrides))
        for group_id, value in db.execute(
            "SELECT group_id, value FROM group_configs ORDER BY group_id"
        ):
            yield GroupConfigRecord(group_id, decode_group_configs(value))
        rows: dict[str, list[str]] = {}
        for group_id, value in db.execute(
            "SELECT group_id, value FROM consumer_members ORDER BY group_id, seq"
        ):
            rows.setdefault(group_id, []).append(value)
        for group_id, value in db.execute("SELECT group_id, value FROM groups ORDER BY group_id"):
            yield GroupRecord(group_id, decode_group(value, rows.get(group_id)))
        for row in db.execute(
            "SELECT group_id, topic, partition, committed_offset, leader_epoch, metadata, "
            "commit_ms, expire_ms FROM offsets ORDER BY group_id, topic, partition"
        ):
            group_id, topic, partition, offset, epoch, metadata, commit_ms, expire_ms = row
            yield OffsetRecord(
                group_id,
                topic,
                partition,
                OffsetValue(offset, epoch, metadata, commit_ms, expire_ms),
            )

    def append(self, records: Sequence[Record]) -> None:
        """Make `records` durable, in order, in one transaction."""
        if not records:
            return
        db = self.db
        # A group's record is a whole snapshot: only its last in the batch is written (a
        # consumer-protocol group may have one per heartbeat of a busy rebalance).
        last = {r.group_id: i for i, r in enumerate(records) if isinstance(r, GroupRecord)}
        written: dict[str, WrittenMembers | None] = {}
        try:
            db.execute("BEGIN IMMEDIATE")
            for i, record in enumerate(records):
                if isinstance(record, GroupRecord):
                    if last[record.group_id] == i:
                        written[record.group_id] = self._write_group(db, record)
                else:
                    self._apply(db, record)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"write to {self.path} failed: {exc}") from exc
        for group_id, members in written.items():  # what the database now holds
            if members is None:
                self._written.pop(group_id, None)
            else:
                self._written[group_id] = members

    def _write_group(self, db: sqlite3.Connection, record: GroupRecord) -> WrittenMembers | None:
        """Write a group's snapshot; a consumer group's members as this writes them."""
        group_id, value = record.group_id, record.value
        if not isinstance(value, ConsumerGroupValue):
            db.execute("DELETE FROM consumer_members WHERE group_id=?", (group_id,))
            if value is None:
                db.execute("DELETE FROM groups WHERE group_id=?", (group_id,))
            else:
                db.execute("INSERT OR REPLACE INTO groups VALUES (?,?)",
                           (group_id, encode_group(value)))  # fmt: skip
            return None
        db.execute("INSERT OR REPLACE INTO groups VALUES (?,?)",
                   (group_id, encode_consumer_head(value)))  # fmt: skip
        writes = member_writes(self._written.get(group_id), value.members)
        if writes.rewrite:
            db.execute("DELETE FROM consumer_members WHERE group_id=?", (group_id,))
        db.executemany("DELETE FROM consumer_members WHERE group_id=? AND member_id=?",
                       [(group_id, member_id) for member_id in writes.gone])  # fmt: skip
        db.executemany("INSERT OR REPLACE INTO consumer_members VALUES (?,?,?,?)",
                       [(group_id, *row) for row in writes.upserts])  # fmt: skip
        return writes.after

    @staticmethod
    def _apply(db: sqlite3.Connection, record: Record) -> None:
        if isinstance(record, OffsetRecord):
            key = (record.group_id, record.topic, record.partition)
            if record.value is None:
                db.execute("DELETE FROM offsets WHERE group_id=? AND topic=? AND partition=?", key)
            else:
                v = record.value
                db.execute(
                    "INSERT OR REPLACE INTO offsets VALUES (?,?,?,?,?,?,?,?)",
                    (
                        *key,
                        v.offset,
                        v.leader_epoch,
                        v.metadata,
                        v.commit_timestamp_ms,
                        v.expire_timestamp_ms,
                    ),
                )
        elif isinstance(record, GroupConfigRecord):
            if record.value is None:
                db.execute("DELETE FROM group_configs WHERE group_id=?", (record.group_id,))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO group_configs VALUES (?,?)",
                    (record.group_id, encode_pairs(record.value)),
                )
        elif isinstance(record, GroupRecord):
            raise TypeError("a group is written by _write_group")
        elif record.value is None:
            db.execute("DELETE FROM topics WHERE name=?", (record.name,))
        else:
            v2 = record.value
            db.execute(
                "INSERT OR REPLACE INTO topics VALUES (?,?,?,?,?)",
                (
                    record.name,
                    str(v2.topic_id),
                    v2.partitions,
                    v2.created_ms,
                    encode_pairs(v2.configs),
                ),
            )
