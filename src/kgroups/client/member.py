"""`GroupMember`: a Kafka consumer group member without the consumer.

It joins a group on the kgroups coordinator (or any Kafka broker), holds an assignment of
partitions, tells the application through a rebalance listener when partitions are
assigned, revoked or lost, and commits offsets fenced by its generation. It fetches no
records: what a "partition" means is the application's business.

The protocol is the Java consumer's (`AbstractCoordinator` / `ConsumerCoordinator`):
FindCoordinator, JoinGroup (retrying with the id MEMBER_ID_REQUIRED hands out), the leader
runs the assignor the coordinator chose, SyncGroup; eager rebalancing revokes everything
before rejoining, cooperative rebalancing (when every configured assignor supports it)
revokes only what moved, then rejoins once more (KIP-429); ILLEGAL_GENERATION resets the
generation, UNKNOWN_MEMBER_ID the member id too (KAFKA-13419); FENCED_INSTANCE_ID is fatal;
close sends LeaveGroup unless the member is static.

The member is a state machine (`states.MemberState`, one table of legal transitions) run
by three tasks, each guarded so that an unexpected error makes the member FAILED, with
its partitions reported lost and the error raised to the application:

* the *supervisor* runs join rounds (prepare, join, sync, complete) one after another and
  is the only caller of the rebalance listener, so callbacks never overlap;
* the *heartbeat* task heartbeats, on its own connection, whenever the member holds a
  generation: while stable, but also while a revocation callback runs and while a
  JoinGroup is parked, as Java keeps heartbeating through `onJoinPrepare`. Its answers
  are the member's proof that the coordinator still counts it in;
* the leader's *metadata* task rejoins when a subscribed topic's partition count moves.

Two deadlines, kept as timers so they fire whatever requests are stuck, make the member
give partitions up *before* the coordinator can hand them to anyone else:

* session: no proof of membership for a session timeout (less a margin), counted from
  when the last proving request was *sent*: the coordinator's own timer started later;
* rebalance: the coordinator is rebalancing and this member has not rejoined within the
  rebalance timeout (less a margin) of the last moment the group was known stable,
  because a revocation callback is still running. Java's max.poll.interval rule.

Either one cancels whatever the member was doing (a revocation callback gets
`CancelledError`) and reports everything it held as lost; the member keeps its member id
and rejoins as itself, so a static member that lost its place is fenced if another
process took its instance id, rather than fencing that live process in turn.

Commits may be pinned to the generation the work belongs to (`commit(..., generation=g)`):
a batch planned in generation g can only commit while g is still the member's generation,
checked on the member's loop and fenced again by the coordinator.

Kafka's consumer-coordinator metrics (`metrics.MemberMetrics`) are recorded where Java's
sensors record them, into the registry the application passes (`registry`, default
prometheus_client's), labelled by group.

Time comes only from the event loop (the metrics' timestamps aside: `wall_clock`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from prometheus_client import CollectorRegistry

from kgroups.client import assignors as known_assignors
from kgroups.client.assignors.spec import Assignor
from kgroups.client.errors import (
    CommitError,
    CommitFailedError,
    FencedInstanceError,
    MemberError,
    OffsetAndMetadata,
    RebalanceInProgressError,
    TopicPartition,
)
from kgroups.client.link import (
    COORDINATOR_MOVED,
    CoordinatorLink,
    CoordinatorUnavailable,
    parse_bootstrap,
)
from kgroups.client.listener import Callback, Partitions, RebalanceListener, invoke
from kgroups.client.metadata import subscription_metadata
from kgroups.client.metrics import MemberMetrics
from kgroups.client.offsets import (
    Offsets,
    commit_errors,
    commit_request,
    fetch_request,
    fetch_result,
)
from kgroups.client.requests import (
    heartbeat_request,
    join_request,
    lead,
    leave_request,
    sync_request,
)
from kgroups.client.states import HEARTBEATING, MemberState, check_transition
from kgroups.protocol.client import Connector
from kgroups.protocol.consumer import (
    Assignment,
    ConsumerProtocolError,
    decode_assignment,
    partitions_by_topic,
)
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import MEMBER, NO_GENERATION
from kgroups.protocol.responses import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kgroups.security.client import ClientSecurity
from kgroups.tasks import wait_set

log = logging.getLogger(__name__)

S = MemberState

__all__ = ["GroupMember", "MemberState", "Partitions", "RebalanceListener", "rebalance_protocol"]


class _Rejoin(Exception):
    """Internal: this join attempt is over; start another (after `backoff` if set)."""

    def __init__(self, reason: str, *, backoff: bool = False) -> None:
        super().__init__(reason)
        self.backoff = backoff


async def _stop(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait until each has stopped."""
    stopping = list(tasks)
    for task in stopping:
        task.cancel()
    for task in stopping:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def rebalance_protocol(names: Sequence[Assignor]) -> Literal["eager", "cooperative"]:
    """The highest protocol every configured assignor supports (Java's rule)."""
    if all("cooperative" in a.rebalance_protocols for a in names):
        return "cooperative"
    if all("eager" in a.rebalance_protocols for a in names):
        return "eager"
    raise ValueError("the configured assignors have no rebalance protocol in common")


