"""The durable stores: where the coordinator's records live between processes.

`base` says what a store is to the server (`RecordStore`, `StoreError`); `sqlite.Store` is
the embedded single-replica store (`--data-dir`), `postgres.PostgresStore` the shared one
(`--store postgresql://...`); `codec` is the JSON both write a group as; `migrate` copies
one into the other (`kgroups store migrate`). `open_store` picks one from the settings.
"""

from __future__ import annotations

from pathlib import Path

from kgroups.coordinator.store.base import RecordStore, StoreError
from kgroups.coordinator.store.codec import decode_group, encode_group
from kgroups.coordinator.store.sqlite import DB_FILE, LOCK_FILE, SCHEMA_VERSION, Store

__all__ = [
    "DB_FILE",
    "LOCK_FILE",
    "SCHEMA_VERSION",
    "RecordStore",
    "Store",
    "StoreError",
    "decode_group",
    "encode_group",
    "make_store",
]


def make_store(url: str | None, data_dir: Path, *, synchronous: str, shards: int) -> RecordStore:
    """The PostgreSQL store at `url`, or without one the SQLite store in `data_dir`."""
    if url is None:
        return Store(data_dir, synchronous=synchronous)
    from kgroups.coordinator.store.postgres import PostgresStore  # psycopg only when asked

    return PostgresStore(url, shards=shards)
