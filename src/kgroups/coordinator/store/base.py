"""What every store is to the server: a compacted log of records, written in batches.

A store keeps one row per key (a group, a group's settings, a committed offset, a topic)
holding its latest value, like `__consumer_offsets` after compaction; a tombstone (a
record whose value is None) deletes the row. `append` makes one batch durable, in order,
in one transaction, and returns only then: the server calls it from its one writer thread
before it releases the replies that depend on the batch. `load` yields every row back as
a record: topics first, then group settings, groups, offsets, the order replay needs.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence

from kgroups.coordinator.core.records import Record


class StoreError(RuntimeError):
    """The store cannot be opened or written; the coordinator must stop."""


class Fenced(StoreError):
    """A write touched shards this replica no longer holds at the epoch it loaded them
    with (another replica took them over): nothing of the batch was written."""

    def __init__(self, shards: frozenset[int]) -> None:
        super().__init__(f"shards {sorted(shards)} are no longer held by this replica")
        self.shards = shards


class GlobalsMoved(StoreError):
    """A write of topics or group settings made from a view of them that another replica
    has changed since (it was read at a version that is no longer the database's): nothing
    of the batch was written, and the view must be read again before it is acted on."""

    def __init__(self, seen: int) -> None:
        super().__init__(f"the cluster's topics and group settings moved past version {seen}")
        self.seen = seen


class RecordStore(typing.Protocol):
    """What the server needs of a store: SQLite, PostgreSQL, or in memory in simulations."""

    def open(self) -> None: ...
    def cluster_id(self) -> str: ...
    def load(self) -> Iterable[Record]: ...
    def append(self, records: Sequence[Record]) -> None: ...
    def close(self) -> None: ...

    @property
    def where(self) -> str:
        """Where the records live, for logs (never a password)."""
        ...