class GroupMember:
    """One member of `group_id`, subscribed to `topics`. See the module docstring."""

    def __init__(
        self,
        bootstrap: str | list[str],
        group_id: str,
        topics: Iterable[str],
        *,
        assignors: Sequence[str | Assignor] = ("range", "cooperative-sticky"),
        instance_id: str | None = None,
        rack: str | None = None,
        session_timeout_ms: int = MEMBER.session_timeout_ms,
        rebalance_timeout_ms: int = MEMBER.rebalance_timeout_ms,
        heartbeat_interval_ms: int = MEMBER.heartbeat_interval_ms,
        retry_backoff_ms: int = MEMBER.retry_backoff_ms,
        request_timeout_ms: int = MEMBER.request_timeout_ms,
        metadata_max_age_ms: int = MEMBER.metadata_max_age_ms,
        replicas: int = 1,
        client_id: str = "kgroups",
        listener: RebalanceListener | None = None,
        connect: Connector | None = None,
        security: ClientSecurity | None = None,
        registry: CollectorRegistry | None = None,
        wall_clock: Callable[[], float] | None = None,
    ) -> None:
        """Kafka's consumer settings, with Kafka's defaults; `registry` receives the
        member's metrics (default: prometheus_client's REGISTRY) and `wall_clock` gives
        their timestamps (unix seconds, default `time.time`); `security` is the TLS and
        SASL to reach a secured coordinator with (Kafka's security.protocol, ssl.*, sasl.*)."""
        if not group_id:
            raise ValueError("group_id must not be empty")
        self.group_id = group_id
        self.topics = tuple(sorted(set(topics)))
        if not self.topics:
            raise ValueError("subscribe to at least one topic")
        self.assignors = [known_assignors.get(a) if isinstance(a, str) else a for a in assignors]
        if not self.assignors:
            raise ValueError("configure at least one assignor")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.protocol = rebalance_protocol(self.assignors)
        self.instance_id = instance_id or None
        self.rack = rack or None
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.margin = min(self.heartbeat_interval, session_timeout_ms / 2000)
        """How much earlier than the coordinator the member gives partitions up."""
        self.replicas = replicas
        self.listener = listener
        self._link = CoordinatorLink(
            parse_bootstrap(bootstrap), group_id, client_id, request_timeout_ms / 1000,
            connect=(security or ClientSecurity()).connector(connect),
            authenticate=(security or ClientSecurity()).authenticator(),
        )  # fmt: skip
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader = False
        self.state = S.UNJOINED
        self._owned: Partitions = frozenset()
        self._revoking: Partitions = frozenset()
        self._held_since: dict[TopicPartition, int] = {}
        """For each partition held (owned or being revoked), the generation since which
        this member has held it without a break: a cooperative rebalance that keeps a
        partition keeps its entry; a revocation, a loss or a reset ends it."""
        self._assigned_counts: dict[str, int] | None = None
        """The leader's partition counts behind the current assignment (Java's
        assignmentSnapshot): when the topics' counts move, the leader rejoins."""
        self._sticky_memory: tuple[dict[str, tuple[int, ...]], int] = ({}, NO_GENERATION)
        self._alive_since: float | None = None
        """When the last request that proved membership was sent (event-loop time)."""
        self._stable_since: float | None = None
        """When the last request that found the group not rebalancing was sent."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._rejoin_needed = asyncio.Event()
        self._rejoin_needed.set()
        self._urgent = asyncio.Event()
        self._changed = asyncio.Event()
        self._closing = False
        self._failing: MemberError | None = None
        """The fatal error, from the moment it happens."""
        self._fatal: MemberError | None = None
        """The fatal error, once what the member held has been reported lost."""
        self._last_heartbeat_error: tuple[ErrorCode, int] | None = None
        """Logged once per generation, not every heartbeat interval."""
        self._tasks: list[asyncio.Task[None]] = []
        self._round: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._stats = MemberMetrics.of(registry).member(
            group_id, lambda: (self.generation, len(self._owned)), wall_clock
        )

    # -- what the application sees ------------------------------------------------------

    @property
    def assignment(self) -> Partitions:
        """The partitions this member owns in its current generation."""
        return self._owned

    @property
    def revoking(self) -> Partitions:
        """Partitions whose revocation callback is still running."""
        return self._revoking

    @property
    def error(self) -> MemberError | None:
        """The fatal error, once the member has failed."""
        return self._fatal

    @property
    def proven_since(self) -> float | None:
        """When (on the event loop's clock) the last request was sent whose answer proved
        the coordinator still counted this member in its generation."""
        return self._alive_since

    async def start(self, timeout: float | None = None) -> None:
        """Start joining and wait until the member holds its first assignment."""
        if not self._tasks:
            for name, work in (
                ("member", self._run),
                ("heartbeat", self._heartbeat_loop),
                ("metadata", self._metadata_loop),
            ):
                task = asyncio.create_task(
                    self._guarded(work, name), name=f"kgroups-{name}-{self.group_id}"
                )
                self._tasks.append(task)
        await self.wait_stable(timeout=timeout)

    async def wait_stable(
        self, *, after_generation: int = NO_GENERATION, timeout: float | None = None
    ) -> int:
        """Wait until the member is stable in a generation newer than `after_generation`;
        return that generation. Raises the fatal error if the member failed."""
        async with asyncio.timeout(timeout):
            while not (
                self._fatal is not None
                or self._closing
                or (self.state is S.STABLE and self.generation > after_generation)
            ):
                await self._changed.wait()
        self._raise_if_failed()
        return self.generation

    async def wait_failed(self) -> MemberError:
        """Wait until the member fails; return the error."""
        while self._fatal is None:
            await self._changed.wait()
        return self._fatal

    async def __aenter__(self) -> GroupMember:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def request_rejoin(self, reason: str = "requested by the application") -> None:
        """Rebalance soon (e.g. after a subscription change)."""
        log.info("%s: rejoining: %s", self.group_id, reason)
        self._rejoin_needed.set()

    async def subscribe(self, topics: Iterable[str]) -> None:
        new = tuple(sorted(set(topics)))
        if not new:
            raise ValueError("subscribe to at least one topic")
        if new != self.topics:
            self.topics = new
            self.request_rejoin("subscription changed")

    async def commit(
        self,
        offsets: Offsets,
        *,
        generation: int | None = None,
        log_ends: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Commit offsets in this member's generation, or in `generation` if given.

        `log_ends` says where the partitions' source logs end, for a member that reads
        them: the coordinator then answers ListOffsets with the true end, and Kafka's
        tools show the group's true lag (a Kafka broker ignores it).

        Pin a batch's commit to the generation the batch was planned in: if the member
        has moved to another generation since, the commit is refused with
        `CommitFailedError` and nothing is sent, unless the member has held every
        partition of it throughout (cooperative rebalances that kept them, or a
        revocation still in progress): then it is committed in the current generation.
        A partition lost, or revoked and assigned back, breaks the chain.
        Raises `CommitFailedError` when the group has moved on without this member,
        `RebalanceInProgressError` while a JoinGroup or SyncGroup is in flight (commit
        again once it completes), `CoordinatorUnavailable` when it cannot be reached."""
        self._raise_if_failed()
        try:
            await self._commit(offsets, generation, log_ends)
        except (MemberError, CoordinatorUnavailable):
            self._stats.commit_failed()
            raise

    async def _commit(
        self,
        offsets: Offsets,
        generation: int | None,
        log_ends: Mapping[TopicPartition, int] | None,
    ) -> None:
        current, member_id, state = self.generation, self.member_id, self.state
        if (
            generation is not None
            and generation != current
            and not self._held_throughout(offsets, generation, current)
        ):
            raise CommitFailedError(
                f"cannot commit work of generation {generation}: the member is in "
                f"generation {current}; its partitions may belong to another member now",
                ErrorCode.illegal_generation,
            )
        if state in (S.JOINING, S.SYNCING):
            raise RebalanceInProgressError(
                "a rebalance is in progress; commit again once it completes",
                ErrorCode.rebalance_in_progress,
            )
        if state not in (S.STABLE, S.PREPARING) or current < 0:
            raise CommitFailedError(f"cannot commit: the member is {state} and holds no generation")
        body = commit_request(
            self.group_id, current, member_id, self.instance_id, offsets, log_ends
        )
        loop = asyncio.get_running_loop()
        sent = loop.time()
        response = await self._link.request(body, OffsetCommitResponse)
        self._stats.committed(loop.time() - sent)
        failed = commit_errors(response)
        if failed:
            self._commit_failed(failed, current, member_id)

    def _held_throughout(self, offsets: Offsets, generation: int, current: int) -> bool:
        """Whether this member has held every partition of `offsets` without a break from
        `generation` to `current` (cooperative rebalances that kept them): nobody else can
        have worked on them since, so the work of `generation` may be committed now."""
        if not 0 <= generation < current:
            return False
        held = self._held_since
        return all(held.get(TopicPartition(*tp), current) <= generation for tp in offsets)

    def _commit_failed(
        self, failed: dict[TopicPartition, ErrorCode], generation: int, member_id: str
    ) -> None:
        codes = set(failed.values())
        unchanged = (generation, member_id) == (self.generation, self.member_id)
        if ErrorCode.fenced_instance_id in codes:
            error = FencedInstanceError(
                f"commit: instance id {self.instance_id!r} was fenced by another member",
                ErrorCode.fenced_instance_id,
            )
            self._fail(error)
            raise error
        for code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            if code in codes:
                if unchanged:
                    self._lose(
                        f"commit answered {code.name}",
                        forget_member_id=code is ErrorCode.unknown_member_id,
                    )
                raise CommitFailedError(
                    f"commit rejected ({code.name}): generation {generation} of member "
                    f"{member_id} is stale; the group rebalanced and these partitions may "
                    "belong to another member",
                    code,
                )
        if ErrorCode.rebalance_in_progress in codes:
            self.request_rejoin("commit answered REBALANCE_IN_PROGRESS")
            raise RebalanceInProgressError(
                "commit rejected: a rebalance is in progress; commit again once it completes",
                ErrorCode.rebalance_in_progress,
            )
        if codes & COORDINATOR_MOVED:
            raise CoordinatorUnavailable(f"commit: {sorted(c.name for c in codes)}")
        raise CommitError(f"commit failed: {sorted(c.name for c in codes)}", failed)

    async def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets for `partitions` (None where nothing is committed)."""
        self._raise_if_failed()
        wanted = [TopicPartition(*tp) for tp in partitions]
        response = await self._link.request(
            fetch_request(self.group_id, wanted), OffsetFetchResponse
        )
        return fetch_result(response, wanted)

    async def close(self, *, leave: bool | None = None) -> None:
        """Give up the assignment and stop. `leave=None` sends LeaveGroup for dynamic
        members only (static members are expected back, Java's default).

        The revocation callback runs while the member still heartbeats (a slow one costs
        nobody their membership), bounded like any revocation: if the member's deadline
        passes first, the callback is cancelled and the partitions are reported lost.
        Closing is done once: a second call waits for the first (and a caller that is
        cancelled stops waiting, not closing)."""
        if self._closed is None:
            self._closed = asyncio.ensure_future(self._close(leave))
        await asyncio.shield(self._closed)

    async def _close(self, leave: bool | None) -> None:
        if self.state is S.CLOSED:
            return
        self._closing = True
        self._notify()
        if self._round is not None:
            self._round.cancel()
        await _stop(t for t in self._tasks if not t.get_name().startswith("kgroups-heartbeat"))
        held = self._owned | self._revoking
        valid = self.generation != NO_GENERATION and bool(self.member_id)
        valid = valid and self._failing is None
        if held and valid:
            self._owned, self._revoking = frozenset(), held
            # Run as the round, so that a loss (a deadline, a fencing answer) interrupts it.
            self._round = asyncio.create_task(self._invoke("on_partitions_revoked", held))
            try:
                await self._round
                held = frozenset()
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    raise
            except MemberError:
                log.exception("%s: on_partitions_revoked failed while closing", self.group_id)
            finally:
                self._round = None
        self._owned = self._revoking = frozenset()
        self._held_since = {}
        self._cancel_timers()
        await _stop(self._tasks)
        if held:
            await self._call_quietly("on_partitions_lost", held)
        if leave is None:
            leave = self.instance_id is None
        if leave and self.member_id and self._failing is None:
            body = leave_request(self.group_id, self.member_id, self.instance_id, "closing")
            with contextlib.suppress(CoordinatorUnavailable):
                await self._link.request(body, LeaveGroupResponse, timeout=5)
        await self._link.close()
        self._fatal = self._failing
        self._stats.close()
        self._transition(S.CLOSED)

    # -- the tasks --------------------------------------------------------------------------

    async def _guarded(self, work: Callable[[], Awaitable[None]], name: str) -> None:
        """Run one of the member's tasks; an unexpected error fails the member loudly."""
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s: the member's %s task failed", self.group_id, name)
            self._fail(MemberError(f"the member's {name} task failed: {exc!r}"))
            if name != "member":
                return
            await self._report_failure()

    async def _run(self) -> None:
        """The supervisor: join rounds, one at a time, until closed or failed."""
        while True:
            await self._rejoin_needed.wait()
            if self._failing is not None:
                await self._report_failure()
                return
            if self._closing:
                return
            self._urgent.clear()
            self._round = round_ = asyncio.create_task(
                self._join_round(), name=f"kgroups-join-{self.group_id}"
            )
            try:
                await round_
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                continue  # interrupted by a loss or a failure: the next turn deals with it
            except _Rejoin as again:
                log.info("%s: rejoining: %s", self.group_id, again)
                self._rejoin_needed.set()
                if again.backoff:
                    await self._pause(self.backoff)
            except CoordinatorUnavailable as exc:
                log.info("%s: coordinator unavailable (%s); retrying", self.group_id, exc)
                self._rejoin_needed.set()
                await self._pause(self.backoff)
            except MemberError as exc:
                self._fail(exc)
            finally:
                self._round = None

    async def _pause(self, seconds: float) -> None:
        """Back off, unless a loss or failure needs handling first."""
        await wait_set(self._urgent, seconds)

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if self.state not in HEARTBEATING or self.generation < 0 or not self.member_id:
                continue
            generation, member_id = self.generation, self.member_id
            body = heartbeat_request(self.group_id, generation, member_id, self.instance_id)
            sent = loop.time()
            self._stats.heartbeat_sent()
            try:
                response = await self._link.heartbeat(
                    body, HeartbeatResponse, timeout=max(self.heartbeat_interval, 1.0)
                )
            except CoordinatorUnavailable as exc:
                log.debug("%s: heartbeat failed: %s", self.group_id, exc)
                continue
            self._stats.heartbeat_answered(loop.time() - sent)
            if (generation, member_id) != (self.generation, self.member_id):
                # Java's generationUnchanged(): the member moved on while this answer was
                # in flight; acting on it would reset the new generation.
                continue
            if self._on_heartbeat(response.error_code, generation, sent):
                await self._link.reset()

    def _on_heartbeat(self, code: ErrorCode, generation: int, sent: float) -> bool:
        """React to a heartbeat answer; True when the coordinator must be found again."""
        state = self.state
        if code is not ErrorCode.none and (code, generation) != self._last_heartbeat_error:
            log.info("%s: heartbeat of generation %d (%s): %s", self.group_id, generation,
                     state, code.name)  # fmt: skip
        self._last_heartbeat_error = (code, generation)
        if code is ErrorCode.none:
            self._proven(sent, stable=True)
        elif code is ErrorCode.rebalance_in_progress:
            self._proven(sent, stable=False)
            if state in (S.STABLE, S.PREPARING):
                self._arm_rebalance_deadline()
            if state is S.STABLE:  # while preparing, the round under way is the rejoin
                self._rejoin_needed.set()
        elif code is ErrorCode.illegal_generation:
            if state is not S.JOINING:  # while joining, the JoinGroup answer is on its way
                self._lose("heartbeat answered ILLEGAL_GENERATION")
        elif code is ErrorCode.unknown_member_id:
            self._lose("heartbeat answered UNKNOWN_MEMBER_ID", forget_member_id=True)
        elif code is ErrorCode.fenced_instance_id:
            self._fail(FencedInstanceError(
                f"heartbeat: group.instance.id {self.instance_id!r} was fenced by another member",
                code,
            ))  # fmt: skip
        elif code in COORDINATOR_MOVED:
            return True
        else:
            log.warning("%s: heartbeat answered %s", self.group_id, code.name)
        return False

    async def _metadata_loop(self) -> None:
        """Leader only: rejoin when a subscribed topic's partition count moved since the
        assignment (Java's metadata snapshot check), so new partitions get an owner."""
        while True:
            await asyncio.sleep(self.metadata_max_age)
            snapshot = self._assigned_counts
            if self.state is not S.STABLE or not self.leader or snapshot is None:
                continue
            try:
                counts, _ = await self._link.partitions(sorted(snapshot))
            except CoordinatorUnavailable:
                continue
            if counts != snapshot and snapshot is self._assigned_counts:
                self.request_rejoin(f"partition counts changed: {snapshot} -> {counts}")

    # -- one join round -----------------------------------------------------------------------

    async def _join_round(self) -> None:
        self._rejoin_needed.clear()
        self._transition(S.PREPARING)
        await self._prepare()
        self._transition(S.JOINING)
        try:
            assignment = await self._rebalance()
        except (Exception, asyncio.CancelledError):
            if not self._closing:  # a failed attempt; the rebalance goes on with the next
                self._stats.rebalance_failed()
            raise
        self._stats.rebalance_completed(asyncio.get_running_loop().time())
        await self._complete(assignment)

    async def _rebalance(self) -> Assignment:
        """JoinGroup, the leader's assignment, SyncGroup: this member's new assignment."""
        response, sent = await self._join()
        self.generation = response.generation_id
        self.member_id = response.member_id
        self.protocol_name = response.protocol_name
        self.leader = response.leader == response.member_id
        self._proven(sent, stable=True)
        self._transition(S.SYNCING)
        assignments: list[dict[str, Any]] = []
        if self.leader and not response.skip_assignment:
            assignments, self._assigned_counts = await lead(
                self._link, self.assignors, response, self.replicas
            )
        body = sync_request(self.group_id, self.generation, self.member_id, self.instance_id,
                            self.protocol_name, assignments)  # fmt: skip
        loop = asyncio.get_running_loop()
        sent = loop.time()
        sync = await self._link.request(
            body, SyncGroupResponse, timeout=self.rebalance_timeout_ms / 1000 + 5
        )
        self._check_group_response("sync", sync.error_code)
        self._stats.synced(loop.time() - sent)
        try:
            assignment = decode_assignment(sync.assignment)
        except ConsumerProtocolError as exc:
            raise _Rejoin(f"unreadable assignment from the leader: {exc}", backoff=True) from exc
        self._proven(sent, stable=True)
        return assignment

    async def _prepare(self) -> None:
        """Java's onJoinPrepare: lose everything after a reset, else revoke per protocol."""
        if self.generation == NO_GENERATION or not self.member_id:
            lost = self._owned | self._revoking
            self._owned = self._revoking = frozenset()
            self._rearm_session_deadline()
            if lost:
                await self._invoke("on_partitions_lost", lost)
        elif self.protocol == "eager":
            await self._revoke(self._owned)
        else:
            await self._revoke(frozenset(tp for tp in self._owned if tp.topic not in self.topics))

    async def _revoke(self, partitions: Partitions) -> None:
        """Revoke `partitions`; they count as held until the callback returns (if it is
        interrupted they stay held, and the next round reports them lost)."""
        if not partitions:
            return
        self._owned -= partitions
        self._revoking |= partitions
        await self._invoke("on_partitions_revoked", partitions)
        self._revoking -= partitions
        for tp in partitions:
            self._held_since.pop(tp, None)
        self._rearm_session_deadline()

    async def _join(self) -> tuple[JoinGroupResponse, float]:
        loop = asyncio.get_running_loop()
        while True:
            protocols = [(a.name, self._metadata(a)) for a in self.assignors]
            body = join_request(self.group_id, self.member_id, self.instance_id,
                                self.session_timeout_ms, self.rebalance_timeout_ms, protocols,
                                None)  # fmt: skip
            # Once our JoinGroup is parked the coordinator keeps us until the join phase
            # ends, so the revocation deadline no longer applies.
            self._cancel_timer("rebalance")
            sent = loop.time()
            self._stats.join_sent(sent)
            response = await self._link.request(
                body, JoinGroupResponse, timeout=self.rebalance_timeout_ms / 1000 + 5
            )
            if response.error_code is ErrorCode.member_id_required:
                self.member_id = response.member_id
                continue
            self._check_group_response("join", response.error_code)
            self._stats.joined(loop.time() - sent)
            return response, sent

    def _metadata(self, assignor: Assignor) -> bytes:
        return subscription_metadata(
            assignor.name,
            self.topics,
            owned=partitions_by_topic(self._owned),
            generation=self.generation,
            rack=self.rack,
            sticky_memory=self._sticky_memory,
        )

    def _check_group_response(self, what: str, code: ErrorCode) -> None:
        """Java's reactions to JoinGroup/SyncGroup errors."""
        if code is ErrorCode.none:
            return
        if code is ErrorCode.fenced_instance_id:
            raise FencedInstanceError(
                f"{what}: group.instance.id {self.instance_id!r} was fenced by another member",
                code,
            )
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self._lose(f"{what} answered {code.name}",
                       forget_member_id=code is ErrorCode.unknown_member_id)  # fmt: skip
            raise _Rejoin(f"{what}: {code.name}")
        if code is ErrorCode.rebalance_in_progress:
            raise _Rejoin(f"{what}: REBALANCE_IN_PROGRESS")
        if code in COORDINATOR_MOVED:
            raise CoordinatorUnavailable(f"{what}: {code.name}")
        if code is ErrorCode.unknown_server_error:
            raise _Rejoin(f"{what}: UNKNOWN_SERVER_ERROR", backoff=True)
        raise MemberError(f"{what} failed: {code.name}", code)

    async def _complete(self, assignment: Assignment) -> None:
        """Java's onJoinComplete: take the new assignment, revoke what moved (cooperative)."""
        new = frozenset(TopicPartition(t, p) for t, ps in assignment.partitions.items() for p in ps)
        self._sticky_memory = (
            {t: tuple(ps) for t, ps in assignment.partitions.items()},
            self.generation,
        )
        unsubscribed = {tp.topic for tp in new} - set(self.topics)
        revoked = self._owned - new
        added = new - self._owned
        before, generation = self._held_since, self.generation
        self._held_since = {tp: before.get(tp, generation) if tp in self._owned else generation
                            for tp in new | revoked}  # fmt: skip
        self._owned = new | revoked
        self._transition(S.STABLE)
        self._rearm_session_deadline()
        await self._revoke(revoked)
        await self._invoke("on_partitions_assigned", added)
        if revoked and self.protocol == "cooperative":
            self.request_rejoin(f"revoked {len(revoked)} partitions for the follow-up rebalance")
        if unsubscribed:
            self.request_rejoin(f"assigned topics not subscribed: {sorted(unsubscribed)}")

    # -- deadlines ------------------------------------------------------------------------------

    def _proven(self, sent: float, *, stable: bool) -> None:
        """An answer to a request sent at `sent` proved the coordinator counts us in (and,
        if `stable`, that the group was not rebalancing then): move the deadlines."""
        if self._alive_since is None or sent > self._alive_since:
            self._alive_since = sent
        if stable and (self._stable_since is None or sent > self._stable_since):
            self._stable_since = sent
        self._rearm_session_deadline()

    def _rearm_session_deadline(self) -> None:
        """Deadlines guard what the member holds; holding nothing, it has nothing to lose
        (a JoinGroup may then park as long as the coordinator likes)."""
        if not (self._owned or self._revoking) or self._alive_since is None:
            self._cancel_timer("session")
            return
        when = self._alive_since + self.session_timeout_ms / 1000 - self.margin
        self._arm("session", when, "no proof of membership for a session timeout")

    def _arm_rebalance_deadline(self) -> None:
        if "rebalance" in self._timers or self._stable_since is None:
            return
        when = self._stable_since + self.rebalance_timeout_ms / 1000 - self.margin
        self._arm("rebalance", when, "not rejoined within the rebalance timeout")

    def _arm(self, key: str, when: float, reason: str) -> None:
        self._cancel_timer(key)

        def fire() -> None:
            self._timers.pop(key, None)
            if self._owned or self._revoking:
                self._lose(reason)

        self._timers[key] = asyncio.get_running_loop().call_at(when, fire)

    def _cancel_timer(self, key: str) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _cancel_timers(self) -> None:
        for key in list(self._timers):
            self._cancel_timer(key)

    # -- losing, failing, state ---------------------------------------------------------------

    def _lose(self, reason: str, *, forget_member_id: bool = False) -> None:
        """The generation is gone: stop what the round is doing, report what was held as
        lost (the next round does, before anything else; `close` does while closing)
        and rejoin."""
        if self._failing is not None:
            return
        held = self._owned | self._revoking
        log.warning("%s: %s: %s", self.group_id, reason,
                    f"partitions lost: {sorted(held)}" if held else "rejoining")  # fmt: skip
        self._reset(member_id=forget_member_id)
        if self.state is not S.UNJOINED:
            self._transition(S.UNJOINED)
        self._interrupt_round()
        self._rejoin_needed.set()

    def _fail(self, error: MemberError) -> None:
        """A fatal error: the supervisor reports what was held as lost and stops."""
        if self._failing is not None or self._closing:
            return
        log.error("%s: %s", self.group_id, error)
        self._failing = error
        self._cancel_timers()
        self._transition(S.FAILED)
        self._interrupt_round()
        self._rejoin_needed.set()

    async def _report_failure(self) -> None:
        held, self._owned, self._revoking = self._owned | self._revoking, frozenset(), frozenset()
        self._reset(member_id=True)
        if held:
            await self._call_quietly("on_partitions_lost", held)
        self._fatal = self._failing
        self._notify()

    async def _call_quietly(self, name: Callback, partitions: Partitions) -> None:
        """A callback whose failure has nowhere left to go but the log."""
        try:
            await self._invoke(name, partitions)
        except MemberError:
            log.exception("%s: %s failed", self.group_id, name)

    async def _invoke(self, name: Callback, partitions: Partitions) -> None:
        """Call the application's listener (`listener.invoke`), timing the callback."""
        if getattr(self.listener, name, None) is None:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await invoke(self.listener, name, partitions)
        finally:
            self._stats.callback(name, loop.time() - started)

    def _interrupt_round(self) -> None:
        self._urgent.set()
        round_ = self._round
        if round_ is not None and round_ is not asyncio.current_task() and not round_.done():
            round_.cancel()

    def _reset(self, *, member_id: bool) -> None:
        self.generation = NO_GENERATION
        self._held_since = {}
        self._sticky_memory = ({}, NO_GENERATION)
        self._alive_since = self._stable_since = None
        self._cancel_timers()
        if member_id:
            self.member_id = ""

    def _transition(self, target: MemberState) -> None:
        check_transition(self.state, target)
        self.state = target
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _raise_if_failed(self) -> None:
        if self._failing is not None:
            raise self._failing
        if self._closing:
            raise MemberError("the member is closed")
