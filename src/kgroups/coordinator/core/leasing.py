"""One replica's decisions about its shards, sans-IO: lease events and the time in, actions out.

A replica (`coordinator/replicas.py`) holds shard leases in PostgreSQL. Everything it
decides about them is here, in code that takes what happened (a tick's result, writes
drained, a shard's records read or not, a write refused, a renewal, a request or timer
about to run) and the monotonic time, and says what to do. The adapter,
`replicas.Replication`, does only the I/O (the lease transactions on their threads, the
ordered writer's drain, reading records, the core's `load`/`unload`, the watchdog's
timer), and `tests/sim/replica_sim.py` runs this same class on simulated time.

A shard held here is in one state, with checked transitions (`ShardState`):

| state     | what it means                                              | entered from      |
|-----------|------------------------------------------------------------|-------------------|
| WAITING   | claimed; the writes queued before it are finishing          | not held          |
| READING   | fenced at its epoch; its records are being read             | WAITING           |
| SERVING   | loaded into the core: requests for its groups are answered | READING           |
| RELEASING | over the fair share: unloaded, its writes finishing        | any other, or not |

Any state may go to "not held" (lost, refused, expired, read failed, released, left).
The store's fence holds the epochs of READING and SERVING shards (`fence`): a write
touching a shard outside it is refused.

Validity: a tick's leases hold until the monotonic time the tick began plus the TTL (the
database computed their expiry later than that); less a margin, that is `valid_until`.
Past it nothing is served (`check`, asked before every request and every timer of the
core, and by the watchdog at `valid_until`): a replica woken from a freeze longer than
its leases acts on no group before it has stopped serving them. Between ticks a
keep-alive renews the fenced shards' leases (`renewal`, `renewed`): it moves
`valid_until` only if the fence did not change meanwhile (a shard fenced since was not
renewed by it), and asks for no renewal once the event loop has not turned for
`stall_s` (a wedged process must lose its shards to the others).

A write the fence refused (`set_aside`) is the ordered writer's decision, made here too:
which of the effects in flight are written again and which are not acknowledged.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kgroups.coordinator.core.effects import Effects

__all__ = [
    "IllegalShardTransition",
    "LeaseTimings",
    "Renewal",
    "Replica",
    "ReplicaLeases",
    "ShardState",
    "Tick",
    "set_aside",
]


@dataclass(frozen=True, slots=True)
class Replica:
    """A live replica as clients reach it."""

    name: str
    node_id: int
    listeners: Mapping[str, tuple[str, int]]
    """Listener name -> advertised (host, port)."""
    member_rows: bool = True
    """It reads consumer groups whose members are rows (a replica from before schema 4,
    still running through an upgrade, does not)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """What one renewal found and did."""

    began: float
    """Monotonic time before the transaction: the leases held hold until `began + ttl_s`."""
    held: Mapping[int, int]
    """shard -> epoch, every shard this replica holds now."""
    claimed: Mapping[int, int]
    """The shards of `held` claimed by this tick."""
    lost: frozenset[int]
    """Shards held before this tick that another replica has taken (or that expired)."""
    release: tuple[int, ...]
    """Shards over this replica's fair share: to stop serving, then `release`."""
    replicas: tuple[Replica, ...]
    """Live replicas (this one included), by node id."""
    owners: Mapping[int, int] = field(default_factory=dict)
    """shard -> node id of its live owner (shards without one are absent)."""
    globals_version: int = 0
    """Bumped by every write of a topic or group setting: reload them when it moves."""


class ShardState(enum.Enum):
    WAITING = "waiting"
    READING = "reading"
    SERVING = "serving"
    RELEASING = "releasing"


_PREVIOUS: Mapping[ShardState, frozenset[ShardState | None]] = {
    ShardState.WAITING: frozenset({None}),
    ShardState.READING: frozenset({ShardState.WAITING}),
    ShardState.SERVING: frozenset({ShardState.READING}),
    ShardState.RELEASING: frozenset(
        {None, ShardState.WAITING, ShardState.READING, ShardState.SERVING}
    ),
}
"""For each state, the states (None: not held) a shard may be in just before it."""

_FENCED = (ShardState.READING, ShardState.SERVING)
_LOADING = (ShardState.WAITING, ShardState.READING)


class IllegalShardTransition(RuntimeError):
    """A bug: the replica tried to move a shard along an edge the table does not allow."""


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    """How often a replica renews and how early it stops trusting its leases."""

    ttl_s: float
    """How long a renewed lease lasts (`--lease-ttl`)."""

    @property
    def tick_s(self) -> float:
        """Between two ticks (and two keep-alive renewals): five a lease, at most 1 s."""
        return max(min(self.ttl_s / 5, 1.0), 0.05)

    @property
    def margin_s(self) -> float:
        """Served until this long before the leases can have expired."""
        return min(1.0, self.ttl_s / 4)

    @property
    def stall_s(self) -> float:
        """The keep-alive renews only while the event loop turned this recently."""
        return max(3 * self.ttl_s, 6.0)


