"""The shared store: the coordinator's records in PostgreSQL (`--store postgresql://...`).

The same compacted log as the SQLite store (`base.RecordStore`), in the `kgroups` schema
of the database the URL names, so that the state outlives any one pod and lives on an
engine that replicates it (a CloudNativePG cluster with synchronous replicas in
production). Every group row carries its shard (`core.shards.shard_of`, fixed at
creation like Kafka's `offsets.topic.num.partitions`), which is what replicas will own.

The driver is psycopg 3, synchronous: the server already calls its store from one writer
thread, and psycopg is libpq, so the URL, `PGPASSWORD`, `PGPASSFILE`/`~/.pgpass`,
`PGSSLMODE`, `PGSSLROOTCERT` and every other libpq setting work exactly as they do for
`psql`. (asyncpg re-implements the protocol and only part of libpq's settings.)

Durability and order: `append` writes one batch in one transaction (every key's last
value in the batch; offsets in one `unnest` upsert) and returns after COMMIT, which with
PostgreSQL's default `synchronous_commit` is after the WAL is flushed (and, with a
synchronous standby, replicated). The writer thread batches everything queued, so
concurrent commits of many groups share one transaction: group commit.

The database going away (a restart, a failover to a standby, a dropped connection) is
not fatal at once: the batch is retried on a new connection for `retry_s` seconds.
Replaying a batch that did commit before the connection dropped is harmless: it writes
the same last values again, and nothing was written after it (one writer, in order).

Two ways to own it, two types. `PostgresStore`: one coordinator process owns the whole
store; it holds a session advisory lock on its connection, a second process is refused,
and a process whose connection dropped takes the lock again before it writes.
`ReplicaStore`: one replica of several sharing the shards (`coordinator/replicas.py`);
no lock, but every write is fenced (`Fence`: the shards it touches must still be this
replica's at the epochs it loaded them with), it loads the cluster's topics and group
settings at start and each shard's groups when it takes the shard, and it writes topics
and group settings only from the view it last read (`globals_seen`).

PostgreSQL text cannot hold U+0000, which Kafka strings can: a group id, topic or offset
metadata containing it (or beginning with ESC) is stored as ESC + its JSON (`_esc`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import IdleInTransactionSessionTimeout

from kgroups.coordinator.core.records import (
    ConsumerGroupValue,
    GroupConfigRecord,
    GroupRecord,
    GroupValue,
    OffsetRecord,
    OffsetValue,
    Record,
    TopicRecord,
    TopicValue,
)
from kgroups.coordinator.core.shards import DEFAULT_SHARDS, MAX_SHARDS, shard_of
from kgroups.coordinator.store.base import Fenced, GlobalsMoved, StoreError
from kgroups.coordinator.store.codec import (
    decode_group,
    decode_group_configs,
    decode_topic_configs,
    encode_consumer_head,
    encode_group,
    encode_pairs,
)
from kgroups.coordinator.store.member_rows import MemberWrites, WrittenMembers, member_writes
from kgroups.coordinator.store.notices import GLOBALS_CHANNEL

log = logging.getLogger("kgroups.coordinator.store")

SCHEMA = "kgroups"
LOCK_WAIT_S = 3.0
"""How long open waits for the lock of a coordinator whose session is ending."""
LOCK_KEY = 0x6B67726F757073
"""The session advisory lock one coordinator holds on the store ("kgroups" in ASCII)."""
MIGRATION_LOCK_KEY = LOCK_KEY + 1
"""Held for the transaction that creates or migrates the schema (several replicas start
at once)."""
CONNECT_TIMEOUT_S = 10
LOAD_BATCH_ROWS = 10_000

MIGRATIONS: tuple[str, ...] = (
    # 1: the records of the SQLite store, each group's rows with their shard.
    """
    CREATE TABLE kgroups.topics (
        name text PRIMARY KEY, topic_id uuid NOT NULL, partitions integer NOT NULL,
        created_ms bigint NOT NULL, configs text NOT NULL DEFAULT '[]');
    CREATE TABLE kgroups.groups (
        group_id text PRIMARY KEY, shard smallint NOT NULL, value text NOT NULL);
    CREATE INDEX groups_by_shard ON kgroups.groups (shard);
    CREATE TABLE kgroups.group_configs (
        group_id text PRIMARY KEY, shard smallint NOT NULL, value text NOT NULL);
    CREATE INDEX group_configs_by_shard ON kgroups.group_configs (shard);
    CREATE TABLE kgroups.offsets (
        group_id text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
        shard smallint NOT NULL, committed_offset bigint NOT NULL,
        leader_epoch integer NOT NULL, metadata text NOT NULL, commit_ms bigint NOT NULL,
        expire_ms bigint, PRIMARY KEY (group_id, topic, partition));
    CREATE INDEX offsets_by_shard ON kgroups.offsets (shard);
    """,
    # 2: replicas sharing the shards (`leases.py`): who is alive, who owns which shard.
    """
    CREATE TABLE kgroups.replicas (
        name text PRIMARY KEY, node_id integer NOT NULL UNIQUE, listeners text NOT NULL,
        expires_at timestamptz NOT NULL, leaving boolean NOT NULL DEFAULT false);
    CREATE TABLE kgroups.shard_owners (
        shard smallint PRIMARY KEY, owner text, epoch bigint NOT NULL DEFAULT 0,
        expires_at timestamptz);
    """,
    # 3: a batch of offset commits in one round trip (`_Batch.write_offsets_at_once`):
    # the fence checked and the offsets upserted by one statement, its own transaction.
    # Returns the shards held; writes nothing unless every shard asked for is held.
    """
    CREATE FUNCTION kgroups.write_offsets(
        p_owner text, p_shards smallint[], p_epochs bigint[], p_group text[], p_topic text[],
        p_partition integer[], p_shard smallint[], p_offset bigint[], p_leader_epoch integer[],
        p_metadata text[], p_commit_ms bigint[], p_expire_ms bigint[])
    RETURNS smallint[] LANGUAGE plpgsql AS $body$
    DECLARE
        held smallint[] := p_shards;
    BEGIN
        IF p_owner IS NOT NULL THEN
            SELECT coalesce(array_agg(locked.shard), '{}') INTO held FROM (
                SELECT o.shard FROM kgroups.shard_owners o
                WHERE o.owner = p_owner
                  AND (o.shard, o.epoch) IN (SELECT * FROM unnest(p_shards, p_epochs))
                FOR SHARE) AS locked;
            IF cardinality(held) <> cardinality(p_shards) THEN
                RETURN held;
            END IF;
        END IF;
        INSERT INTO kgroups.offsets SELECT * FROM unnest(p_group, p_topic, p_partition,
            p_shard, p_offset, p_leader_epoch, p_metadata, p_commit_ms, p_expire_ms)
        ON CONFLICT (group_id, topic, partition) DO UPDATE SET
            committed_offset = EXCLUDED.committed_offset,
            leader_epoch = EXCLUDED.leader_epoch, metadata = EXCLUDED.metadata,
            commit_ms = EXCLUDED.commit_ms, expire_ms = EXCLUDED.expire_ms;
        RETURN held;
    END
    $body$;
    """,
    # 4: a consumer group's members as rows of their own (`member_rows`), written once
    # every live replica reads them (`replicas.member_rows`, set by each replica's tick).
    """
    CREATE TABLE kgroups.consumer_members (
        group_id text NOT NULL, member_id text NOT NULL, shard smallint NOT NULL,
        seq bigint NOT NULL, value text NOT NULL, PRIMARY KEY (group_id, member_id));
    CREATE INDEX consumer_members_by_shard ON kgroups.consumer_members (shard);
    ALTER TABLE kgroups.replicas ADD COLUMN member_rows boolean NOT NULL DEFAULT false;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

