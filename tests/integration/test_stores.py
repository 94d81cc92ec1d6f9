"""Both stores, SQLite and a real PostgreSQL: a compacted log of records that outlives the
process, one writer at a time, every batch all or nothing."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from kgroups.coordinator.core.msg_group import Protocol
from kgroups.coordinator.core.records import (
    ConsumerGroupValue,
    ConsumerMemberValue,
    GroupConfigRecord,
    GroupRecord,
    GroupValue,
    MemberValue,
    OffsetRecord,
    OffsetValue,
    Record,
    TopicRecord,
    TopicValue,
)
from kgroups.coordinator.core.shards import shard_of
from kgroups.coordinator.core.states import GroupState
from kgroups.coordinator.store import DB_FILE, RecordStore, Store, StoreError
from kgroups.coordinator.store.postgres import Fence, PostgresStore, ReplicaStore, redacted
from tests.postgres import PASSWORD, PostgresServer

MEMBER = MemberValue("m-1", "i-1", "client", "/10.0.0.1", 30_000, 10_000,
                     (Protocol("range", b"\x00\x01"), Protocol("sticky", b"")), b"\xff\x00")  # fmt: skip
GROUP = GroupValue(7, GroupState.STABLE, 123, "consumer", "range", "m-1", (MEMBER,))

CONSUMER_GROUP = ConsumerGroupValue(
    group_epoch=9, assignment_epoch=8, assignment_timestamp_ms=1234, metadata_hash=-77,
    owner="User:alice",
    members=(
        ConsumerMemberValue("m-1", "i-1", "rack-a", "client", "/10.0.0.1", ("t", "u"), None,
                            300_000, "range", 8, 7, 1, (("t", ((0, 7), (1, 8))),),
                            (("u", ((2, 5),)),), (("t", (0, 1, 3)),)),
        ConsumerMemberValue("m-2", None, None, "c2", "/10.0.0.2", (), "ord.*", 60_000, None,
                            -2, 8, 127, (), (), ()),
        ConsumerMemberValue("m-3", None, None, "c3", "/10.0.0.3", ("t",), None, 45_000, None,
                            8, 8, 0, (("t", ((2, 8),)),), (), (("t", (2,)),),
                            classic_session_timeout_ms=10_000,
                            classic_protocols=(Protocol("range", b"\x00\x03"),
                                               Protocol("cooperative-sticky", b""))),
    ),
)  # fmt: skip
"""A consumer-protocol group with every field set (an unknown member state included, and
a classic member inside it, with its session timeout and protocols)."""

Opener = Callable[[], RecordStore]


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the test's store (again): each call is a new process's view of it."""
    opened: list[RecordStore] = []
    if request.param == "sqlite":

        def make() -> RecordStore:
            return Store(tmp_path)
    else:
        url = request.getfixturevalue("postgres").create_database()

        def make() -> RecordStore:
            return PostgresStore(url, shards=50, retry_s=20)

    def open_one() -> RecordStore:
        store = make()
        store.open()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def test_records_round_trip_with_tombstones(opener: Opener) -> None:
    store = opener()
    topic = TopicRecord("t", TopicValue(uuid.UUID(int=5), 3, 99, (("retention.ms", "5"),)))
    offset = OffsetRecord("g", "t", 2, OffsetValue(42, 1, "meta", 1000, None))
    settings = GroupConfigRecord("g", (("group.min.session.timeout.ms", 1000),))
    store.append([topic, GroupRecord("g", GROUP), offset, GroupRecord("gone", GROUP), settings])
    store.append([GroupRecord("gone", None), OffsetRecord("g", "t", 9, None),
                  OffsetRecord("g", "t", 3, OffsetValue(7, -1, "", 5, 6000))])  # fmt: skip
    store.close()
    store = opener()
    assert list(store.load()) == [
        topic,
        settings,
        GroupRecord("g", GROUP),
        offset,
        OffsetRecord("g", "t", 3, OffsetValue(7, -1, "", 5, 6000)),
    ]


