"""Which replica owns which shard: leases in PostgreSQL, on the database's clock.

Replicas of one cluster share a database. Each shard (`core.shards`) has one row in
`kgroups.shard_owners`: its owner, an epoch and when the lease expires, always computed
with the database's `now()`, so pods' clocks never have to agree. Each replica has a row
in `kgroups.replicas` (its node id and advertised listeners, and its own expiry): the
live replicas are the brokers clients see.

`tick` is one transaction, run every `LeaseTimings.tick_s` (a fifth of the TTL, at most
1 s): it renews the replica's row and the leases it holds, reads who is alive, and claims
free or expired shards up to its fair share (`shards.fair_share`), each claim raising the
shard's epoch. A replica over its share (another joined) is told which shards to hand
over: it stops serving them, finishes their writes, then `release`s them; a peer claims
them on its next tick.

Fencing is not here but in every write (`PostgresStore.append` with a `Fence`): the
write checks, under a share lock on the owner row, that the writer still holds the
shard at the epoch it loaded it with. A claim updates that row, so it waits for such a
write to commit; the new owner then loads what that write left. A write after the claim
finds another epoch and is refused. What a replica makes of a tick (and when it stops
trusting its leases) is decided in `core/leasing.py`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from kgroups.coordinator.core.leasing import Replica, Tick
from kgroups.coordinator.core.shards import fair_share, to_claim, to_release
from kgroups.coordinator.store.base import StoreError
from kgroups.coordinator.store.postgres import (
    CONNECT_TIMEOUT_S,
    SCHEMA,
    bound_sessions,
    redacted,
)

__all__ = ["REGISTRY_LOCK_KEY", "Replica", "ShardLeases", "Tick"]

log = logging.getLogger("kgroups.coordinator.leases")

REGISTRY_LOCK_KEY = 0x6B67726F757073 + 2
"""Held while a replica takes a node id."""


class ShardLeases:
    """One replica's leases, on a connection of its own (never behind a large write)."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        listeners: Mapping[str, tuple[str, int]],
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.name = name
        self.listeners = dict(listeners)
        self.ttl_s = ttl_s
        self._clock = clock
        self._conn: psycopg.Connection[Any] | None = None
        self._renewing: psycopg.Connection[Any] | None = None
        self.node_id = -1
        self.shards = 0
        self.held: dict[int, int] = {}

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect(f"kgroups-leases-{self.name}")
        return self._conn

    def _connect(self, application: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                               application_name=application)  # fmt: skip
        bound_sessions(conn, self.ttl_s)
        return conn

    def open(self) -> int:
        """Register this replica (the store's schema must exist); its node id, kept by name
        across restarts."""
        try:
            conn = self.conn
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (REGISTRY_LOCK_KEY,))
                row = conn.execute(
                    f"SELECT value FROM {SCHEMA}.meta WHERE key = 'shards'"
                ).fetchone()
                if row is None:
                    raise StoreError(f"{redacted(self.url)} has no coordinator store yet")
                self.shards = int(row[0])
                row = conn.execute(
                    f"SELECT node_id FROM {SCHEMA}.replicas WHERE name = %s", (self.name,)
                ).fetchone()
                if row is None:
                    row = conn.execute(
                        f"INSERT INTO {SCHEMA}.replicas (name, node_id, listeners, expires_at, "
                        "member_rows) SELECT %s, coalesce(max(node_id) + 1, 0), %s, now(), true "
                        f"FROM {SCHEMA}.replicas RETURNING node_id",
                        (self.name, self._listeners_json()),
                    ).fetchone()
                assert row is not None
                self.node_id = int(row[0])
                # Shards an earlier process of this name still holds get a new epoch: if
                # that process is not dead but frozen, none of its writes can land now.
                conn.execute(
                    f"UPDATE {SCHEMA}.shard_owners SET epoch = epoch + 1 WHERE owner = %s",
                    (self.name,),
                )
        except psycopg.Error as exc:
            raise StoreError(f"cannot register replica {self.name}: {exc}") from exc
        return self.node_id

    def _listeners_json(self) -> str:
        return json.dumps({k: list(v) for k, v in sorted(self.listeners.items())})

    def tick(self) -> Tick:
        """Renew, look around, claim up to the fair share (one transaction)."""
        began = self._clock()
        ttl = self.ttl_s
        conn = self.conn
        with conn.transaction():
            # Never wait long on a row another replica holds (a replica frozen inside a
            # transaction): this tick fails, the next one tries again.
            conn.execute("SELECT set_config('lock_timeout', %s, true)",
                         (f"{int(ttl * 250)}ms",))  # fmt: skip
            conn.execute(
                f"UPDATE {SCHEMA}.replicas SET listeners = %s, leaving = false, "
                "member_rows = true, expires_at = now() + %s * interval '1 second' "
                "WHERE name = %s",
                (self._listeners_json(), ttl, self.name),
            )
            held = dict(
                conn.execute(
                    f"UPDATE {SCHEMA}.shard_owners SET expires_at = now() + %s * interval "
                    "'1 second' WHERE owner = %s RETURNING shard, epoch",
                    (ttl, self.name),
                ).fetchall()
            )
            replicas = self._live(conn)
            share = fair_share(self.shards, len(replicas))
            free = [
                shard
                for (shard,) in conn.execute(
                    f"SELECT shard FROM {SCHEMA}.shard_owners "
                    "WHERE owner IS NULL OR expires_at <= now() ORDER BY shard"
                )
            ]
            claimed: dict[int, int] = {}
            wanted = to_claim(len(held), share, free)
            if wanted:
                # SKIP LOCKED: a shard whose old owner is still inside a write (share lock
                # on its row) is not waited for; it is claimed on a later tick, after that
                # write committed or was rolled back, so its new owner loads what it left.
                claimed = dict(
                    conn.execute(
                        f"UPDATE {SCHEMA}.shard_owners SET owner = %s, epoch = epoch + 1, "
                        "expires_at = now() + %s * interval '1 second' WHERE shard IN ("
                        f"SELECT shard FROM {SCHEMA}.shard_owners WHERE shard = ANY(%s) "
                        "AND (owner IS NULL OR expires_at <= now()) FOR UPDATE SKIP LOCKED) "
                        "RETURNING shard, epoch",
                        (self.name, ttl, wanted),
                    ).fetchall()
                )
            held.update(claimed)
            owners = self._owners(conn, replicas)
            row = conn.execute(
                f"SELECT value FROM {SCHEMA}.meta WHERE key = 'globals_version'"
            ).fetchone()
        lost = frozenset(s for s, e in self.held.items() if held.get(s) != e)
        self.held = held
        if claimed or lost:
            log.info("replica %s: claimed shards %s, lost %s; holds %d of %d (%d replicas)",
                     self.name, sorted(claimed), sorted(lost), len(held), self.shards,
                     len(replicas))  # fmt: skip
        return Tick(began, dict(held), claimed, lost, tuple(to_release(list(held), share)),
                    replicas, owners, int(row[0]) if row else 0)  # fmt: skip

    def _live(self, conn: psycopg.Connection[Any]) -> tuple[Replica, ...]:
        rows = conn.execute(
            f"SELECT name, node_id, listeners, member_rows FROM {SCHEMA}.replicas "
            "WHERE expires_at > now() AND NOT leaving ORDER BY node_id"
        ).fetchall()
        return tuple(
            Replica(name, node_id, {k: (h, int(p)) for k, (h, p) in json.loads(ls).items()},
                    rows_read)
            for name, node_id, ls, rows_read in rows
        )  # fmt: skip

    def _owners(
        self, conn: psycopg.Connection[Any], replicas: tuple[Replica, ...]
    ) -> dict[int, int]:
        nodes = {r.name: r.node_id for r in replicas}
        rows = conn.execute(
            f"SELECT shard, owner FROM {SCHEMA}.shard_owners "
            "WHERE owner IS NOT NULL AND expires_at > now()"
        ).fetchall()
        return {shard: nodes[owner] for shard, owner in rows if owner in nodes}

    def renew(self, epochs: Mapping[int, int]) -> bool:
        """Renew this replica's row and its leases of `epochs` (shard -> epoch) on a
        connection of its own (`Replication`'s keep-alive thread, between ticks): True
        if every one of them was still this replica's at that epoch, and so is renewed
        from before this call for the TTL; False if any was taken or given up (the tick
        sees to that)."""
        conn = self._renewing
        if conn is None or conn.closed:
            conn = self._renewing = self._connect(f"kgroups-renew-{self.name}")
        shards, wanted = list(epochs), list(epochs.values())
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)",
                         (f"{int(self.ttl_s * 250)}ms",))  # fmt: skip
            conn.execute(
                f"UPDATE {SCHEMA}.replicas SET expires_at = now() + %s * interval '1 second' "
                "WHERE name = %s AND NOT leaving",
                (self.ttl_s, self.name),
            )
            renewed = conn.execute(
                f"UPDATE {SCHEMA}.shard_owners SET expires_at = now() + %s * interval "
                "'1 second' WHERE owner = %s AND (shard, epoch) IN "
                "(SELECT * FROM unnest(%s::smallint[], %s::bigint[])) RETURNING shard",
                (self.ttl_s, self.name, shards, wanted),
            ).fetchall()
        return len(renewed) == len(shards)

    def release(self, shards: list[int]) -> None:
        """Hand `shards` over (their writes finished): a peer claims them on its next tick."""
        if not shards:
            return
        self.conn.execute(
            f"UPDATE {SCHEMA}.shard_owners SET owner = NULL, expires_at = NULL "
            "WHERE owner = %s AND shard = ANY(%s)",
            (self.name, shards),
        )
        for shard in shards:
            self.held.pop(shard, None)
        log.info("replica %s: released shards %s", self.name, sorted(shards))

    def leave(self) -> None:
        """Stopping: no longer counted as live, every shard handed over."""
        with self.conn.transaction():
            self.conn.execute(
                f"UPDATE {SCHEMA}.replicas SET leaving = true WHERE name = %s", (self.name,)
            )
            self.release(list(self.held))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close_renewing(self) -> None:
        """Close the keep-alive's connection (on its thread)."""
        if self._renewing is not None:
            self._renewing.close()
            self._renewing = None
