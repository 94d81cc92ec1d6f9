"""`kgroups store migrate`: a single-replica SQLite store copied into PostgreSQL.

How an install that began with `--data-dir` moves to replicas sharing a database: stop
the coordinator, copy, start it (or them) with `--store`. The copy takes both stores'
locks (so no coordinator can be writing either), refuses a database that already holds
records or that replicas are running on (their leases in `kgroups.replicas`), keeps the
cluster id (clients see the same cluster), writes every record in one
transaction (a failed copy leaves the database as it was), and reads them back to check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kgroups.coordinator.core.records import Record
from kgroups.coordinator.store.base import StoreError
from kgroups.coordinator.store.postgres import PostgresStore
from kgroups.coordinator.store.sqlite import Store


@dataclass(frozen=True, slots=True)
class Copied:
    cluster_id: str
    records: dict[str, int]
    """Records copied, by kind (TopicRecord, GroupRecord, ...)."""


def migrate(data_dir: Path, url: str, *, shards: int) -> Copied:
    """Copy the SQLite store in `data_dir` into the empty PostgreSQL store at `url`."""
    if not (data_dir / "coordinator.db").exists():
        raise StoreError(f"{data_dir} holds no coordinator store (no coordinator.db)")
    source = Store(data_dir)
    source.open()
    try:
        target = PostgresStore(url, shards=shards, retry_s=0)
        target.open()
        try:
            return _copy(source, target)
        finally:
            target.close()
    finally:
        source.close()


def _copy(source: Store, target: PostgresStore) -> Copied:
    if target.holds_records():
        raise StoreError(f"{target.where} already holds records: migrate only into an empty store")
    cluster_id = source.cluster_id()
    records: list[Record] = list(source.load())
    target.append_with_cluster_id(records, cluster_id)
    copied = set(target.load())
    if copied != set(records) or target.cluster_id() != cluster_id:
        raise StoreError(f"{target.where} does not read back what was copied")
    return Copied(cluster_id, dict(Counter(type(r).__name__ for r in records)))