@dataclass(frozen=True, slots=True)
class Renewal:
    """A keep-alive renewal to make: these shards at these epochs, as fenced at `version`."""

    epochs: Mapping[int, int]
    version: int


@dataclass(frozen=True, slots=True)
class Held:
    state: ShardState
    epoch: int


class ReplicaLeases:
    """One replica's shards and the validity of its leases (see the module's docstring)."""

    def __init__(self, ttl_s: float, *, now: float) -> None:
        self.timings = LeaseTimings(ttl_s)
        self.shards: dict[int, Held] = {}
        self.valid_until = 0.0
        """Monotonic time until which the leases held are trusted (0: none yet)."""
        self.loop_seen = now
        """When the event loop last turned (`loop_turned`)."""
        self.leaving = False
        self.member_rows = False
        """Write consumer groups' members as rows: every live replica reads them."""
        self._fence: Mapping[int, int] = {}
        self.fence_version = 0
        """Bumped whenever `fence` changes (a renewal of an older fence moves nothing)."""

    # -- what the adapter reads ---------------------------------------------------------

    @property
    def fence(self) -> Mapping[int, int]:
        """shard -> epoch every write is checked against: the READING and SERVING shards.
        A new mapping on every change, never changed in place (another thread reads it)."""
        return self._fence

    def state(self, shard: int) -> ShardState | None:
        held = self.shards.get(shard)
        return None if held is None else held.state

    def in_state(self, *states: ShardState) -> list[int]:
        return sorted(s for s, h in self.shards.items() if h.state in states)

    @property
    def loading(self) -> frozenset[int]:
        """Shards claimed here and not served yet (the core answers them LOAD_IN_PROGRESS)."""
        return frozenset(s for s, h in self.shards.items() if h.state in _LOADING)

    # -- events -------------------------------------------------------------------------

    def ticked(self, tick: Tick) -> tuple[list[int], list[int]]:
        """A tick renewed the leases: trust them for another TTL from its start. Returns
        the shards to stop serving now (lost to another replica) and those to hand over
        (over the fair share: stop serving them, finish their writes, then `released`)."""
        self._extend(tick.began + self.timings.ttl_s - self.timings.margin_s)
        self.member_rows = all(r.member_rows for r in tick.replicas)
        lost = [s for s in sorted(tick.lost) if s in self.shards]
        for shard in lost:
            self._move(shard, None)
        release = [s for s in tick.release if s in tick.held]
        for shard in self.in_state(ShardState.RELEASING):
            if shard not in release:  # a handover that failed, and is no longer asked for
                self._move(shard, None)
        for shard in release:
            if self.state(shard) is not ShardState.RELEASING:
                self._move(shard, ShardState.RELEASING, tick.held[shard])
        return lost, release

    def still_releasing(self, shards: list[int]) -> list[int]:
        """Of `shards`, their writes finished, those to hand over now: still RELEASING (a
        shard lost meanwhile, or no longer asked for and taken up again, is not)."""
        return [s for s in shards if self.state(s) is ShardState.RELEASING]

    def released(self, shards: list[int]) -> None:
        """Handed over: no longer held here."""
        for shard in shards:
            if self.state(shard) is ShardState.RELEASING:
                self._move(shard, None)

    def to_load(self, held: Mapping[int, int]) -> dict[int, int]:
        """Of the shards a tick says are held (shard -> epoch), those to load now: not
        held here in any state yet, and this replica not leaving. They are WAITING."""
        if self.leaving:
            return {}
        wanted = {s: e for s, e in sorted(held.items()) if s not in self.shards}
        for shard, epoch in wanted.items():
            self._move(shard, ShardState.WAITING, epoch)
        return wanted

    def drained(self, wanted: Mapping[int, int]) -> dict[int, int]:
        """The writes queued before `wanted` finished: fence those still WAITING at their
        epoch (the others were lost, or the leases ran out meanwhile); read them next."""
        fenced = {
            s: e for s, e in wanted.items()
            if self.shards.get(s) == Held(ShardState.WAITING, e)
        }  # fmt: skip
        for shard, epoch in fenced.items():
            self._move(shard, ShardState.READING, epoch)
        return fenced

    def read(self, fenced: Mapping[int, int], *, now: float) -> list[int]:
        """Their records were read: those to load into the core (still READING at that
        epoch, and the leases still valid; the rest are held no more, and the next tick
        claims them again)."""
        serve = []
        for shard, epoch in fenced.items():
            if self.shards.get(shard) != Held(ShardState.READING, epoch):
                continue  # lost, refused or expired while its records were read
            if now < self.valid_until:
                self._move(shard, ShardState.SERVING, epoch)
                serve.append(shard)
            else:
                self._move(shard, None)
        return serve

    def read_failed(self, fenced: Mapping[int, int]) -> None:
        """Their records could not be read: held no more, loaded at the next tick."""
        for shard, epoch in fenced.items():
            if self.shards.get(shard) == Held(ShardState.READING, epoch):
                self._move(shard, None)

    def refused(self, shards: frozenset[int]) -> list[int]:
        """A write to `shards` was refused (another replica holds them): stop serving them.
        A shard being loaded again is kept: the refused write was made before, under the
        fence it was produced with, and its records are read after it."""
        gone = [s for s in sorted(shards) if s in self.shards and s not in self.loading]
        for shard in gone:
            self._move(shard, None)
        return gone

    def check(self, now: float) -> list[int]:
        """Before a request or a timer of the core, and at the watchdog's moment: past
        the leases' validity, stop serving every shard (returned)."""
        if now < self.valid_until:
            return []
        gone = [s for s, h in sorted(self.shards.items()) if h.state is not ShardState.RELEASING]
        for shard in gone:
            self._move(shard, None)
        return gone

    def leave(self) -> list[int]:
        """Stopping (SIGTERM): serve nothing more and load nothing more."""
        self.leaving = True
        gone = [s for s, h in sorted(self.shards.items()) if h.state is not ShardState.RELEASING]
        for shard in gone:
            self._move(shard, None)
        return gone

    # -- the keep-alive -----------------------------------------------------------------

    def loop_turned(self, now: float) -> None:
        self.loop_seen = max(self.loop_seen, now)

    def renewal(self, now: float) -> Renewal | None:
        """What the keep-alive renews now: the fenced shards, unless none are or the event
        loop has not turned for `stall_s` (a wedged process loses its shards)."""
        if not self._fence or now - self.loop_seen > self.timings.stall_s:
            return None
        return Renewal(self._fence, self.fence_version)

    def renewed(self, renewal: Renewal, *, began: float, every_one: bool) -> None:
        """The keep-alive renewed `renewal` in a transaction begun at `began`: trust the
        leases for a TTL from then if all were still this replica's and the fence has
        not changed since (a shard fenced since may hold an older lease)."""
        if every_one and renewal.version == self.fence_version:
            self._extend(began + self.timings.ttl_s - self.timings.margin_s)

    # -- the table ----------------------------------------------------------------------

    def _extend(self, until: float) -> None:
        self.valid_until = max(self.valid_until, until)

    def _move(self, shard: int, target: ShardState | None, epoch: int = -1) -> None:
        held = self.shards.get(shard)
        current = None if held is None else held.state
        if target is not None and current not in _PREVIOUS[target]:
            raise IllegalShardTransition(
                f"shard {shard} cannot become {target.value} from "
                f"{'not held' if current is None else current.value}"
            )
        if target is None:
            self.shards.pop(shard, None)
        else:
            self.shards[shard] = Held(target, epoch if held is None or epoch >= 0 else held.epoch)
        fence = {s: h.epoch for s, h in self.shards.items() if h.state in _FENCED}
        if fence != self._fence:
            self._fence = fence
            self.fence_version += 1


