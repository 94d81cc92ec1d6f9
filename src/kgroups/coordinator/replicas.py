"""One replica among several sharing the groups: the lease loop that moves shards.

Started when the store is PostgreSQL (`--store`). Every `tick_s` the leases are renewed
and looked at (`store.leases.ShardLeases.tick`, on a thread of its own), and this
replica acts on what changed, on the event loop:

* a shard claimed (or held again after a self-fence): every write queued before is
  finished first (under the fence it was produced with), then its epoch goes into the
  store's `Fence`, its records are read on the store's thread and
  `GroupCoordinator.load`ed: from then on it is served;
* a shard lost (another replica took it, or it expired), or refused by a write
  (`OrderedWriter.on_fenced`): `unload`ed at once, its parked requests told
  NOT_COORDINATOR;
* shards over the fair share (a replica joined): unloaded, their queued writes finished,
  then released for the newcomer to claim;
* the cluster's topics and group settings changed (`Tick.globals_version`): reloaded
  (and before a request that changes them: `fresh_globals`; the store refuses a write of
  them made from a view another replica has changed since);
* who owns which shard and where each replica listens: handed to the core, which answers
  FindCoordinator and Metadata from it.

A replica that cannot renew stops serving before its leases can have expired: every tick
that succeeds pushes `valid_until` (monotonic: the tick's start + TTL - margin) and a
timer at that moment unloads everything; `check` does the same before a request is
handled, for a process that wakes from a freeze (SIGSTOP, a long GC, a VM paused) with
requests already read. Between ticks a keep-alive thread renews the leases of the shards
served (`ShardLeases.renew`) and pushes `valid_until` too, so that a long turn of the
event loop (a consumer group of hundreds joining at once: seconds) does not run them out;
it stops renewing once the loop has not turned for `stall_s`, so that a wedged process
loses its shards to the others. `leave` is the graceful handover of SIGTERM: every shard unloaded,
its writes finished, all released at once, so peers claim them on their next tick.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from kgroups.coordinator.core import Effects, GroupCoordinator, Node
from kgroups.coordinator.core.shards import Sharding, shard_of
from kgroups.coordinator.pipeline import OrderedWriter
from kgroups.coordinator.store.leases import ShardLeases, Tick
from kgroups.coordinator.store.notices import GlobalsNotices
from kgroups.coordinator.store.postgres import Fence, PostgresStore

log = logging.getLogger("kgroups.coordinator.replicas")

T = TypeVar("T")


class Replication:
    """This replica's shards: leases renewed, shards loaded and unloaded as they move."""

    def __init__(
        self,
        store: PostgresStore,
        leases: ShardLeases,
        writer: Callable[[], OrderedWriter],
        *,
        apply: Callable[[Effects], None],
        now_ms: Callable[[], int],
    ) -> None:
        assert store.fence is not None
        self.store = store
        self.fence: Fence = store.fence
        self.leases = leases
        self._writer = writer
        self._apply = apply
        self._now_ms = now_ms
        self.ttl_s = leases.ttl_s
        self.tick_s = max(min(self.ttl_s / 5, 1.0), 0.05)
        self.margin_s = min(1.0, self.ttl_s / 4)
        self.stall_s = max(3 * self.ttl_s, 6.0)
        """The keep-alive renews only while the event loop turned this recently."""
        self._loop_seen = time.monotonic()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgroups-leases")
        self.coordinator: GroupCoordinator | None = None
        self.sharding: Sharding | None = None
        self.valid_until = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self.last_error: str | None = None
        self._act_error: str | None = None
        """Why the last tick's loads, releases or reloads failed (logged once while the same)."""
        self.leaving = False
        self._notices: GlobalsNotices | None = None
        self._stale = False
        self._reloading: asyncio.Task[None] | None = None

    @property
    def writer(self) -> OrderedWriter:
        """The server's ordered writer (made after the store it writes to)."""
        return self._writer()

    async def _leased(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def register(self, name: str, listeners: Mapping[str, tuple[str, int]]) -> int:
        """Take a node id (kept by replica `name`) once the listeners are bound; every
        write is fenced as `name` from here on."""
        self.leases.name = name
        self.fence.owner = name
        self.leases.listeners = dict(listeners)
        return await self._leased(self.leases.open)

    def attach(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        self.sharding = coordinator.share(self.leases.shards)
        count = self.leases.shards
        self.writer.shard_of = lambda group_id: shard_of(group_id, count)
        self.writer.on_fenced = self._refused

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Tick forever (a background task of the server); reload the cluster's topics and
        group settings whenever another replica says it changed them."""
        loop = asyncio.get_running_loop()
        self._notices = GlobalsNotices(
            self.store.connect, lambda: loop.call_soon_threadsafe(self._globals_changed)
        )
        self._notices.start()
        self._beat()
        self._keeper = threading.Thread(target=self._keep_alive, name="kgroups-renew",
                                        daemon=True)  # fmt: skip
        self._keeper.start()
        while not self.leaving:
            try:
                tick = await self._leased(self.leases.tick)
            except Exception as exc:  # noqa: BLE001 - the database away: self-fence covers it
                if self.last_error is None:
                    log.warning("replica %s: cannot renew its leases: %s", self.leases.name, exc)
                self.last_error = str(exc).strip() or type(exc).__name__
                self.leases.close()  # a new connection next time
            else:
                if self.last_error is not None:
                    log.info("replica %s: leases renewed again", self.leases.name)
                self.last_error = None
                try:
                    await self._act(tick)
                except Exception as exc:  # noqa: BLE001 - a shard held but not loaded is loaded next tick
                    failed = str(exc).strip() or type(exc).__name__
                    if failed != self._act_error:
                        log.warning("replica %s: cannot take up its shards' groups (trying "
                                    "again): %s", self.leases.name, failed)  # fmt: skip
                    self._act_error = failed
                else:
                    self._act_error = None
            await asyncio.sleep(self.tick_s)

    async def _act(self, tick: Tick) -> None:
        sharding, coordinator = self.sharding, self.coordinator
        assert sharding is not None
        assert coordinator is not None
        loop = asyncio.get_running_loop()
        self.valid_until = max(self.valid_until, tick.began + self.ttl_s - self.margin_s)
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = loop.call_at(self.valid_until, self._expired)
        sharding.owners = dict(tick.owners)
        # Member rows once no live replica predates them (an upgrade's old replicas are
        # gone); whole groups again while one is back (renewing late), though a group
        # written as rows before that loads there without its members (they rejoin).
        self.store.member_rows = all(r.member_rows for r in tick.replicas)
        sharding.brokers = {
            r.node_id: {
                name: Node(r.node_id, host, port) for name, (host, port) in r.listeners.items()
            }
            for r in tick.replicas
        }
        for shard in tick.lost:
            self._unload(shard)
        if tick.globals_version != self.store.globals_seen:
            await self.fresh_globals()
        if tick.release:
            for shard in tick.release:
                self._unload(shard)
            await self.writer.drained()
            await self._leased(lambda: self.leases.release(list(tick.release)))
        wanted = {
            shard: epoch for shard, epoch in sorted(tick.held.items())
            if shard not in tick.release and shard not in sharding.serving and not self.leaving
        }  # fmt: skip
        if wanted:
            await self._load(wanted)

    def _globals_changed(self) -> None:
        self._stale = True
        if self._reloading is None or self._reloading.done():
            self._reloading = asyncio.get_running_loop().create_task(self._reload_while_stale())

    async def _reload_while_stale(self) -> None:
        while self._stale and not self.leaving:
            self._stale = False
            try:
                await self.fresh_globals()
            except Exception as exc:  # noqa: BLE001 - the lease renewals try again
                log.warning("replica %s: cannot reload topics and group settings: %s",
                            self.leases.name, exc)  # fmt: skip
                return

    async def fresh_globals(self) -> None:
        """Read the cluster's topics and group settings again if another replica has
        changed them since they were read here (after every write queued before)."""
        coordinator = self.coordinator
        assert coordinator is not None
        records = await self.writer.run(self.store.load_if_moved)
        if records is not None:
            self._apply(coordinator.refresh(records, now_ms=self._now_ms()))

    async def _load(self, wanted: dict[int, int]) -> None:
        """Serve `wanted` (shard -> epoch). First every write queued before is finished:
        what this replica produced for a shard before it last stopped serving it (a
        self-fence while the database was away) is written or refused under the fence it
        was produced with, never under the new epoch, and is in the records read next.
        Then the epochs go into the fence, the records are read in one transaction and
        go into the core, unless a shard was lost meanwhile or the leases are no longer
        fresh (the next renewal loads them)."""
        sharding, coordinator = self.sharding, self.coordinator
        assert sharding is not None
        assert coordinator is not None
        started = time.monotonic()
        sharding.loading.update(wanted)
        await self.writer.drained()
        wanted = {shard: epoch for shard, epoch in wanted.items() if shard in sharding.loading}
        if not wanted:
            return  # lost (or the leases ran out) while the writes finished
        for shard, epoch in wanted.items():
            self.fence.hold(shard, epoch)
        try:
            records = await self.writer.run(lambda: self.store.load_shards(list(wanted)))
        except Exception:
            sharding.loading.difference_update(wanted)
            self.fence.drop(wanted)
            raise
        fresh = time.monotonic() < self.valid_until
        loaded = []
        for shard, epoch in wanted.items():
            if shard not in sharding.loading or self.fence.epochs.get(shard) != epoch:
                continue  # lost or fenced while its records were read
            sharding.loading.discard(shard)
            if not fresh:
                self.fence.drop([shard])
                continue
            self._apply(coordinator.load(shard, records[shard], now_ms=self._now_ms()))
            loaded.append(shard)
        if loaded:
            log.info("replica %s: serving shards %s (%d records, %.0f ms)", self.leases.name,
                     loaded, sum(len(records[s]) for s in loaded),
                     (time.monotonic() - started) * 1000)  # fmt: skip

    def _unload(self, shard: int) -> None:
        sharding, coordinator = self.sharding, self.coordinator
        assert sharding is not None
        assert coordinator is not None
        self.fence.drop([shard])
        if shard in sharding.serving or shard in sharding.loading:
            self._apply(coordinator.unload(shard, now_ms=self._now_ms()))

    def _refused(self, shards: frozenset[int]) -> None:
        sharding = self.sharding
        for shard in shards:
            if sharding is None or shard not in sharding.loading:  # stale writes of a reload
                self._unload(shard)

    # -- self-fencing --------------------------------------------------------------------

    def check(self, now: float) -> None:
        """Before a request is handled: past the leases' validity, serve nothing."""
        if now >= self.valid_until and self.fence.epochs:
            self._expired()

    def _beat(self) -> None:
        self._loop_seen = time.monotonic()
        if not self._stop.is_set():
            asyncio.get_running_loop().call_later(self.tick_s, self._beat)

    def _keep_alive(self) -> None:
        """The keep-alive thread: every `tick_s`, renew the leases of the shards in the
        fence. Their validity moves only if the fence did not change meanwhile (a shard
        loaded since was not renewed here: its lease may be older)."""
        failing = False
        while not self._stop.wait(self.tick_s):
            epochs = self.fence.epochs
            if not epochs or time.monotonic() - self._loop_seen > self.stall_s:
                continue
            began = time.monotonic()
            try:
                renewed = self.leases.renew(epochs)
            except Exception as exc:  # noqa: BLE001 - the ticks say so; try again
                if not failing:
                    log.info("replica %s: keep-alive cannot renew: %s", self.leases.name, exc)
                failing = True
                self.leases.close_renewing()
                continue
            failing = False
            if renewed and self.fence.epochs is epochs:
                self.valid_until = max(self.valid_until, began + self.ttl_s - self.margin_s)
        self.leases.close_renewing()

    def _expired(self) -> None:
        if time.monotonic() < self.valid_until:  # the keep-alive renewed them meanwhile
            loop = asyncio.get_running_loop()
            self._watchdog = loop.call_at(self.valid_until, self._expired)
            return
        sharding = self.sharding
        if sharding is None or not (sharding.serving or sharding.loading):
            return
        log.warning("replica %s: leases not renewed in time (%s): serving no group until "
                    "they are", self.leases.name, self.last_error or "no answer")  # fmt: skip
        for shard in sorted(sharding.serving | sharding.loading):
            self._unload(shard)

    # -- stopping -----------------------------------------------------------------------

    async def leave(self) -> None:
        """Graceful handover: stop serving, finish the writes, release every shard."""
        self.leaving = True
        self._stop.set()
        log.info("replica %s: handing its shards over", self.leases.name)
        sharding = self.sharding
        if sharding is not None:
            for shard in sorted(sharding.serving | sharding.loading):
                self._unload(shard)
        await self.writer.drained()
        try:
            await self._leased(self.leases.leave)
            log.info("replica %s: handed every shard over", self.leases.name)
        except Exception as exc:  # noqa: BLE001 - the leases then expire instead
            log.warning("replica %s: could not hand its shards over: %s", self.leases.name, exc)

    def close(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=10)
        if self._notices is not None:
            self._notices.stop()
        if self._reloading is not None:
            self._reloading.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._executor.submit(self.leases.close)
        self._executor.shutdown(wait=True)

    def unready(self) -> str | None:
        if self.sharding is None:
            return "registering the replica"
        if self.last_error is not None:
            return f"cannot renew shard leases: {self.last_error}"
        if not self.valid_until:
            return "taking shard leases"
        return None