def test_consumer_protocol_groups_round_trip_beside_classic_ones(opener: Opener) -> None:
    store = opener()
    store.append([GroupRecord("classic", GROUP), GroupRecord("modern", CONSUMER_GROUP)])
    store.close()
    assert list(opener().load()) == [
        GroupRecord("classic", GROUP),
        GroupRecord("modern", CONSUMER_GROUP),
    ]


def test_the_latest_value_of_a_key_wins_within_a_batch_and_across_batches(opener: Opener) -> None:
    store = opener()
    for n in range(3):
        store.append([OffsetRecord("g", "t", 0, OffsetValue(n, -1, "", n, None))])
    store.append([OffsetRecord("g", "t", 0, OffsetValue(10, -1, "", 10, None)),
                  OffsetRecord("g", "t", 0, None),
                  OffsetRecord("g", "t", 0, OffsetValue(11, -1, "", 11, None)),
                  GroupRecord("h", GROUP), GroupRecord("h", None)])  # fmt: skip
    assert list(store.load()) == [OffsetRecord("g", "t", 0, OffsetValue(11, -1, "", 11, None))]


def test_cluster_id_is_created_once(opener: Opener) -> None:
    store = opener()
    first = store.cluster_id()
    store.close()
    assert opener().cluster_id() == first


def test_a_store_serves_one_coordinator_at_a_time(opener: Opener) -> None:
    store = opener()
    with pytest.raises(StoreError, match="in use"):
        opener()
    store.close()
    opener()


def test_kafka_strings_the_database_cannot_hold_round_trip(opener: Opener) -> None:
    """Kafka strings may hold U+0000 (PostgreSQL text cannot) and anything else: a hostile
    group id must not stop the coordinator, and nothing may come back different."""
    store = opener()
    odd = ["nul\x00in the middle", "\x1bstarts with ESC", "\x1b", "é✓ 𝄞", "'; DROP TABLE x; --"]
    records: list[Record] = []
    for text in odd:
        records += [GroupRecord(text, GROUP),
                    OffsetRecord(text, text, 0, OffsetValue(1, -1, text, 1, None))]  # fmt: skip
    store.append(records)
    store.close()
    loaded = list(opener().load())
    assert sorted(map(repr, loaded)) == sorted(map(repr, records))


def test_a_failed_write_raises_and_leaves_nothing_half_written(opener: Opener) -> None:
    store = opener()
    store.append([OffsetRecord("g", "t", 0, OffsetValue(1, -1, "", 1, None))])
    query = "SELECT committed_offset FROM {}offsets"
    if isinstance(store, Store):
        store.db.execute("DROP TABLE groups")
        committed = lambda: store.db.execute(query.format("")).fetchall()  # noqa: E731
    else:
        assert isinstance(store, PostgresStore)
        store.conn.execute("DROP TABLE kgroups.groups")
        committed = lambda: store.conn.execute(query.format("kgroups.")).fetchall()  # noqa: E731
    with pytest.raises(StoreError, match="writ"):
        store.append(
            [OffsetRecord("g", "t", 0, OffsetValue(2, -1, "", 2, None)), GroupRecord("g", GROUP)]
        )
    # The whole batch rolled back: the offset update before the failing record is gone too.
    assert committed() == [(1,)]


# -- SQLite only ---------------------------------------------------------------------------


def opened(path: Path) -> Store:
    store = Store(path)
    store.open()
    return store


def test_a_sqlite_store_from_before_topic_configs_is_upgraded_in_place(tmp_path: Path) -> None:
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


def _with(group: ConsumerGroupValue, *members: ConsumerMemberValue) -> ConsumerGroupValue:
    return dataclasses.replace(group, members=members)


def _sql(store: RecordStore, query: str) -> list[tuple[object, ...]]:
    """`query` on either store's database; `{s}` before a table's name (PostgreSQL's are
    in schema kgroups)."""
    if isinstance(store, Store):
        return store.db.execute(query.format(s="")).fetchall()
    assert isinstance(store, PostgresStore)
    cur = store.conn.execute(query.format(s="kgroups."))
    return cur.fetchall() if cur.description is not None else []


