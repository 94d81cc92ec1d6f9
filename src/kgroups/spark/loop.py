"""The Spark member's loop, on the member's own event loop: batches, exactly once.

`BatchLoop` is the whole decision-making of a Spark application in a group, and it
knows nothing of Spark: the source, the user's `transform` and the sink are plain
blocking calls that the loop hands to `blocking` (threads in production, so the member
keeps heartbeating while Spark works; in the tests, virtual time). Each turn:

1. take the member's generation and assignment (only while it is stable);
2. on a new generation, read the group's committed offsets for the assignment and finish
   what their metadata says is unfinished (`_recover`): a staging sink publishes the
   committed-but-unpublished batch and sweeps what was staged and never committed; an
   idempotent sink writes again every batch whose plan is committed there (the whole
   batch, even partitions now owned by others: the sink keeps one copy, and the wait for
   this member's write ends once another owner is seen to finish it) and commits its
   end. Each position then comes from the committed offset (Kafka's auto.offset.reset
   when there is none or it is out of range, `plan.start_offset`);
3. plan one `MicroBatch` of the owned partitions with new records (`plan.next_batch`),
   read its ranges as one DataFrame and hand it to the user's `transform(df, batch)`;
4. deliver the result by the sink's protocol (see `sinks`): stage, commit the end
   offsets (the decision), publish; or commit the plan at the start offsets (the
   decision), write, commit the end offsets. Every commit is pinned to the generation the
   batch was planned in.

The commit is the only fence: the loop never decides by itself that its work still
counts. A member that slept through its session (a frozen process) wakes with its batch
done and commits: the commit is refused, and the loop drops the batch and reads again
from what the group committed. When a commit's outcome is unknown (the coordinator went
away before answering), nothing is assumed either way: the next turn reads the committed
metadata again and finishes what it names. A commit refused for a reason that retrying
cannot cure (not authorized, an unknown topic, metadata too large) ends the loop with
`PipelineError` saying why; unknown outcomes are retried, backing off up to `MAX_BACKOFF`.

What it does is measured (`metrics.SparkMetrics`, in the member's registry): records and
micro-batches completed, each micro-batch's duration on the member's clock, and the lag
behind the ends the source reported on each turn.

Turns run one after another, except at a takeover: partitions assigned to the member
while a turn is in flight (a cooperative rebalance after another member died) get a turn
of their own at once, beside it, instead of waiting for the batch in flight to end. No
partition is in two turns, and the next turn waits for both, so that the partitions go on
in one batch. A partition's position counts only in the generation it was read from the
group in (`recovered`); in any other, the turn reads the group again first.

The loop is the member's rebalance listener. Turns in flight hold a revocation until
they end (their commits are still allowed while the member prepares to rejoin), bounded by
the member's rebalance timeout: past it the member reports the partitions lost. A loss
calls `cancel` (Spark's cancelAllJobs) so the batch stops at once; a batch that fails
after a loss is dropped, one that fails otherwise is the application's error and ends
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from prometheus_client import CollectorRegistry

from kgroups.client import (
    CommitError,
    CommitFailedError,
    ConsumerProtocolMember,
    CoordinatorUnavailable,
    GroupMember,
    MemberError,
    MemberState,
    OffsetAndMetadata,
    RebalanceInProgressError,
    TopicPartition,
)
from kgroups.protocol.addresses import parse_bootstrap
from kgroups.protocol.errors import ErrorCode
from kgroups.spark.batches import MicroBatch, decode
from kgroups.spark.growth import INTERVAL_S, AdminSession, TopicAdmin, TopicGrowth
from kgroups.spark.metrics import LoopStats, SparkMetrics
from kgroups.spark.plan import Reset, next_batch, reset_time, start_offset
from kgroups.spark.sinks import IdempotentSink, OutboxSink, Process, Sink, StagedSink
from kgroups.spark.sources import Partitioned, Source, Timed
from kgroups.tasks import wait_set

log = logging.getLogger(__name__)
T = TypeVar("T")

Transform = Callable[[Any, MicroBatch], Any]
"""(the batch's DataFrame, the batch) -> the DataFrame to write."""

Blocking = Callable[[Callable[[], Any]], Awaitable[Any]]
"""Runs a blocking call away from the event loop (`asyncio.to_thread`)."""

Outcome = Literal["accepted", "refused", "unknown"]

MAX_BACKOFF = 10.0
"""The longest wait before trying again after commits of unknown outcome."""
SIBLING_POLL_S = 0.2
"""How often a member writing a dead member's batch again asks whether the owner of
another of its partitions has finished it."""

RETRIABLE = frozenset({
    ErrorCode.request_timed_out, ErrorCode.unknown_server_error,
    ErrorCode.coordinator_load_in_progress, ErrorCode.network_exception,
})  # fmt: skip
"""Commit errors that say nothing of whether the commit happened."""


class PipelineError(RuntimeError):
    """The group refused a commit for a reason retrying cannot cure."""


@dataclass
class Progress:
    """What one turn of the loop did: batches delivered (visible in the sink and
    committed) and dropped (to be read again, or finished by whoever owns them next)."""

    generation: int
    published: list[MicroBatch] = field(default_factory=list)
    dropped: list[MicroBatch] = field(default_factory=list)


def _left_to_end(write: asyncio.Future[bool]) -> None:
    """A write of a batch that another member finished: its outcome no longer matters
    (the table kept one copy either way), but a failure is said."""
    if not write.cancelled() and write.exception() is not None:
        log.info("a write of a batch finished elsewhere failed: %s", write.exception())


async def _in_thread(call: Callable[[], T]) -> T:
    return await asyncio.to_thread(call)


def _identity(frame: Any, batch: MicroBatch) -> Any:
    return frame


def admin_session(bootstrap: str, security: Any = None, connect: Any = None) -> AdminSession:
    """Runs a function with a `kgroups.admin.Admin` on each bootstrap address in turn
    until one answers (with the member's security and, in tests, its network), as Kafka's
    admin client does: any replica of a kgroups cluster serves the topics, and the first
    one named may be the one that is down. The function may run again on the next address
    after a connection failure, so it must be safe to repeat (growing is: it compares
    first)."""
    addresses = parse_bootstrap(bootstrap)

    async def session(use: Callable[[TopicAdmin], Awaitable[None]]) -> None:
        from kgroups.admin import Admin

        for n, (host, port) in enumerate(addresses, start=1):
            async with Admin(host, port, security=security, connect=connect) as admin:
                try:
                    await use(admin)
                    return
                except CoordinatorUnavailable:
                    if n == len(addresses):
                        raise
                    log.info("%s:%s does not answer; trying the next bootstrap address",
                             host, port)  # fmt: skip

    return session


CLASSIC_ONLY = frozenset({"assignors", "heartbeat_interval_ms", "retry_backoff_ms",
                          "metadata_max_age_ms", "replicas", "rack"})  # fmt: skip
"""Member options the consumer protocol's coordinator decides instead."""


def consumer_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """`GroupMember`'s options as `ConsumerProtocolMember` takes them; assignors asked
    for by name are refused (the coordinator assigns: `server_assignor`)."""
    if options.get("assignors"):
        raise ValueError(
            "assignors are the classic protocol's: under the consumer protocol the "
            "coordinator assigns (server_assignor='uniform' or 'range')"
        )
    given = {k: v for k, v in options.items() if k not in CLASSIC_ONLY}
    if "request_timeout_ms" in given:
        given["request_timeout"] = given.pop("request_timeout_ms") / 1000
    return given


class BatchLoop:
    """See the module docstring. Give `transform` and `sink` (a `sinks.StagedSink` or
    `sinks.IdempotentSink`), or the JSON outbox's `process` and `output`.
    `app_id`: the prefix of idempotent writes' app ids (default "kgroups/<group>").
    `member_options` go to `GroupMember`; `registry` (default prometheus_client's)
    receives the member's metrics and the loop's.

    `group_protocol="consumer"`: the member speaks Kafka 4's consumer protocol
    (`ConsumerProtocolMember`): the coordinator assigns (`server_assignor`, default its
    own), each member reconciles alone, and a member losing no partition never waits
    for another's batch. Its epoch moves at every change in the group, so positions
    are read from the group again after one (a commit of a batch planned at an older
    epoch is still accepted for partitions the member held since, Kafka 4.3's rule).
    The options that name the classic protocol's timing and assignors do not apply:
    the coordinator sets them (`session_timeout_ms` says what session it gives)."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group: str,
        topic: str,
        source: Source,
        sink: Sink | None = None,
        transform: Transform = _identity,
        process: Process | None = None,
        output: str | None = None,
        name: str = "spark",
        app_id: str | None = None,
        auto_offset_reset: Reset = "earliest",
        max_records: int = 10_000,
        max_metadata_bytes: int = 4_096,
        poll_interval: float = 0.5,
        partition_check_interval: float = INTERVAL_S,
        admin: AdminSession | None = None,
        cancel: Callable[[], None] = lambda: None,
        blocking: Blocking = _in_thread,
        registry: CollectorRegistry | None = None,
        group_protocol: Literal["classic", "consumer"] = "classic",
        **member_options: Any,
    ) -> None:
        if process is not None and output is not None and sink is None:
            sink = OutboxSink(output, process)
        if sink is None or (process is not None and not isinstance(sink, OutboxSink)):
            raise TypeError("give transform= and sink=, or the outbox's process= and output=")
        if not isinstance(sink, StagedSink | IdempotentSink):
            raise TypeError(f"{type(sink).__name__} is neither a staged nor an idempotent sink")
        self.topic = topic
        self.source = source
        self.sink = sink
        self.transform = transform
        self.name = name
        self.app = app_id or f"kgroups/{group}"
        # A bad reset is a ValueError now, not when the first partition without an offset comes.
        if reset_time(auto_offset_reset, 0) is not None and not isinstance(source, Timed):
            raise ValueError(f"auto_offset_reset {auto_offset_reset!r}: the source has no "
                             "record timestamps")  # fmt: skip
        self.reset: Reset = auto_offset_reset
        self.max_records = max_records
        self.max_metadata_bytes = max_metadata_bytes
        self.poll_interval = poll_interval
        self.cancel = cancel
        self.blocking = blocking
        self.member: GroupMember | ConsumerProtocolMember
        if group_protocol == "consumer":
            self.member = ConsumerProtocolMember(
                bootstrap, group, [topic], listener=self, client_id=name,
                **consumer_options(member_options),
            )  # fmt: skip
        elif group_protocol == "classic":
            # Cooperative by default: an eager rebalance waits for every member's batch in
            # flight (its revocation does), a cooperative one only for batches that lose
            # partitions.
            member_options.setdefault("assignors", ["cooperative-sticky"])
            self.member = GroupMember(
                bootstrap, group, [topic], listener=self, client_id=name, registry=registry,
                **member_options,
            )  # fmt: skip
        else:
            raise ValueError(f"group_protocol {group_protocol!r}: classic or consumer")
        self.stats = LoopStats(SparkMetrics.of(registry), group, topic)
        self.growth = None
        if isinstance(source, Partitioned):
            session = admin or admin_session(
                bootstrap, member_options.get("security"), member_options.get("connect")
            )
            self.growth = TopicGrowth(topic, session, interval=partition_check_interval)
        self.positions: dict[int, int] = {}
        """Where each partition's next batch starts."""
        self.recovered: dict[int, int] = {}
        """Per partition, the generation its position was read from the group in: a
        position counts in that generation only (another reads the group again)."""
        self.stopping = asyncio.Event()
        self._busy: set[int] = set()
        """Partitions that a turn in flight holds (a takeover turn takes others only)."""
        self._turns = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._assigned = asyncio.Event()
        self._losses = 0
        """Losses so far: a turn that sees the count move has lost its partitions."""
        self._ends: dict[int, int] = {}
        self._unknown = 0
        """Turns in a row whose commit outcome was unknown (the back-off grows with it)."""
        self._checked: set[str] = set()
        """App ids known to hold nothing above this member's next version."""

    # -- the member's rebalance listener ---------------------------------------------------

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self._idle.wait()

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._losses += 1
        self.recovered.clear()
        self.stats.lag(0)  # their lag is no longer this member's
        if self._turns:
            log.warning("%s: partitions lost mid-batch: cancelling its Spark jobs", self.name)
            self.cancel()

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions:  # a turn in flight: these may start at once (see `run`)
            self._assigned.set()

    # -- running ---------------------------------------------------------------------------

    async def start(self, timeout: float | None = None) -> None:
        await self.member.start(timeout=timeout)

    async def run(self) -> None:
        """Turn the loop until `stop()` (or the member fails, which raises)."""
        while not self.stopping.is_set():
            progress = await self._turn_and_takeovers()
            wait = self.poll_interval
            if progress is None:  # no generation: go on the moment one forms
                with contextlib.suppress(TimeoutError, MemberError):
                    await self.member.wait_stable(timeout=self.poll_interval)
                if self.member.state is MemberState.STABLE or self.member.error is not None:
                    continue
            elif self._unknown:
                wait = min(self.poll_interval * 2 ** min(self._unknown, 10), MAX_BACKOFF)
            elif progress.published or progress.dropped:
                continue
            await wait_set(self.stopping, wait)  # nothing new to read (or closing)

    async def _turn_and_takeovers(self) -> Progress | None:
        """One turn, and beside it a takeover turn whenever partitions are assigned to
        the member while it is in flight (a cooperative rebalance gave it a dead
        member's partitions): they start at once instead of after the batch in flight,
        on Spark's other cores. Both end before the next turn, so that the partitions
        go on in one batch (one sink commit, not two, per turn)."""
        self._assigned.clear()
        turn = asyncio.create_task(self.run_once())
        takeovers: list[asyncio.Task[Progress | None]] = []
        try:
            while not turn.done():
                assigned = asyncio.create_task(self._assigned.wait())
                await asyncio.wait({turn, assigned}, return_when=asyncio.FIRST_COMPLETED)
                assigned.cancel()
                if self._assigned.is_set() and not turn.done():
                    self._assigned.clear()
                    takeovers.append(asyncio.create_task(self.run_once(takeover=True)))
            progress = turn.result()
            for side in takeovers:
                took = await side
                progress = progress or took
            return progress
        finally:
            for task in (turn, *takeovers):
                task.cancel()

    def stop(self) -> None:
        self.stopping.set()

    async def close(self) -> None:
        await self.member.close()
        self.stats.close()

    async def run_once(self, *, takeover: bool = False) -> Progress | None:
        """One turn over the owned partitions that no turn in flight holds; None when
        the member holds no generation. (`takeover`: a turn beside another.)"""
        member = self.member
        if member.error is not None:
            raise member.error
        if member.state is not MemberState.STABLE:
            return None
        self._turns += 1
        self._idle.clear()
        taken: set[int] = set()
        try:
            return await self._turn(member.generation, member.assignment, taken, takeover)
        finally:
            self._busy -= taken
            self._turns -= 1
            if not self._turns:
                self._idle.set()

    async def _turn(
        self, generation: int, owned: frozenset[TopicPartition], taken: set[int], takeover: bool
    ) -> Progress:
        losses = self._losses
        if not takeover:
            await self._check_partitions()
        known = self.growth.source_count if self.growth else None
        mine = sorted(tp.partition for tp in owned if tp.topic == self.topic
                      and (known is None or tp.partition < known)
                      and tp.partition not in self._busy)  # fmt: skip
        taken.update(mine)
        self._busy |= taken
        # A new generation, or partitions the source did not know when it began (its view
        # of a topic just grown lagged): where to start comes from the group.
        stale = [p for p in mine if self.recovered.get(p) != generation]
        if stale and self._losses != losses:  # lost since the turn began: nothing to do
            return Progress(generation)  # (a plan recovered now would be written for nobody)
        if stale:
            try:
                if not await self._recover(generation, stale, losses):
                    return Progress(generation)
            except (CoordinatorUnavailable, RebalanceInProgressError) as exc:
                log.warning("%s: cannot read where to start yet: %s", self.name, exc)
                return Progress(generation)  # nothing done: try again shortly
        if not mine:
            return Progress(generation)
        started = asyncio.get_running_loop().time()
        held = await self.blocking(lambda: self.source.offsets(self.topic, mine))
        ends = {p: end for p, (_, end) in held.items()}
        self._report_lag(ends)
        batch = next_batch(
            self.topic, generation, self.name, {p: self.positions[p] for p in mine}, ends,
            self.max_records, app=self.app, max_metadata_bytes=self.max_metadata_bytes,
        )  # fmt: skip
        if batch is None:
            return Progress(generation)
        log.info("%s: generation %d: batch %s %s", self.name, generation, batch.id,
                 list(batch.ranges))  # fmt: skip
        if isinstance(self.sink, IdempotentSink):
            progress = await self._plan_write_commit(self.sink, batch, ends, losses)
        else:
            progress = await self._stage_commit_publish(self.sink, batch, ends, losses)
        if progress.published:
            self._unknown = 0
            self._report_lag(ends)
            self.stats.completed(batch.records, asyncio.get_running_loop().time() - started)
        return progress

    async def _check_partitions(self) -> None:
        """Every so often: is the source's topic larger than the coordinator's?"""
        growth, source = self.growth, self.source
        now = asyncio.get_running_loop().time()
        if growth is None or not growth.due(now) or not isinstance(source, Partitioned):
            return
        count = await self.blocking(lambda: source.partitions(self.topic))
        if await growth.check(count, now):
            self.member.request_rejoin(f"topic {self.topic} grew to {count} partitions")

    def _report_lag(self, ends: Mapping[int, int]) -> None:
        """The source's ends less where the member is (its committed offsets), over the
        partitions it owns (turns side by side each report theirs)."""
        self._ends.update(ends)
        owned = {tp.partition for tp in self.member.assignment if tp.topic == self.topic}
        self.stats.lag(sum(max(end - self.positions.get(p, end), 0)
                           for p, end in self._ends.items() if p in owned))  # fmt: skip

    def _frame(self, batch: MicroBatch) -> Any:
        """The batch's records as the user's transform makes them (Spark is lazy: the
        sink's write runs it, in the executors)."""
        return self.transform(self.source.read(self.topic, batch.offsets), batch)

    # -- the two protocols -------------------------------------------------------------------

    async def _stage_commit_publish(
        self, sink: StagedSink, batch: MicroBatch, ends: Mapping[int, int], losses: int
    ) -> Progress:
        try:
            metadata = await self.blocking(lambda: sink.stage(batch, self._frame(batch)))
        except Exception:
            if self._losses == losses:
                raise
            await self.blocking(lambda: sink.discard(batch))
            return self._drop(batch, "the partitions were lost: the batch was cancelled")
        log.info("%s: batch %s: staged; committing", self.name, batch.id)
        offsets = {p: OffsetAndMetadata(e, metadata[p]) for p, _, e in batch.ranges}
        outcome = await self._commit(batch, offsets, ends)
        if outcome == "refused":
            await self.blocking(lambda: sink.discard(batch))
            return self._drop(batch, "commit refused")
        if outcome == "unknown":  # maybe accepted: what is staged stays for whoever reads next
            return self._drop(batch, "commit outcome unknown")
        log.info("%s: batch %s: committed; publishing", self.name, batch.id)
        await self.blocking(lambda: sink.publish(batch, metadata))
        return self._done(batch)

    async def _plan_write_commit(
        self, sink: IdempotentSink, batch: MicroBatch, ends: Mapping[int, int], losses: int
    ) -> Progress:
        if batch.app_id not in self._checked:
            try:
                await self._check_new_app_id(sink, batch)
            except PipelineError:
                raise
            except Exception:  # reading the table's log ran a Spark job, which a loss cancels
                if self._losses == losses:
                    raise
                return self._drop(batch, "the partitions were lost: the table check was cancelled")
        plan = batch.encode("plan")
        offsets = {p: OffsetAndMetadata(s, plan) for p, s, _ in batch.ranges}
        outcome = await self._commit(batch, offsets, ends)
        if outcome != "accepted":  # refused: never written; unknown: the next turn looks
            return self._drop(batch, f"plan commit {outcome}")
        log.info("%s: batch %s: plan committed; writing", self.name, batch.id)
        if not await self._write(sink, batch, losses):
            return self._drop(batch, "the partitions were lost: the write was cancelled")
        done = batch.encode("done")
        offsets = {p: OffsetAndMetadata(e, done) for p, _, e in batch.ranges}
        outcome = await self._commit(batch, offsets, ends)
        if outcome != "accepted":  # written: whoever finds the plan writes it again, skipped
            self._forget(batch)
            log.warning("%s: batch %s written, its end commit %s", self.name, batch.id, outcome)
            return Progress(batch.generation, [batch])
        return self._done(batch)

    async def _write(
        self, sink: IdempotentSink, batch: MicroBatch, losses: int, *, again: bool = False
    ) -> bool:
        """Write the batch (`again`: someone else's plan); False if it failed because the
        partitions were lost since the turn began, when there were `losses` (a failure
        otherwise is the application's, and raises).

        The sink skipping this member's own new batch, which nobody else can have written
        while the member kept its generation, means another batch had its app id and
        version: its records would be lost, so the pipeline stops instead."""
        try:
            wrote = await self.blocking(lambda: sink.write(batch, self._frame(batch)))
        except Exception:
            if self._losses == losses:
                raise
            return False
        if not wrote and not again and await self._still_owner(batch, losses):
            raise PipelineError(
                f"{self.name}: the sink skipped batch {batch.id}, planned and not yet written by "
                f"anyone else: another batch wrote {batch.app_id} at version {batch.version}"
            )
        return True

    async def _replay(
        self, sink: IdempotentSink, batch: MicroBatch, mine: list[int], losses: int
    ) -> bool:
        """Write a planned batch again, unless the owner of another of its partitions is
        seen to finish it first: then the batch is in the table, and this member's own
        write (left to end by itself: the table skips it) is not waited for. A dead
        member's batch spans all its partitions, which a rebalance usually splits among
        survivors; each writes the whole batch, and without this the slowest (its own
        batch in flight, Delta rebuilding the table's state) holds its partitions back."""
        if set(batch.offsets) <= set(mine):  # nobody else owns any of it
            return await self._write(sink, batch, losses, again=True)
        if await self._finished_elsewhere(batch, mine):
            log.info("%s: batch %s: already finished by the owner of another of its "
                     "partitions", self.name, batch.id)  # fmt: skip
            return True
        write = asyncio.ensure_future(self._write(sink, batch, losses, again=True))
        while not write.done():
            await asyncio.wait({write}, timeout=SIBLING_POLL_S)
            if not write.done() and await self._finished_elsewhere(batch, mine):
                log.info("%s: batch %s: finished by the owner of another of its "
                         "partitions; not waiting for this member's write of it",
                         self.name, batch.id)  # fmt: skip
                write.add_done_callback(_left_to_end)
                return True
        return write.result()

    async def _finished_elsewhere(self, batch: MicroBatch, mine: list[int]) -> bool:
        """Whether the group's offsets show `batch` finished: another of its partitions
        committed its end (a "done" record of the batch, committed only after a write),
        or moved on to a later batch from there (planned only after that "done").
        Unknown (the coordinator unreachable) counts as not finished."""
        others = [TopicPartition(self.topic, p) for p in batch.offsets if p not in mine]
        try:
            committed = await self.member.committed(others)
        except (CoordinatorUnavailable, RebalanceInProgressError, MemberError):
            return False
        for tp, found in committed.items():
            record = decode(found.metadata if found else None)
            if record is None:
                continue
            if record.batch.id == batch.id:
                if record.kind == "done":
                    return True
                continue
            later = record.batch.offsets.get(tp.partition)
            if later is not None and later[0] >= batch.offsets[tp.partition][1]:
                return True
        return False

    async def _still_owner(self, batch: MicroBatch, losses: int) -> bool:
        """Whether the member still holds the batch's generation, proven by an answer to a
        request sent from now on (a zombie waking up learns otherwise within a heartbeat
        or two); False when that cannot be proven within the session timeout."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.member.session_timeout_ms / 1000
        while loop.time() < deadline:
            if self._losses != losses or self.member.generation != batch.generation:
                return False
            proven = self.member.proven_since
            if proven is not None and proven > now:
                return True
            await asyncio.sleep(0.05)
        return False

    async def _check_new_app_id(self, sink: IdempotentSink, batch: MicroBatch) -> None:
        """A sink holding a version at or above a new batch's would skip it silently: that
        happens only when the app ids were used before by a group of the same id (the
        group was deleted and made again), so say so instead of losing the batch."""
        written = await self.blocking(lambda: sink.written(batch.app_id))
        if written is not None and written >= batch.version:
            raise PipelineError(
                f"the sink already holds version {written} of app id {batch.app_id!r}, so "
                f"batch {batch.id} (version {batch.version}) would be skipped: was the group "
                "deleted and made again? Give the pipeline a new app_id"
            )
        self._checked.add(batch.app_id)

    def _done(self, batch: MicroBatch) -> Progress:
        for p, _, end in batch.ranges:
            self.positions[p] = end
        log.info("%s: batch %s: done (%d records)", self.name, batch.id, batch.records)
        return Progress(batch.generation, [batch])

    async def _commit(
        self,
        batch: MicroBatch,
        offsets: Mapping[int, OffsetAndMetadata],
        ends: Mapping[int, int] | None = None,
        *,
        generation: int | None = None,
    ) -> Outcome:
        """Commit pinned to `generation` (default: the batch's); raises `PipelineError`
        for a refusal that retrying cannot cure."""
        tps = {TopicPartition(self.topic, p): o for p, o in offsets.items()}
        # The source's end goes with the commit: Kafka's tools then show the true lag.
        log_ends = {TopicPartition(self.topic, p): e for p, e in (ends or {}).items()}
        try:
            await self.member.commit(
                tps, generation=batch.generation if generation is None else generation,
                log_ends=log_ends,
            )  # fmt: skip
        except (CommitFailedError, RebalanceInProgressError) as exc:
            log.warning("%s: batch %s: commit refused: %s", self.name, batch.id, exc)
            return "refused"
        except CommitError as exc:
            if set(exc.errors.values()) <= RETRIABLE:
                return self._unknown_outcome(batch, exc)
            raise PipelineError(f"{self.name}: batch {batch.id}: {exc}") from exc
        except (CoordinatorUnavailable, MemberError) as exc:
            return self._unknown_outcome(batch, exc)
        return "accepted"

    def _unknown_outcome(self, batch: MicroBatch, exc: Exception) -> Outcome:
        self._unknown += 1
        log.warning("%s: batch %s: commit outcome unknown: %s", self.name, batch.id, exc)
        return "unknown"

    def _drop(self, batch: MicroBatch, why: str) -> Progress:
        log.warning("%s: dropping %s: %s", self.name, batch.id, why)
        self._forget(batch)
        return Progress(batch.generation, [], [batch])

    def _forget(self, batch: MicroBatch) -> None:
        """Read what the group committed for the batch's partitions before going on."""
        for p in batch.offsets:
            self.recovered.pop(p, None)

    # -- a new generation ----------------------------------------------------------------------

    async def _by_time(
        self, partitions: list[int], offsets: Mapping[int, int | None],
        held: Mapping[int, tuple[int, int]],
    ) -> dict[int, int | None]:  # fmt: skip
        """For a reset by time: the first offset at or after it, for each partition whose
        committed offset is missing or out of range."""
        at, source = reset_time(self.reset, int(time.time() * 1000)), self.source
        if at is None or not isinstance(source, Timed):
            return {}
        need = [p for p in partitions
                if (o := offsets.get(p)) is None or not held[p][0] <= o <= held[p][1]]  # fmt: skip
        if not need:
            return {}
        return dict(await self.blocking(lambda: source.offsets_for_time(self.topic, need, at)))

    async def _recover(self, generation: int, partitions: list[int], losses: int) -> bool:
        """Finish what the committed metadata of `partitions` names, then set their
        positions; False (positions unset) if a write was lost or a commit of it was not
        accepted."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        committed = await self.member.committed(tps)
        offsets = {tp.partition: (r.offset if r else None) for tp, r in committed.items()}
        metadata = {tp.partition: (r.metadata if r else None) for tp, r in committed.items()}
        sink = self.sink
        if isinstance(sink, IdempotentSink):
            planned: dict[str, MicroBatch] = {}
            waiting: dict[str, list[int]] = {}
            """Per planned batch, the partitions whose end is not committed: only those
            are committed once it is written (another partition of the batch may have
            been read on past it by its owner since)."""
            for p in partitions:
                record = decode(metadata.get(p))
                if record is None or record.kind != "plan" or p not in record.batch.offsets:
                    continue
                if offsets[p] == record.batch.offsets[p][0]:  # planned, end not committed
                    planned[record.batch.id] = record.batch
                    waiting.setdefault(record.batch.id, []).append(p)
            for batch in sorted(planned.values(), key=lambda b: (b.generation, b.lane)):
                mine = waiting[batch.id]
                log.info("%s: generation %d: writing planned batch %s again (%s's)",
                         self.name, generation, batch.id, batch.member)  # fmt: skip
                if not await self._replay(sink, batch, mine, losses):
                    return False
                done = batch.encode("done")
                ends = {p: OffsetAndMetadata(batch.offsets[p][1], done) for p in mine}
                if await self._commit(batch, ends, generation=generation) != "accepted":
                    return False
                offsets.update((p, batch.offsets[p][1]) for p in mine)
        else:
            staged: StagedSink = sink

            def roll_forward() -> None:
                for p in partitions:
                    staged.recover(self.topic, p, metadata.get(p), self.name)

            await self.blocking(roll_forward)
        held = await self.blocking(lambda: self.source.offsets(self.topic, partitions))
        found = await self._by_time(partitions, offsets, held)
        positions = {}
        for p in partitions:
            earliest, end = held[p]
            positions[p] = start_offset(
                offsets.get(p), earliest, end, self.reset, where=f"{self.topic}-{p}",
                found=found.get(p),
            )  # fmt: skip
        self.positions.update(positions)
        self.recovered.update(dict.fromkeys(positions, generation))
        log.info("%s: generation %d: reading %s from %s", self.name, generation,
                 self.topic, positions)  # fmt: skip
        return True