_ESC = "\x1b"

T = TypeVar("T")


def _esc(text: str) -> str:
    """`text` as PostgreSQL text: unchanged unless it holds U+0000 or begins with ESC."""
    if "\x00" in text or text.startswith(_ESC):
        return _ESC + json.dumps(text)
    return text


def _unesc(text: str) -> str:
    return json.loads(text[1:]) if text.startswith(_ESC) else text


def bound_sessions(conn: psycopg.Connection[Any], ttl_s: float) -> None:
    """A replica's session may not sit inside a transaction for more than half a lease:
    if its process freezes there (SIGSTOP, a paused VM), the database ends the session
    and its row locks go, so the other replicas can take its shards over."""
    conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (f"{max(int(ttl_s * 500), 100)}ms",),
    )


def redacted(url: str) -> str:
    """`url` without its password, for logs and errors."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an unreadable URL)"
    params.pop("password", None)
    host = params.get("host", "")
    port = params.get("port", "")
    user = params.get("user", "")
    where = f"{user}@" if user else ""
    where += f"{host}:{port}" if port else str(host)
    return f"postgresql://{where}/{params.get('dbname', '')}"


@dataclass(slots=True)
class Fence:
    """What every write of a replica checks: it holds each shard it writes, at that epoch."""

    owner: str
    epochs: dict[int, int] = field(default_factory=dict)
    """shard -> epoch of the shards this replica serves (loaded with). Replaced, never
    changed in place: the writer thread reads it while the event loop moves shards."""

    def hold(self, shard: int, epoch: int) -> None:
        self.epochs = {**self.epochs, shard: epoch}

    def drop(self, shards: Iterable[int]) -> None:
        gone = set(shards)
        self.epochs = {s: e for s, e in self.epochs.items() if s not in gone}


class PostgresStore:
    """The coordinator's records in PostgreSQL, owned by one coordinator process at a
    time (an advisory lock). `ReplicaStore` is the same records shared by replicas."""

    def __init__(
        self,
        url: str,
        *,
        shards: int = DEFAULT_SHARDS,
        retry_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards must be in [1, {MAX_SHARDS}], not {shards}")
        self.url = url
        self.shards = shards
        self.retry_s = retry_s
        self._sleep = sleep
        self._conn: psycopg.Connection[Any] | None = None
        self.member_rows = True
        """Whether a consumer group's members are written as rows of their own."""
        self._written: dict[str, WrittenMembers] = {}
        """What this store last wrote of each consumer group's member rows."""

    @property
    def where(self) -> str:
        return redacted(self.url)

    # -- connection ------------------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection to the store's database (autocommit), as the store makes its own."""
        return self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        params: dict[str, Any] = {"autocommit": True, "application_name": "kgroups-coordinator"}
        try:
            if "connect_timeout" not in conninfo_to_dict(self.url):
                params["connect_timeout"] = CONNECT_TIMEOUT_S
            return psycopg.connect(self.url, **params)
        except psycopg.ProgrammingError as exc:  # a malformed URL
            raise StoreError(f"{self.where}: {exc}") from None

    def _lock(self, conn: psycopg.Connection[Any]) -> None:
        """Make a new connection this store's: the store's lock taken."""
        # A coordinator that has just stopped (or died) holds the lock until its session
        # ends, which the server notices a moment after the connection closes: wait that
        # moment before calling the store another coordinator's.
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            if row and row[0]:
                return
            if time.monotonic() >= deadline:
                conn.close()
                raise StoreError(
                    f"{self.where} is in use by another coordinator (it holds the store's lock)"
                )
            self._sleep(0.1)

    def open(self) -> None:
        try:
            conn = self._connect()
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                self._migrate(conn)
            self._lock(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open {self.where}: {exc}") from exc
        self._conn = conn
        self._written = {}
        log.info("store: %s (schema %d, %d shards)", self.where, SCHEMA_VERSION, self.shards)

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create the schema or bring it up to `SCHEMA_VERSION`, one migration at a time."""
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL)"
        )
        meta = dict(conn.execute(f"SELECT key, value FROM {SCHEMA}.meta").fetchall())
        version = int(meta.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.where} has schema {version}, newer than this coordinator's "
                f"{SCHEMA_VERSION}: run the newer release"
            )
        shards = int(meta.get("shards", self.shards))
        if shards != self.shards:
            raise StoreError(
                f"{self.where} was created with {shards} shards, not {self.shards}: "
                "a store's shard count never changes (every group would move)"
            )
        for number in range(version + 1, SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[number - 1])
            log.info("store: %s migrated to schema %d", self.where, number)
        conn.execute(
            f"INSERT INTO {SCHEMA}.shard_owners (shard) SELECT generate_series(0, %s - 1) "
            "ON CONFLICT DO NOTHING",
            (self.shards,),
        )
        conn.execute(
            f"INSERT INTO {SCHEMA}.meta VALUES ('schema_version', %s), ('shards', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (str(SCHEMA_VERSION), str(self.shards)),
        )

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None:
            raise StoreError("store is not open")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            if not self._conn.closed:
                self._unlock(self._conn)
            self._conn.close()
            self._conn = None

    def _unlock(self, conn: psycopg.Connection[Any]) -> None:
        # Released now, not when the server notices the session ended (the session is
        # going anyway if this fails).
        with contextlib.suppress(psycopg.Error):
            conn.execute("SELECT pg_advisory_unlock_all()")

    def _retrying(self, what: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`work` on the connection; if the database goes away, again on a new one (the
        store's lock taken again first) until `retry_s` has passed."""
        deadline: float | None = None
        delay = 0.1
        while True:
            conn = self.conn
            try:
                if conn.closed:
                    raise psycopg.OperationalError("the connection is closed")
                try:
                    return work(conn)
                except psycopg.Error as exc:
                    if conn.broken or isinstance(exc, IdleInTransactionSessionTimeout):
                        # The server ended the session (a replica starved past half its
                        # lease inside a transaction: `bound_sessions`): a lost connection.
                        raise psycopg.OperationalError(str(exc)) from exc
                    raise
            except psycopg.OperationalError as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.retry_s
                    log.warning("store: %s failed (%s); retrying for %.0f s",
                                what, str(exc).strip(), self.retry_s)  # fmt: skip
                if now >= deadline:
                    raise StoreError(f"{what} on {self.where} failed: {exc}") from exc
            except psycopg.Error as exc:
                raise StoreError(f"{what} on {self.where} failed: {exc}") from exc
            self._sleep(delay)
            delay = min(delay * 2, 1.0)
            self._reconnect()

    def _reconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
        try:
            conn = self._connect()
        except psycopg.OperationalError:
            return  # still away: the next attempt fails fast on a closed connection
        try:
            self._lock(conn)
        except psycopg.OperationalError:
            conn.close()
            return
        self._conn = conn
        log.info("store: %s reconnected", self.where)

    # -- records ---------------------------------------------------------------------------

    def cluster_id(self) -> str:
        """The cluster's id, created by the first coordinator to start and kept forever."""
        fresh = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

        def read(conn: psycopg.Connection[Any]) -> str:
            conn.execute(
                f"INSERT INTO {SCHEMA}.meta VALUES ('cluster_id', %s) ON CONFLICT DO NOTHING",
                (fresh,),
            )
            row = conn.execute(
                f"SELECT value FROM {SCHEMA}.meta WHERE key = 'cluster_id'"
            ).fetchone()
            assert row is not None
            return str(row[0])

        return self._retrying("reading the cluster id", read)

    def load(self) -> Iterator[Record]:
        """Every record: topics, group settings, groups, offsets (streamed in batches)."""
        return iter(self._retrying("loading", lambda conn: list(self._read_all(conn))))

    def load_shard(self, shard: int) -> list[Record]:
        """The groups and committed offsets of one shard."""
        return self.load_shards([shard])[shard]

    def load_shards(self, shards: list[int]) -> dict[int, list[Record]]:
        """The groups and committed offsets of `shards`, by shard, in one transaction (a
        replica starting claims its whole share at once)."""
        # Another replica may have written their groups since this one did.
        self._forget_written(lambda shard: shard not in shards)
        return self._retrying("loading shards", lambda c: self._read_shards(c, shards))

    def _forget_written(self, keep: Callable[[int], bool]) -> None:
        count = self.shards
        self._written = {g: m for g, m in self._written.items() if keep(shard_of(g, count))}

    def _read_shards(
        self, conn: psycopg.Connection[Any], shards: list[int]
    ) -> dict[int, list[Record]]:
        # Rows are decoded after COMMIT: a transaction left idle while this thread waits
        # for the interpreter lock (a loaded machine, thousands of groups) would outlive
        # `bound_sessions`' limit and be ended by the server.
        with conn.transaction():
            groups = conn.execute(
                f"SELECT shard, group_id, value FROM {SCHEMA}.groups WHERE shard = ANY(%s)",
                (shards,),
            ).fetchall()
            members = _member_rows(conn.execute(
                f"SELECT group_id, value FROM {SCHEMA}.consumer_members WHERE shard = ANY(%s) "
                "ORDER BY group_id, seq",
                (shards,),
            ).fetchall())  # fmt: skip
            offsets = conn.execute(
                "SELECT shard, group_id, topic, partition, committed_offset, leader_epoch, "
                f"metadata, commit_ms, expire_ms FROM {SCHEMA}.offsets WHERE shard = ANY(%s)",
                (shards,),
            ).fetchall()
        out: dict[int, list[Record]] = {s: [] for s in shards}
        for shard, group_id, value in groups:
            group = GroupRecord(_unesc(group_id), decode_group(value, members.get(group_id)))
            out[shard].append(group)
        for row in offsets:
            shard, group_id, topic, partition, offset, epoch, metadata, at, expire = row
            out[shard].append(OffsetRecord(
                _unesc(group_id), _unesc(topic), partition,
                OffsetValue(offset, epoch, _unesc(metadata), at, expire),
            ))  # fmt: skip
        return out

    def _read_all(self, conn: psycopg.Connection[Any], *, groups: bool = True) -> Iterator[Record]:
        with conn.transaction():
            for name, topic_id, partitions, created, configs in conn.execute(
                f"SELECT name, topic_id, partitions, created_ms, configs FROM {SCHEMA}.topics "
                "ORDER BY name"
            ):
                yield TopicRecord(
                    _unesc(name),
                    TopicValue(topic_id, partitions, created, decode_topic_configs(configs)),
                )
            for group_id, value in conn.execute(
                f"SELECT group_id, value FROM {SCHEMA}.group_configs ORDER BY group_id"
            ):
                yield GroupConfigRecord(_unesc(group_id), decode_group_configs(value))
            if not groups:  # a replica: groups and offsets come shard by shard
                return
            members = _member_rows(conn.execute(
                f"SELECT group_id, value FROM {SCHEMA}.consumer_members ORDER BY group_id, seq"
            ).fetchall())  # fmt: skip
            for group_id, value in conn.execute(
                f"SELECT group_id, value FROM {SCHEMA}.groups ORDER BY group_id"
            ):
                yield GroupRecord(_unesc(group_id), decode_group(value, members.get(group_id)))
            with conn.cursor(name="kgroups_load_offsets") as cur:
                cur.itersize = LOAD_BATCH_ROWS
                cur.execute(
                    "SELECT group_id, topic, partition, committed_offset, leader_epoch, "
                    f"metadata, commit_ms, expire_ms FROM {SCHEMA}.offsets "
                    "ORDER BY group_id, topic, partition"
                )
                for group_id, topic, partition, offset, epoch, metadata, at, expire in cur:
                    yield OffsetRecord(
                        _unesc(group_id), _unesc(topic), partition,
                        OffsetValue(offset, epoch, _unesc(metadata), at, expire),
                    )  # fmt: skip

    def append(self, records: Sequence[Record]) -> None:
        """Make `records` durable in one transaction: each key's last value in the batch."""
        if not records:
            return
        batch = self._batch()
        if self.member_rows:
            batch.written = self._written
        for record in records:
            batch.add(record)
        self._retrying("writing", batch.write)
        self._written_batch(batch)
        for group_id, members in batch.members_after.items():  # what the database holds
            if members is None:
                self._written.pop(group_id, None)
            else:
                self._written[group_id] = members

    def _batch(self) -> _Batch:
        return _Batch(self.shards)

    def _written_batch(self, batch: _Batch) -> None:
        """After `batch` was written (a replica keeps the version of what it wrote)."""

    def holds_records(self) -> bool:
        """Whether any topic, group, group setting or offset is stored."""
        tables = ("topics", "groups", "group_configs", "offsets")
        query = " UNION ALL ".join(f"(SELECT 1 FROM {SCHEMA}.{t} LIMIT 1)" for t in tables)
        return self._retrying("reading", lambda conn: bool(conn.execute(query).fetchall()))

    def append_with_cluster_id(self, records: Sequence[Record], cluster_id: str) -> None:
        """`records` and the cluster id in one transaction (`kgroups store migrate`),
        refused while coordinator replicas are running on the database (they would serve
        the groups as they loaded them, without what is copied)."""
        batch = _Batch(self.shards)
        for record in records:
            batch.add(record)

        def write(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                # Replicas register and renew in that table: none can start serving (and
                # load its shards empty) until the copy is committed.
                conn.execute(f"LOCK TABLE {SCHEMA}.replicas IN SHARE MODE")
                live = conn.execute(
                    f"SELECT name FROM {SCHEMA}.replicas WHERE expires_at > now() AND NOT leaving "
                    "ORDER BY name"
                ).fetchall()
                if live:
                    names = ", ".join(name for (name,) in live)
                    raise StoreError(
                        f"coordinator replicas are running on {self.where} ({names}): "
                        "stop them before copying into it"
                    )
                conn.execute(
                    f"INSERT INTO {SCHEMA}.meta VALUES ('cluster_id', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (cluster_id,),
                )
                batch.write(conn)

        self._retrying("writing", write)


_OFFSETS_UPSERT = sql.SQL(
    "INSERT INTO {s}.offsets SELECT * FROM unnest("
    "%s::text[], %s::text[], %s::integer[], %s::smallint[], %s::bigint[], %s::integer[], "
    "%s::text[], %s::bigint[], %s::bigint[]) "
    "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
    "committed_offset = EXCLUDED.committed_offset, leader_epoch = EXCLUDED.leader_epoch, "
    "metadata = EXCLUDED.metadata, commit_ms = EXCLUDED.commit_ms, "
    "expire_ms = EXCLUDED.expire_ms"
).format(s=sql.Identifier(SCHEMA))
_GLOBALS_BUMP = (
    f"INSERT INTO {SCHEMA}.meta VALUES ('globals_version', '1') "
    f"ON CONFLICT (key) DO UPDATE SET value = ({SCHEMA}.meta.value::bigint + 1)::text"
)
_OFFSETS_DELETE = (
    f"DELETE FROM {SCHEMA}.offsets WHERE (group_id, topic, partition) IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[], %s::integer[]))"
)


class _Batch:
    """One transaction's worth of records, reduced to each key's last value."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.offsets: dict[tuple[str, str, int], OffsetValue | None] = {}
        self.groups: dict[str, GroupValue | ConsumerGroupValue | None] = {}
        """Encoded at write time: a group written several times in a batch (a consumer-
        protocol group's snapshot after each of many heartbeats) is encoded once."""
        self.configs: dict[str, str | None] = {}
        self.topics: dict[str, TopicValue | None] = {}
        self.written: dict[str, WrittenMembers] | None = None
        """What the store last wrote of consumer groups' member rows; None: groups are
        written as whole documents (and lose any member rows they had)."""
        self.members_after: dict[str, WrittenMembers | None] = {}
        """Once written: the member rows each group of the batch now has (None: none)."""

    def add(self, record: Record) -> None:
        if isinstance(record, OffsetRecord):
            self.offsets[(record.group_id, record.topic, record.partition)] = record.value
        elif isinstance(record, GroupRecord):
            self.groups[record.group_id] = record.value
        elif isinstance(record, GroupConfigRecord):
            pairs = record.value
            self.configs[record.group_id] = None if pairs is None else encode_pairs(pairs)
        else:
            self.topics[record.name] = record.value

    def touched(self) -> set[int]:
        """The shards of the groups and offsets written (group settings are the cluster's,
        like topics: any replica may write them)."""
        groups = {g for g, _, _ in self.offsets} | set(self.groups)
        return {shard_of(g, self.shards) for g in groups}

    def _check_fence(self, cur: psycopg.Cursor[Any]) -> None:
        """A replica's batch is refused unless it holds the shards it touches."""

    def write(self, conn: psycopg.Connection[Any]) -> None:
        if not (self.groups or self.configs or self.topics) and all(
            value is not None for value in self.offsets.values()
        ):
            self.write_offsets_at_once(conn)
            return
        groups, members = self._encoded_groups()
        with conn.transaction(), conn.cursor() as cur:
            self._check_fence(cur)
            self._write_offsets(cur)
            if members:
                self._write_members(cur, members)
            for table, rows in (("groups", groups), ("group_configs", self.configs)):
                gone = [_esc(g) for g, v in rows.items() if v is None]
                if gone:
                    cur.execute(f"DELETE FROM {SCHEMA}.{table} WHERE group_id = ANY(%s)", (gone,))
                kept = [
                    (_esc(g), shard_of(g, self.shards), v) for g, v in rows.items() if v is not None
                ]
                if kept:
                    cur.executemany(
                        f"INSERT INTO {SCHEMA}.{table} VALUES (%s, %s, %s) ON CONFLICT (group_id) "
                        "DO UPDATE SET value = EXCLUDED.value",
                        kept,
                    )
            if self.topics or self.configs:
                self._bump_globals(cur)
            for name, topic in self.topics.items():
                if topic is None:
                    cur.execute(f"DELETE FROM {SCHEMA}.topics WHERE name = %s", (_esc(name),))
                else:
                    cur.execute(
                        f"INSERT INTO {SCHEMA}.topics VALUES (%s, %s, %s, %s, %s) "
                        "ON CONFLICT (name) DO UPDATE SET topic_id = EXCLUDED.topic_id, "
                        "partitions = EXCLUDED.partitions, created_ms = EXCLUDED.created_ms, "
                        "configs = EXCLUDED.configs",
                        (_esc(name), topic.topic_id, topic.partitions, topic.created_ms,
                         encode_pairs(topic.configs)),
                    )  # fmt: skip
        self.members_after = {g: None if w is None else w.after for g, w in members.items()}

    def _encoded_groups(self) -> tuple[dict[str, str | None], dict[str, MemberWrites | None]]:
        """Each group's document (encoded before the transaction: a session idle inside
        one is ended), and for a consumer group whose members are rows, their writes
        (None: the group has no member rows once written)."""
        groups: dict[str, str | None] = {}
        members: dict[str, MemberWrites | None] = {}
        written = self.written
        for group_id, value in self.groups.items():
            if written is not None and isinstance(value, ConsumerGroupValue):
                groups[group_id] = encode_consumer_head(value)
                members[group_id] = member_writes(written.get(group_id), value.members)
            else:
                groups[group_id] = None if value is None else encode_group(value)
                members[group_id] = None
        return groups, members

    def _write_members(
        self, cur: psycopg.Cursor[Any], members: dict[str, MemberWrites | None]
    ) -> None:
        cleared = [_esc(g) for g, w in members.items() if w is None or w.rewrite]
        if cleared:
            cur.execute(
                f"DELETE FROM {SCHEMA}.consumer_members WHERE group_id = ANY(%s)", (cleared,)
            )
        gone: list[list[str]] = [[], []]
        rows: list[list[Any]] = [[], [], [], [], []]
        for group_id, writes in members.items():
            if writes is None:
                continue
            stored, shard = _esc(group_id), shard_of(group_id, self.shards)
            for member_id in writes.gone:
                gone[0].append(stored)
                gone[1].append(_esc(member_id))
            for member_id, seq, document in writes.upserts:
                for column, cell in zip(
                    rows, (stored, _esc(member_id), shard, seq, document), strict=True
                ):
                    column.append(cell)
        if gone[0]:
            cur.execute(
                f"DELETE FROM {SCHEMA}.consumer_members WHERE (group_id, member_id) IN "
                "(SELECT * FROM unnest(%s::text[], %s::text[]))",
                gone,
            )
        if rows[0]:
            cur.execute(
                f"INSERT INTO {SCHEMA}.consumer_members SELECT * FROM unnest(%s::text[], "
                "%s::text[], %s::smallint[], %s::bigint[], %s::text[]) "
                "ON CONFLICT (group_id, member_id) DO UPDATE SET seq = EXCLUDED.seq, "
                "value = EXCLUDED.value",
                rows,
            )

    def _bump_globals(self, cur: psycopg.Cursor[Any]) -> None:
        """One more version of the topics and group settings."""
        cur.execute(f"SELECT pg_notify('{GLOBALS_CHANNEL}', '')")  # sent on commit
        cur.execute(_GLOBALS_BUMP)

    def _offsets_fence(self) -> tuple[str | None, list[int], list[int]]:
        """`write_offsets`' owner and the shards and epochs it must hold (none here)."""
        return None, [], []

    def write_offsets_at_once(self, conn: psycopg.Connection[Any]) -> None:
        """A batch of offset commits only (what a busy coordinator writes nearly always):
        one statement in autocommit, its own transaction, so one round trip instead of
        four (BEGIN, the fence, the upsert, COMMIT), checked as `_check_fence` does."""
        owner, touched, epochs = self._offsets_fence()
        row = conn.execute(
            f"SELECT {SCHEMA}.write_offsets(%s, %s::smallint[], %s::bigint[], %s::text[], "
            "%s::text[], %s::integer[], %s::smallint[], %s::bigint[], %s::integer[], %s::text[], "
            "%s::bigint[], %s::bigint[])",
            (owner, touched, epochs, *self._offset_columns()),
        ).fetchone()
        held = set(row[0]) if row is not None and row[0] is not None else set()
        if owner is not None and held != set(touched):
            raise Fenced(frozenset(set(touched) - held))

    def _write_offsets(self, cur: psycopg.Cursor[Any]) -> None:
        gone = [key for key, value in self.offsets.items() if value is None]
        if gone:
            cur.execute(
                _OFFSETS_DELETE,
                ([_esc(g) for g, _, _ in gone], [_esc(t) for _, t, _ in gone],
                 [p for _, _, p in gone]),
            )  # fmt: skip
        if any(value is not None for value in self.offsets.values()):
            cur.execute(_OFFSETS_UPSERT, self._offset_columns())

    def _offset_columns(self) -> list[list[Any]]:
        """The upserted offsets, column by column (one array parameter each)."""
        kept = [(key, value) for key, value in self.offsets.items() if value is not None]
        columns: list[list[Any]] = [[] for _ in range(9)]
        for (group_id, topic, partition), v in kept:
            row = (_esc(group_id), _esc(topic), partition, shard_of(group_id, self.shards),
                   v.offset, v.leader_epoch, _esc(v.metadata), v.commit_timestamp_ms,
                   v.expire_timestamp_ms)  # fmt: skip
            for column, cell in zip(columns, row, strict=True):
                column.append(cell)
        return columns


class _FencedBatch(_Batch):
    """A replica's batch: fenced, and its topics and group settings compared and set."""

    def __init__(self, shards: int, fence: Fence, globals_seen: int | None) -> None:
        super().__init__(shards)
        self.fence = fence
        self.globals_seen = globals_seen
        self.globals_now: int | None = None
        """The version of the topics and group settings once this batch's are written."""

    def _check_fence(self, cur: psycopg.Cursor[Any]) -> None:
        """Refuse the whole batch unless this replica holds every shard it touches at the
        epoch it loaded it with, and keep those rows share-locked until COMMIT: a claim of
        one of them waits for this write, then its new owner loads it."""
        fence = self.fence
        touched = self.touched()

        if not touched:
            return
        shards = sorted(touched)
        epochs = [fence.epochs.get(s, -1) for s in shards]
        cur.execute(
            f"SELECT shard FROM {SCHEMA}.shard_owners WHERE owner = %s AND "
            "(shard, epoch) IN (SELECT * FROM unnest(%s::smallint[], %s::bigint[])) "
            "FOR SHARE",
            (fence.owner, shards, epochs),
        )
        held = {shard for (shard,) in cur.fetchall()}
        if held != touched:
            raise Fenced(frozenset(touched - held))

    def _bump_globals(self, cur: psycopg.Cursor[Any]) -> None:
        """Only if the database's version is still the one this replica's view was read
        at (compare-and-set: a concurrent writer's row lock is waited for, then the
        condition is checked again)."""
        cur.execute(f"SELECT pg_notify('{GLOBALS_CHANNEL}', '')")  # sent on commit
        seen = self.globals_seen or 0
        cur.execute(f"{_GLOBALS_BUMP} WHERE {SCHEMA}.meta.value = %s RETURNING value",
                    (str(seen),))  # fmt: skip
        row = cur.fetchone()
        if row is None or int(row[0]) != seen + 1:
            raise GlobalsMoved(seen)
        self.globals_now = seen + 1

    def _offsets_fence(self) -> tuple[str | None, list[int], list[int]]:
        touched = sorted(self.touched())
        return self.fence.owner, touched, [self.fence.epochs.get(s, -1) for s in touched]


class ReplicaStore(PostgresStore):
    """The coordinator's records in PostgreSQL, shared by replicas: no lock, every write
    fenced, the cluster's records loaded at start and each shard's when it is taken."""

    def __init__(
        self,
        url: str,
        *,
        fence: Fence,
        shards: int = DEFAULT_SHARDS,
        retry_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        lease_ttl_s: float = 5.0,
    ) -> None:
        super().__init__(url, shards=shards, retry_s=retry_s, sleep=sleep)
        self.fence = fence
        self.lease_ttl_s = lease_ttl_s
        self.member_rows = False
        """Only while every live replica reads them (`Replication` sets it from each tick):
        one started before they existed would load a group without its members."""
        self.globals_seen: int | None = None
        """The version of the cluster's topics and group settings last read (`load`) or
        written here. Its writes of them are made only while the database's version is
        still this one: a view another replica has changed since is never written back."""

    def _lock(self, conn: psycopg.Connection[Any]) -> None:
        """No lock: every write is fenced instead. A session idle inside a transaction
        for half a lease is ended by the server (a frozen replica holds nobody back)."""
        bound_sessions(conn, self.lease_ttl_s)

    def _unlock(self, conn: psycopg.Connection[Any]) -> None:
        return

    def load(self) -> Iterator[Record]:
        """The cluster's records only, topics and group settings; groups and offsets come
        shard by shard (`load_shards`)."""
        return iter(self._retrying("loading", self._read_globals))

    def load_if_moved(self) -> list[Record] | None:
        """The cluster's topics and group settings if another replica has changed them
        since they were last read here (None if not). Read before acting on a request
        that changes them, so that it is judged on the cluster's current view."""

        def read(conn: psycopg.Connection[Any]) -> list[Record] | None:
            if _globals_version(conn) == self.globals_seen:
                return None
            return self._read_globals(conn)

        return self._retrying("loading", read)

    def _read_globals(self, conn: psycopg.Connection[Any]) -> list[Record]:
        # The version first: a change committed between the two reads makes the version
        # read older than the rows, so the next write is refused (safe), never the reverse.
        version = _globals_version(conn)
        records = list(self._read_all(conn, groups=False))
        self.globals_seen = version
        return records

    def load_shards(self, shards: list[int]) -> dict[int, list[Record]]:
        # What this replica wrote of shards it no longer holds is forgotten too.
        held = self.fence.epochs
        self._forget_written(lambda shard: shard in held)
        return super().load_shards(shards)

    def _batch(self) -> _Batch:
        return _FencedBatch(self.shards, self.fence, self.globals_seen)

    def _written_batch(self, batch: _Batch) -> None:
        if isinstance(batch, _FencedBatch) and batch.globals_now is not None:
            self.globals_seen = batch.globals_now


def _member_rows(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    """(stored group id, member document) rows in order -> each group's documents."""
    out: dict[str, list[str]] = {}
    for group_id, value in rows:
        out.setdefault(group_id, []).append(value)
    return out


def _globals_version(conn: psycopg.Connection[Any]) -> int:
    """The version of the cluster's topics and group settings (0 before the first write)."""
    row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'globals_version'").fetchone()
    return 0 if row is None else int(row[0])