def test_a_consumer_group_written_member_by_member_loads_as_last_written(opener: Opener) -> None:
    """Each snapshot writes the members that changed; whatever the sequence (a member
    changed, one left, one joined, the order changed, the group turned classic and back,
    deleted), a new process loads exactly the last snapshot, members in order."""
    m1, m2, m3 = CONSUMER_GROUP.members
    m1b = dataclasses.replace(m1, epoch=9)
    m4 = dataclasses.replace(m2, member_id="m-4")
    steps = [
        CONSUMER_GROUP,
        _with(CONSUMER_GROUP, m1b, m2, m3),  # one member's epoch moved
        _with(CONSUMER_GROUP, m1b, m3),  # one left
        _with(CONSUMER_GROUP, m1b, m3, m4),  # one joined
        _with(CONSUMER_GROUP, m3, m1b, m4),  # reordered
        back := _with(CONSUMER_GROUP, m3, m4, m2, m1b),  # one came back, another moved last
        GROUP,  # classic now (its member rows gone)
        back,  # the same members again
        CONSUMER_GROUP,
    ]
    for step in steps:
        store = opener()
        store.append([GroupRecord("g", step)])
        assert list(store.load()) == [GroupRecord("g", step)]
        store.close()
    store = opener()
    for step in steps:  # one process: each snapshot written over the one before
        store.append([GroupRecord("g", step)])
        assert list(store.load()) == [GroupRecord("g", step)], step
        rows = 0 if isinstance(step, GroupValue) else len(step.members)
        assert _sql(store, "SELECT count(*) FROM {s}consumer_members") == [(rows,)]
    store.append([GroupRecord("g", None)])
    store.close()
    store = opener()
    assert list(store.load()) == []
    assert _sql(store, "SELECT count(*) FROM {s}consumer_members") == [(0,)]


def test_a_snapshot_after_one_members_change_writes_that_member(tmp_path: Path) -> None:
    """A thousand-member group's heartbeat that moved one member's epoch writes the head
    and that member's row, not the other 999 (Kafka appends the one member's record)."""
    members = [dataclasses.replace(CONSUMER_GROUP.members[0], member_id=f"m-{n}")
               for n in range(1000)]  # fmt: skip
    store = opened(tmp_path)
    store.append([GroupRecord("g", _with(CONSUMER_GROUP, *members))])
    before = store.db.total_changes
    members[500] = dataclasses.replace(members[500], epoch=10)
    store.append([GroupRecord("g", _with(CONSUMER_GROUP, *members))])
    assert store.db.total_changes - before == 2
    store.close()
    (loaded,) = opened(tmp_path).load()
    assert isinstance(loaded, GroupRecord) and loaded.value == _with(CONSUMER_GROUP, *members)


def test_a_failed_write_of_a_consumer_group_writes_it_whole_the_next_time(
    opener: Opener,
) -> None:
    """A batch that failed after a group's rows were written rolled them back: the store
    must not take them as written."""
    m1, m2, m3 = CONSUMER_GROUP.members
    store = opener()
    store.append([GroupRecord("g", CONSUMER_GROUP)])
    changed = _with(CONSUMER_GROUP, m1, dataclasses.replace(m2, epoch=9), m3)
    _sql(store, "ALTER TABLE {s}topics RENAME TO gone_topics")
    with pytest.raises(StoreError, match="writ"):
        store.append([GroupRecord("g", changed), TopicRecord("t", None)])
    _sql(store, "ALTER TABLE {s}gone_topics RENAME TO topics")
    store.append([GroupRecord("g", _with(CONSUMER_GROUP, m1, m3))])
    store.close()
    assert list(opener().load()) == [GroupRecord("g", _with(CONSUMER_GROUP, m1, m3))]


