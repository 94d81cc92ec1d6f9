"""One replica among several sharing the groups: the I/O around `core.leasing`.

Started when the store is PostgreSQL (`--store`). What a replica decides about its
shards (which to load, serve, fence, unload and hand over, and when its leases can no
longer be trusted) is `core.leasing.ReplicaLeases`, sans-IO; this module only does what
those decisions need, and tells the machine what happened:

* every `tick_s` the leases are renewed and looked at (`store.leases.ShardLeases.tick`,
  on a thread of its own); on the event loop, shards lost are unloaded from the core at
  once (their parked requests told NOT_COORDINATOR), shards over the fair share are
  unloaded, their queued writes finished, then released for the newcomer to claim, and
  shards newly held are loaded: every write queued before is finished first (under the
  fence it was produced with), then their epochs go into the store's `Fence`, their
  records are read on the store's thread and `GroupCoordinator.load`ed;
* a write refused by the fence (`OrderedWriter.on_fenced`) unloads its shards;
* the cluster's topics and group settings are reloaded when another replica changed them
  (`Tick.globals_version`, and before a request that changes them: `fresh_globals`);
* who owns which shard and where each replica listens go to the core, which answers
  FindCoordinator and Metadata from them;
* `check` is asked before every request and every timer of the core, and a watchdog
  timer fires at the leases' validity: past it, nothing is served;
* a keep-alive thread renews the fenced shards' leases between ticks (`ShardLeases.renew`
  on a connection of its own), so that a long turn of the event loop (a consumer group
  of hundreds joining at once: seconds) does not run them out;
* `leave` is the graceful handover of SIGTERM: every shard unloaded, its writes
  finished, all released at once, so peers claim them on their next tick.

The machine is called from the event loop and from the keep-alive thread, under one lock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from kgroups.coordinator.core import Effects, GroupCoordinator, Node
from kgroups.coordinator.core.leasing import ReplicaLeases, Tick
from kgroups.coordinator.core.shards import Sharding, shard_of
from kgroups.coordinator.pipeline import OrderedWriter
from kgroups.coordinator.store.leases import ShardLeases
from kgroups.coordinator.store.notices import GlobalsNotices
from kgroups.coordinator.store.postgres import Fence, ReplicaStore

log = logging.getLogger("kgroups.coordinator.replicas")

T = TypeVar("T")


class Replication:
    """This replica's shards: leases renewed, shards loaded and unloaded as they move."""

    def __init__(
        self,
        store: ReplicaStore,
        leases: ShardLeases,
        writer: Callable[[], OrderedWriter],
        *,
        apply: Callable[[Effects], None],
        now_ms: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.fence: Fence = store.fence
        self.leases = leases
        self._writer = writer
        self._apply = apply
        self._now_ms = now_ms
        self._clock = clock
        self.machine = ReplicaLeases(leases.ttl_s, now=clock())
        self._lock = threading.Lock()
        """The event loop and the keep-alive thread both call the machine."""
        timings = self.machine.timings
        self.ttl_s, self.tick_s = timings.ttl_s, timings.tick_s
        self.margin_s, self.stall_s = timings.margin_s, timings.stall_s
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgroups-leases")
        self.coordinator: GroupCoordinator | None = None
        self.sharding: Sharding | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.last_error: str | None = None
        self._act_error: str | None = None
        """Why the last tick's loads, releases or reloads failed (logged once while the same)."""
        self._notices: GlobalsNotices | None = None
        self._stale = False
        self._reloading: asyncio.Task[None] | None = None

    @property
    def writer(self) -> OrderedWriter:
        """The server's ordered writer (made after the store it writes to)."""
        return self._writer()

    @property
    def valid_until(self) -> float:
        return self.machine.valid_until

    @property
    def leaving(self) -> bool:
        return self.machine.leaving

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

    # -- the machine's decisions, carried out ---------------------------------------------

    def _forget(self, shards: Iterable[int]) -> None:
        """Shards the machine no longer holds: out of the fence, then out of the core."""
        sharding, coordinator = self.sharding, self.coordinator
        assert sharding is not None
        assert coordinator is not None
        loaded = [s for s in shards if s in sharding.serving or s in sharding.loading]
        self._sync()
        for shard in loaded:
            self._apply(coordinator.unload(shard, now_ms=self._now_ms()))

    def _sync(self) -> None:
        """The store's fence and the core's loading shards, as the machine has them."""
        machine = self.machine
        if self.fence.epochs != machine.fence:
            self.fence.epochs = dict(machine.fence)
        if self.sharding is not None:
            self.sharding.loading = set(machine.loading)

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
        with self._lock:
            lost, release = self.machine.ticked(tick)
        self._arm_watchdog()
        sharding.owners = dict(tick.owners)
        self.store.member_rows = self.machine.member_rows
        sharding.brokers = {
            r.node_id: {
                name: Node(r.node_id, host, port) for name, (host, port) in r.listeners.items()
            }
            for r in tick.replicas
        }
        self._forget([*lost, *release])
        if tick.globals_version != self.store.globals_seen:
            await self.fresh_globals()
        if release:
            await self.writer.drained()
            with self._lock:
                handed = self.machine.still_releasing(release)
            await self._leased(lambda: self.leases.release(handed))
            with self._lock:
                self.machine.released(handed)
        with self._lock:
            wanted = self.machine.to_load(tick.held)
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
        """Serve `wanted` (shard -> epoch), WAITING in the machine. First every write
        queued before is finished: what this replica produced for a shard before it last
        stopped serving it (a self-fence while the database was away) is written or
        refused under the fence it was produced with, never under the new epoch, and is
        in the records read next. Then the machine fences what is still wanted, the
        records are read in one transaction, and the machine says which go into the core
        (not lost meanwhile, leases still fresh: the next renewal loads the others)."""
        coordinator = self.coordinator
        assert coordinator is not None
        started = self._clock()
        self._sync()
        await self.writer.drained()
        with self._lock:
            fenced = self.machine.drained(wanted)
        self._sync()
        if not fenced:
            return  # lost (or the leases ran out) while the writes finished
        try:
            records = await self.writer.run(lambda: self.store.load_shards(list(fenced)))
        except Exception:
            with self._lock:
                self.machine.read_failed(fenced)
            self._sync()
            raise
        with self._lock:
            serve = self.machine.read(fenced, now=self._clock())
        self._sync()
        for shard in serve:
            self._apply(coordinator.load(shard, records[shard], now_ms=self._now_ms()))
        if serve:
            log.info("replica %s: serving shards %s (%d records, %.0f ms)", self.leases.name,
                     serve, sum(len(records[s]) for s in serve),
                     (self._clock() - started) * 1000)  # fmt: skip

    def _refused(self, shards: frozenset[int]) -> None:
        if self.sharding is None:
            return
        with self._lock:
            gone = self.machine.refused(shards)
        self._forget(gone)

    # -- self-fencing --------------------------------------------------------------------

    def check(self, now: float) -> None:
        """Before a request or a timer of the core is handled: past the leases'
        validity, serve nothing (a process woken from a freeze acts on no group first)."""
        if now < self.machine.valid_until or self.sharding is None:
            return
        with self._lock:
            gone = self.machine.check(now)
        if gone:
            log.warning("replica %s: leases not renewed in time (%s): serving no group until "
                        "they are", self.leases.name, self.last_error or "no answer")  # fmt: skip
            self._forget(gone)

    def _arm_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_at(self.machine.valid_until, self._expired)

    def _expired(self) -> None:
        now = self._clock()
        if now < self.machine.valid_until:  # the keep-alive renewed them meanwhile
            self._arm_watchdog()
            return
        self.check(now)

    def _beat(self) -> None:
        with self._lock:
            self.machine.loop_turned(self._clock())
        if not self._stop.is_set():
            asyncio.get_running_loop().call_later(self.tick_s, self._beat)

    def _keep_alive(self) -> None:
        """The keep-alive thread: every `tick_s`, make the renewal the machine asks for."""
        failing = False
        while not self._stop.wait(self.tick_s):
            with self._lock:
                renewal = self.machine.renewal(self._clock())
            if renewal is None:
                continue
            began = self._clock()
            try:
                every_one = self.leases.renew(renewal.epochs)
            except Exception as exc:  # noqa: BLE001 - the ticks say so; try again
                if not failing:
                    log.info("replica %s: keep-alive cannot renew: %s", self.leases.name, exc)
                failing = True
                self.leases.close_renewing()
                continue
            failing = False
            with self._lock:
                self.machine.renewed(renewal, began=began, every_one=every_one)
        self.leases.close_renewing()

    # -- stopping -----------------------------------------------------------------------

    async def leave(self) -> None:
        """Graceful handover: stop serving, finish the writes, release every shard."""
        self._stop.set()
        log.info("replica %s: handing its shards over", self.leases.name)
        with self._lock:
            gone = self.machine.leave()
        if self.sharding is not None:
            self._forget(gone)
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
        if not self.machine.valid_until:
            return "taking shard leases"
        return None