def set_aside(
    batch: Sequence[Effects],
    queue: Sequence[Effects],
    refused: frozenset[int],
    *,
    written_to: Callable[[Effects], set[int]],
    answers_about: Callable[[Effects], set[int]],
) -> tuple[list[Effects], list[Effects]]:
    """A write of `batch` refused because the `refused` shards are another replica's now:
    nothing of it was written. Returns what to write again, in order (the batch's effects
    whose records touch none of them, then the queue behind it), and what is never
    acknowledged (their clients' connections close, so they look for the new coordinator):
    the effects that wrote to a refused shard, and the answers with no records of their
    own about a group of one, in the batch or queued behind it (a follower's SyncGroup
    answered with the assignment the refused write held). `written_to` gives the shards an effect's
    records write, `answers_about` those of the groups its answers are about."""
    again: list[Effects] = []
    lost: list[Effects] = []
    for effects in batch:
        gone = written_to(effects) & refused or _read_from(effects, refused, answers_about)
        (lost if gone else again).append(effects)
    for effects in queue:
        (lost if _read_from(effects, refused, answers_about) else again).append(effects)
    return again, lost


def _read_from(
    effects: Effects, refused: frozenset[int], answers_about: Callable[[Effects], set[int]]
) -> bool:
    """Answers with no records of their own about a refused shard's group were read from
    the state the refused write held (in the batch itself too: a follower's SyncGroup is
    answered in the same batch as the leader's that wrote the assignment)."""
    return not effects.records and bool(answers_about(effects) & refused)