def test_a_schema_2_store_keeps_its_consumer_groups_and_writes_members_as_rows(
    tmp_path: Path,
) -> None:
    """A consumer group written before member rows (its members inside its document)
    loads as it was after the upgrade, and its next snapshot is written as rows."""
    from kgroups.coordinator.store.codec import encode_group

    store = opened(tmp_path)
    store.close()
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.execute("DROP TABLE consumer_members")
    db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    db.execute("INSERT INTO groups VALUES ('g', ?)", (encode_group(CONSUMER_GROUP),))
    db.commit()
    db.close()
    store = opened(tmp_path)
    assert list(store.load()) == [GroupRecord("g", CONSUMER_GROUP)]
    assert store.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
        "3",
    )
    store.append([GroupRecord("g", CONSUMER_GROUP)])
    assert store.db.execute("SELECT count(*) FROM consumer_members").fetchone() == (3,)
    store.close()
    assert list(opened(tmp_path).load()) == [GroupRecord("g", CONSUMER_GROUP)]


def test_a_sqlite_store_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    opened(tmp_path).close()
    db = sqlite3.connect(tmp_path / "coordinator.db")
    db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema 999"):
        opened(tmp_path)


# -- PostgreSQL only -----------------------------------------------------------------------


def test_each_group_row_carries_the_shard_kafka_would_give_it(postgres: PostgresServer) -> None:
    url = postgres.create_database()
    store = PostgresStore(url, shards=7)
    store.open()
    groups = [f"group-{n}" for n in range(40)]
    store.append([OffsetRecord(g, "t", 0, OffsetValue(1, -1, "", 1, None)) for g in groups]
                 + [GroupRecord(g, GROUP) for g in groups])  # fmt: skip
    for table in ("groups", "offsets"):
        rows = dict(store.conn.execute(f"SELECT group_id, shard FROM kgroups.{table}").fetchall())
        assert rows == {g: shard_of(g, 7) for g in groups}
    assert len(set(rows.values())) == 7  # 40 groups spread over every shard
    store.close()
    with pytest.raises(StoreError, match="created with 7 shards"):
        PostgresStore(url, shards=50).open()


def _versions(store: PostgresStore) -> dict[str, str]:
    """Each member row's version (xmin: the transaction that last wrote it)."""
    query = "SELECT member_id, xmin::text FROM kgroups.consumer_members"
    return dict(store.conn.execute(query).fetchall())


def test_a_postgresql_snapshot_after_one_members_change_writes_that_members_row(
    postgres: PostgresServer,
) -> None:
    """As in SQLite: a heartbeat that moved one member's epoch in a thousand-member group
    writes the head and that member's row, not the group's 300 KB."""
    members = [dataclasses.replace(CONSUMER_GROUP.members[0], member_id=f"m-{n}")
               for n in range(1000)]  # fmt: skip
    url = postgres.create_database()
    store = PostgresStore(url)
    store.open()
    store.append([GroupRecord("g", _with(CONSUMER_GROUP, *members))])
    before = _versions(store)
    members[500] = dataclasses.replace(members[500], epoch=10)
    store.append([GroupRecord("g", _with(CONSUMER_GROUP, *members))])
    after = _versions(store)
    assert [m for m, version in after.items() if version != before[m]] == ["m-500"]
    store.close()
    again = PostgresStore(url)
    again.open()
    assert list(again.load()) == [GroupRecord("g", _with(CONSUMER_GROUP, *members))]
    again.close()


def _replica_store(url: str, name: str, shard: int, epoch: int) -> PostgresStore:
    """A replica's store holding `shard` at `epoch` (set in the database here, as a tick
    would)."""
    store = ReplicaStore(url, fence=Fence(name))
    store.open()
    store.conn.execute(
        "UPDATE kgroups.shard_owners SET owner = %s, epoch = %s, "
        "expires_at = now() + interval '1 hour' WHERE shard = %s",
        (name, epoch, shard),
    )
    store.fence.hold(shard, epoch)
    return store


