"""Replicas told at once when the cluster's topics or group settings change.

Every write of them (`postgres._Batch`) sends a PostgreSQL notification on
`GLOBALS_CHANNEL` in its transaction, delivered when it commits. Each replica listens on
a connection of its own, on a thread of its own, and reloads them as soon as one arrives:
a topic grown through one replica is then known to every other within milliseconds, so a
group's leader asking its own coordinator for metadata right after the growth sees it
(without this, each replica learns it at its next lease renewal, up to a second later,
and a leader that asked in between assigns the old partition count until its next
metadata refresh, minutes later). The lease renewal's version check stays the fallback:
a notification lost while the listener reconnects is caught there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from kgroups.coordinator.store.base import StoreError

log = logging.getLogger("kgroups.coordinator.replicas")

GLOBALS_CHANNEL = "kgroups_globals"
POLL_S = 0.5
"""How often the listener looks up from waiting to see whether it should stop."""


class GlobalsNotices:
    """Calls `changed()` (from its own thread) for every notification on
    `GLOBALS_CHANNEL`; reconnects with `connect` when the connection fails."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], changed: Callable[[], object]
    ) -> None:
        self._connect = connect
        self._changed = changed
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kgroups-notices", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=POLL_S * 4)

    def _run(self) -> None:
        failing = False
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f"LISTEN {GLOBALS_CHANNEL}")
                    if failing:
                        log.info("listening for changes of topics and group settings again")
                        self._changed()  # what changed meanwhile
                    failing = False
                    while not self._stopping.is_set():
                        for _ in conn.notifies(timeout=POLL_S):
                            self._changed()
            except (psycopg.Error, StoreError) as exc:
                if not failing:
                    log.warning("cannot listen for changes of topics and group settings "
                                "(%s): the lease renewals catch them", exc)  # fmt: skip
                failing = True
                self._stopping.wait(1.0)