def test_a_replica_writes_member_rows_only_while_every_replica_reads_them(
    postgres: PostgresServer,
) -> None:
    """A replica from before member rows (still running through an upgrade) would load a
    group written as rows without its members: until every live replica reads them
    (`member_rows`, from the leases) a replica writes whole groups, and a group written
    whole loses the rows it had."""
    url = postgres.create_database()
    shard = shard_of("g", 50)
    store = _replica_store(url, "r0", shard, 1)
    m1, m2, m3 = CONSUMER_GROUP.members
    changed = _with(CONSUMER_GROUP, m1, dataclasses.replace(m2, epoch=9), m3)
    for rows, value in ((False, CONSUMER_GROUP), (True, changed), (False, CONSUMER_GROUP),
                        (True, changed)):  # fmt: skip
        store.member_rows = rows
        store.append([GroupRecord("g", value)])
        (head,) = store.conn.execute("SELECT value FROM kgroups.groups").fetchone() or ()
        count = store.conn.execute("SELECT count(*) FROM kgroups.consumer_members").fetchone()
        assert count == ((3,) if rows else (0,))
        assert ('"member_rows":true' in head) is rows
        assert store.load_shard(shard) == [GroupRecord("g", value)]
    store.close()


def test_a_replica_that_loads_a_shard_again_writes_its_groups_whole(
    postgres: PostgresServer,
) -> None:
    """Another replica may have written a group while this one did not hold its shard:
    after loading the shard again, its member rows are written whole, not as changes
    against what this replica wrote before."""
    url = postgres.create_database()
    shard = shard_of("g", 50)
    m1, m2, m3 = CONSUMER_GROUP.members
    m4 = dataclasses.replace(m2, member_id="m-4")
    a = _replica_store(url, "a", shard, 1)
    a.member_rows = True
    a.append([GroupRecord("g", CONSUMER_GROUP)])
    b = _replica_store(url, "b", shard, 2)  # took the shard over
    b.member_rows = True
    assert b.load_shard(shard) == [GroupRecord("g", CONSUMER_GROUP)]
    b.append([GroupRecord("g", _with(CONSUMER_GROUP, m1, m3, m4))])
    b.close()
    a.conn.execute("UPDATE kgroups.shard_owners SET owner = 'a', epoch = 3 WHERE shard = %s",
                   (shard,))  # fmt: skip
    a.fence.hold(shard, 3)
    assert a.load_shard(shard) == [GroupRecord("g", _with(CONSUMER_GROUP, m1, m3, m4))]
    a.append([GroupRecord("g", CONSUMER_GROUP)])  # its members as a wrote them before
    assert a.load_shard(shard) == [GroupRecord("g", CONSUMER_GROUP)]
    a.close()


def test_a_schema_3_database_keeps_its_consumer_groups_and_writes_members_as_rows(
    postgres: PostgresServer,
) -> None:
    """A consumer group written before member rows (its members inside its document)
    loads as it was after the upgrade, and its next snapshot is written as rows."""
    from kgroups.coordinator.store.codec import encode_group

    url = postgres.create_database()
    store = PostgresStore(url)
    store.open()
    for statement in (
        "DROP TABLE kgroups.consumer_members",
        "ALTER TABLE kgroups.replicas DROP COLUMN member_rows",
        "UPDATE kgroups.meta SET value = '3' WHERE key = 'schema_version'",
    ):
        store.conn.execute(statement)
    store.conn.execute("INSERT INTO kgroups.groups VALUES ('g', %s, %s)",
                       (shard_of("g", 50), encode_group(CONSUMER_GROUP)))  # fmt: skip
    store.close()
    store = PostgresStore(url)
    store.open()
    assert list(store.load()) == [GroupRecord("g", CONSUMER_GROUP)]
    version = "SELECT value FROM kgroups.meta WHERE key = 'schema_version'"
    assert store.conn.execute(version).fetchone() == ("4",)
    store.append([GroupRecord("g", CONSUMER_GROUP)])
    assert store.conn.execute("SELECT count(*) FROM kgroups.consumer_members").fetchone() == (3,)
    store.close()
    store = PostgresStore(url)
    store.open()
    assert list(store.load()) == [GroupRecord("g", CONSUMER_GROUP)]
    store.close()


def test_a_newer_schema_is_refused_and_an_older_one_is_not_touched(
    postgres: PostgresServer,
) -> None:
    url = postgres.create_database()
    store = PostgresStore(url)
    store.open()
    store.conn.execute("UPDATE kgroups.meta SET value = '99' WHERE key = 'schema_version'")
    store.close()
    with pytest.raises(StoreError, match="schema 99, newer"):
        PostgresStore(url).open()


def test_credentials_come_from_the_environment_as_for_psql(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres.create_database().replace(f":{PASSWORD}@", "@")
    with pytest.raises(StoreError, match="password") as refused:
        PostgresStore(url).open()
    assert PASSWORD not in str(refused.value)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    store = PostgresStore(url)
    store.open()
    store.close()
    assert PASSWORD not in redacted(postgres.url()) and "127.0.0.1" in redacted(postgres.url())


def test_writes_wait_out_a_database_restart_and_lose_nothing(postgres: PostgresServer) -> None:
    """PostgreSQL restarting (a crash, here: no checkpoint) delays the writer; the batch
    then commits on a new connection, and the store's lock is taken again first."""
    url = postgres.create_database()
    store = PostgresStore(url, retry_s=60)
    store.open()
    store.append([OffsetRecord("g", "t", 0, OffsetValue(1, -1, "", 1, None))])
    postgres.stop(mode="immediate")
    restarted = threading.Timer(1.5, postgres.start_again)
    restarted.start()
    began = time.monotonic()
    store.append([OffsetRecord("g", "t", 0, OffsetValue(2, -1, "", 2, None))])
    waited = time.monotonic() - began
    restarted.join()
    assert waited >= 1.0
    with pytest.raises(StoreError, match="in use"):
        PostgresStore(url).open()  # the reconnected writer holds the lock again
    store.close()
    again = PostgresStore(url)
    again.open()
    assert list(again.load()) == [OffsetRecord("g", "t", 0, OffsetValue(2, -1, "", 2, None))]
    again.close()


def test_a_database_away_longer_than_the_retry_budget_fails_the_write(
    postgres: PostgresServer,
) -> None:
    url = postgres.create_database()
    store = PostgresStore(url, retry_s=1.0)
    store.open()
    postgres.stop(mode="fast")
    try:
        with pytest.raises(StoreError, match="writing"):
            store.append([OffsetRecord("g", "t", 0, OffsetValue(1, -1, "", 1, None))])
    finally:
        postgres.start_again()
        store.close()


def test_a_replica_session_ended_for_idling_in_a_transaction_is_replaced(
    postgres: PostgresServer,
) -> None:
    """PostgreSQL ends a replica's session that sits in a transaction past half a lease
    (its process frozen, or starved on a loaded machine): the replica's next read is made
    on a new session, not failed (a failed load of its shards stopped a replica)."""
    url = postgres.create_database()
    first = PostgresStore(url)
    first.open()
    first.append([OffsetRecord("g", "t", 0, OffsetValue(7, -1, "", 1, None))])
    first.close()
    replica = ReplicaStore(url, fence=Fence("r0"), lease_ttl_s=0.2, retry_s=10)
    replica.open()
    ended = replica.conn
    ended.execute("BEGIN")
    time.sleep(0.5)  # the session's limit is 100 ms
    try:
        records = replica.load_shard(shard_of("g", replica.shards))
        assert [r.value.offset for r in records if isinstance(r, OffsetRecord) and r.value] == [7]
        assert ended.closed and replica.conn is not ended
    finally:
        replica.close()


def test_another_writer_taking_the_lock_while_the_database_was_away_is_not_overwritten(
    postgres: PostgresServer,
) -> None:
    """A coordinator whose connection dropped must not write once another took the store."""
    url = postgres.create_database()
    first = PostgresStore(url, retry_s=3)
    first.open()
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'kgroups-coordinator' AND datname = %s",
            (url.rsplit("/", 1)[1],),
        )
    second = PostgresStore(url)
    second.open()
    with pytest.raises(StoreError, match="in use by another coordinator"):
        first.append([OffsetRecord("g", "t", 0, OffsetValue(1, -1, "", 1, None))])
    assert list(second.load()) == []
    first.close()
    second.close()
