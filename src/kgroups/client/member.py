"""`GroupMember`: a Kafka consumer group member without the consumer.

It joins a group on the kgroups coordinator (or any Kafka broker), holds an assignment of
partitions, tells the application through a rebalance listener when partitions are
assigned, revoked or lost, and commits offsets fenced by its generation. It fetches no
records: what a "partition" means is the application's business.

The protocol is the Java consumer's (`AbstractCoordinator` / `ConsumerCoordinator`):

* join: FindCoordinator, JoinGroup (retrying with the id MEMBER_ID_REQUIRED hands out),
  the leader runs the assignor the coordinator chose, SyncGroup;
* eager rebalancing revokes everything before rejoining; cooperative rebalancing (when
  every configured assignor supports it) revokes only what moved after the assignment
  arrives, then rejoins once more so the revoked partitions can be handed on (KIP-429);
* before a join with a reset generation or member id, everything owned is *lost*
  (`on_lost`), not revoked: someone else may already own it;
* heartbeats run in their own task while the member is stable. REBALANCE_IN_PROGRESS
  rejoins, ILLEGAL_GENERATION resets only the generation, UNKNOWN_MEMBER_ID and
  FENCED_INSTANCE_ID reset the member id too (KAFKA-13419); FENCED_INSTANCE_ID is fatal,
  as in Java: rejoining would fence the other process in turn;
* a member that cannot heartbeat successfully for a session timeout (less one interval)
  declares its partitions lost on its own: by then the coordinator may have expired it
  and given them away, and the application must stop;
* close revokes (or loses) everything and sends LeaveGroup, except for static members,
  whose point is to come back without a rebalance (Java does the same).

Time comes only from the event loop. Listener callbacks may be plain functions or
coroutines; the member waits for them, so a revocation callback that returns has really
stopped work on those partitions before anything is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Literal, Protocol

from kio.schema.heartbeat.v4 import request as hb
from kio.schema.join_group.v9 import request as jg
from kio.schema.leave_group.v5 import request as lg
from kio.schema.sync_group.v5 import request as sg

from kgroups.client import assignors as registry
from kgroups.client.assignors.spec import Assignor, GroupSpec
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
from kgroups.client.metadata import member_spec, subscription_metadata
from kgroups.client.offsets import (
    Offsets,
    commit_errors,
    commit_request,
    fetch_request,
    fetch_result,
)
from kgroups.protocol.build import build
from kgroups.protocol.consumer import (
    PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    decode_assignment,
    encode_assignment,
    partitions_by_topic,
)
from kgroups.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

NO_GENERATION = -1
State = Literal["unjoined", "joining", "stable", "closed", "failed"]
Partitions = frozenset[TopicPartition]


class RebalanceListener(Protocol):
    """Java's ConsumerRebalanceListener. Methods may be async; all are optional."""

    def on_partitions_revoked(self, partitions: Partitions) -> Any: ...
    def on_partitions_assigned(self, partitions: Partitions) -> Any: ...
    def on_partitions_lost(self, partitions: Partitions) -> Any: ...


class _Rejoin(Exception):
    """Internal: this join attempt is over; start another (after `backoff` if set)."""

    def __init__(self, reason: str, *, backoff: bool = False) -> None:
        super().__init__(reason)
        self.backoff = backoff


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
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        metadata_max_age_ms: int = 300_000,
        replicas: int = 1,
        client_id: str = "kgroups",
        listener: RebalanceListener | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must not be empty")
        self.group_id = group_id
        self.topics = tuple(sorted(set(topics)))
        if not self.topics:
            raise ValueError("subscribe to at least one topic")
        self.assignors = [registry.get(a) if isinstance(a, str) else a for a in assignors]
        if not self.assignors:
            raise ValueError("configure at least one assignor")
        self.protocol = rebalance_protocol(self.assignors)
        self.instance_id = instance_id or None
        self.rack = rack or None
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self.metadata_max_age = metadata_max_age_ms / 1000
        self._assigned_counts: dict[str, int] | None = None
        """The leader's partition counts behind the current assignment (Java's
        assignmentSnapshot): when the topics' counts move, the leader rejoins."""
        self.replicas = replicas
        self.listener = listener
        self._link = CoordinatorLink(
            parse_bootstrap(bootstrap), group_id, client_id, request_timeout_ms / 1000
        )
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader = False
        self.state: State = "unjoined"
        self._owned: Partitions = frozenset()
        self._sticky_memory: tuple[dict[str, tuple[int, ...]], int] = ({}, NO_GENERATION)
        self._rejoin_needed = asyncio.Event()
        self._rejoin_needed.set()
        self._changed = asyncio.Condition()
        self._closing = False
        self._fatal: MemberError | None = None
        self._run_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._last_heartbeat_ok: float | None = None

    # -- what the application sees ------------------------------------------------------

    @property
    def assignment(self) -> Partitions:
        """The partitions this member owns now."""
        return self._owned

    async def start(self, timeout: float | None = None) -> None:
        """Start joining and wait until the member holds its first assignment."""
        if self._run_task is None:
            self._run_task = asyncio.create_task(
                self._run(), name=f"kgroups-member-{self.group_id}"
            )
        await self.wait_stable(timeout=timeout)

    async def wait_stable(
        self, *, after_generation: int = NO_GENERATION, timeout: float | None = None
    ) -> int:
        """Wait until the member is stable in a generation newer than `after_generation`;
        return that generation. Raises the fatal error if the member failed."""

        def ready() -> bool:
            return (
                self._fatal is not None
                or self._closing
                or (self.state == "stable" and self.generation > after_generation)
            )

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(ready), timeout)
        if self._fatal is not None:
            raise self._fatal
        if self._closing:
            raise MemberError("the member is closed")
        return self.generation

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

    async def commit(self, offsets: Offsets) -> None:
        """Commit offsets for this generation. Raises `CommitFailedError` when the group
        has moved on without this member (stale generation), `RebalanceInProgressError`
        during a rebalance, `CoordinatorUnavailable` when it cannot be reached (retry)."""
        self._raise_if_failed()
        if self.state != "stable" or self.generation < 0:
            if self.state == "joining":
                raise RebalanceInProgressError(
                    "a rebalance is in progress; commit again once it completes",
                    ErrorCode.rebalance_in_progress,
                )
            raise CommitFailedError(
                f"cannot commit: the member is {self.state} and holds no generation"
            )
        generation, member_id = self.generation, self.member_id
        body = commit_request(self.group_id, generation, member_id, self.instance_id, offsets)
        failed = commit_errors(await self._link.request(body))
        if not failed:
            return
        codes = set(failed.values())
        if ErrorCode.fenced_instance_id in codes:
            error = FencedInstanceError(
                f"commit: instance id {self.instance_id!r} was fenced by another member",
                ErrorCode.fenced_instance_id,
            )
            await self._fail(error)
            raise error
        if ErrorCode.unknown_member_id in codes or ErrorCode.illegal_generation in codes:
            code = (
                ErrorCode.unknown_member_id
                if ErrorCode.unknown_member_id in codes
                else ErrorCode.illegal_generation
            )
            if generation == self.generation and member_id == self.member_id:
                self._reset(member_id=code is ErrorCode.unknown_member_id)
                self.request_rejoin(f"commit answered {code.name}")
            raise CommitFailedError(
                f"commit rejected ({code.name}): generation {generation} of member {member_id} is "
                "stale; the group rebalanced and these partitions may belong to another member",
                code,
            )
        if ErrorCode.rebalance_in_progress in codes:
            self.request_rejoin("commit answered REBALANCE_IN_PROGRESS")
            raise RebalanceInProgressError(
                "commit rejected: a rebalance is in progress; commit again once it completes",
                ErrorCode.rebalance_in_progress,
            )
        if codes & COORDINATOR_MOVED:
            await self._link.reset()
            raise CoordinatorUnavailable(f"commit: {sorted(c.name for c in codes)}")
        raise CommitError(f"commit failed: {sorted(c.name for c in codes)}", failed)

    async def committed(
        self, partitions: Iterable[TopicPartition | tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets for `partitions` (None where nothing is committed)."""
        self._raise_if_failed()
        wanted = [TopicPartition(*tp) for tp in partitions]
        response = await self._link.request(fetch_request(self.group_id, wanted))
        try:
            return fetch_result(response, wanted)
        except CoordinatorUnavailable:
            await self._link.reset()
            raise

    async def close(self, *, leave: bool | None = None) -> None:
        """Give up the assignment and stop. `leave=None` sends LeaveGroup for dynamic
        members only (static members are expected back, Java's default)."""
        if self.state == "closed":
            return
        self._closing = True
        self._rejoin_needed.set()
        for task in (self._heartbeat_task, self._run_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._owned:
            if self.generation == NO_GENERATION or not self.member_id:
                await self._call("on_partitions_lost", self._owned)
            else:
                await self._call("on_partitions_revoked", self._owned)
            self._owned = frozenset()
        if leave is None:
            leave = self.instance_id is None
        if leave and self.member_id and self._fatal is None:
            body = build(
                lg.LeaveGroupRequest,
                {
                    "group_id": self.group_id,
                    "members": [
                        {
                            "member_id": self.member_id,
                            "group_instance_id": self.instance_id,
                            "reason": "the member is closing",
                        }
                    ],
                },
            )
            with contextlib.suppress(CoordinatorUnavailable, asyncio.TimeoutError, ConnectionError):
                await self._link.request(body, timeout=5)
        await self._link.close()
        await self._set_state("closed")

    # -- the rebalance loop -------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                await self._rejoin_needed.wait()
                if self._closing:
                    return
                try:
                    await self._join_round()
                except _Rejoin as again:
                    log.info("%s: rejoining: %s", self.group_id, again)
                    self._rejoin_needed.set()
                    if again.backoff:
                        await asyncio.sleep(self.backoff)
                except CoordinatorUnavailable as exc:
                    log.info("%s: coordinator unavailable (%s); retrying", self.group_id, exc)
                    self._rejoin_needed.set()
                    await asyncio.sleep(self.backoff)
        except MemberError as exc:
            await self._fail(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or a broken peer: fail loudly, not silently stall
            log.exception("%s: member failed", self.group_id)
            await self._fail(MemberError(f"member failed: {exc!r}"))

    async def _join_round(self) -> None:
        self._rejoin_needed.clear()
        await self._stop_heartbeats()
        await self._prepare_join()
        await self._set_state("joining")
        response = await self._join()
        self.generation = response.generation_id
        self.member_id = response.member_id
        self.protocol_name = response.protocol_name
        self.leader = response.leader == response.member_id
        assignments: list[dict[str, Any]] = []
        if self.leader and not response.skip_assignment:
            assignments = await self._lead(response)
        body = build(
            sg.SyncGroupRequest,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": self.protocol_name,
                "assignments": assignments,
            },
        )
        sync = await self._link.request(body, timeout=self.rebalance_timeout_ms / 1000 + 5)
        self._check_group_response("sync", sync.error_code)
        try:
            assignment = decode_assignment(sync.assignment)
        except ConsumerProtocolError as exc:
            raise _Rejoin(f"unreadable assignment from the leader: {exc}", backoff=True) from exc
        await self._complete_join(assignment)

    async def _prepare_join(self) -> None:
        """Java's onJoinPrepare: lose everything after a reset, else revoke per protocol."""
        if not self._owned:
            return
        if self.generation == NO_GENERATION or not self.member_id:
            lost, self._owned = self._owned, frozenset()
            await self._call("on_partitions_lost", lost)
        elif self.protocol == "eager":
            revoked, self._owned = self._owned, frozenset()
            await self._call("on_partitions_revoked", revoked)
        else:
            gone = frozenset(tp for tp in self._owned if tp.topic not in self.topics)
            if gone:
                self._owned = self._owned - gone
                await self._call("on_partitions_revoked", gone)

    def _metadata(self, assignor: Assignor) -> bytes:
        owned = partitions_by_topic(self._owned)
        return subscription_metadata(
            assignor.name,
            self.topics,
            owned=owned,
            generation=self.generation,
            rack=self.rack,
            sticky_memory=self._sticky_memory,
        )

    async def _join(self) -> Any:
        while True:
            body = build(
                jg.JoinGroupRequest,
                {
                    "group_id": self.group_id,
                    "session_timeout": timedelta(milliseconds=self.session_timeout_ms),
                    "rebalance_timeout": timedelta(milliseconds=self.rebalance_timeout_ms),
                    "member_id": self.member_id,
                    "group_instance_id": self.instance_id,
                    "protocol_type": PROTOCOL_TYPE,
                    "protocols": [
                        {"name": a.name, "metadata": self._metadata(a)} for a in self.assignors
                    ],
                    "reason": None,
                },
            )
            response = await self._link.request(body, timeout=self.rebalance_timeout_ms / 1000 + 5)
            if response.error_code is ErrorCode.member_id_required:
                self.member_id = response.member_id
                continue
            self._check_group_response("join", response.error_code)
            return response

    def _check_group_response(self, what: str, code: ErrorCode) -> None:
        """Java's reactions to JoinGroup/SyncGroup errors."""
        if code is ErrorCode.none:
            return
        if code is ErrorCode.fenced_instance_id:
            raise FencedInstanceError(
                f"{what}: group.instance.id {self.instance_id!r} was fenced by another member",
                code,
            )
        if code is ErrorCode.unknown_member_id:
            self._reset(member_id=True)
            raise _Rejoin(f"{what}: UNKNOWN_MEMBER_ID")
        if code is ErrorCode.illegal_generation:
            self._reset(member_id=False)
            raise _Rejoin(f"{what}: ILLEGAL_GENERATION")
        if code is ErrorCode.rebalance_in_progress:
            raise _Rejoin(f"{what}: REBALANCE_IN_PROGRESS")
        if code in COORDINATOR_MOVED:
            raise CoordinatorUnavailable(f"{what}: {code.name}")
        if code is ErrorCode.unknown_server_error:
            raise _Rejoin(f"{what}: UNKNOWN_SERVER_ERROR", backoff=True)
        raise MemberError(f"{what} failed: {code.name}", code)

    async def _lead(self, response: Any) -> list[dict[str, Any]]:
        """The leader's job: run the chosen assignor over every member's subscription."""
        name = response.protocol_name
        assignor = next((a for a in self.assignors if a.name == name), None)
        if assignor is None:
            raise MemberError(f"the coordinator chose assignor {name!r}, which is not configured")
        specs = {
            m.member_id: member_spec(name, m.member_id, m.group_instance_id, m.metadata)
            for m in response.members
        }
        topics = sorted({t for spec in specs.values() for t in spec.topics})
        counts, racks = await self._link.partitions(topics)
        self._assigned_counts = dict(counts)
        group = GroupSpec(specs, counts, racks, self.replicas)
        # In a thread: a million-partition assignment takes seconds, and heartbeats (this
        # member's and, in the sidecar, HTTP) must keep going meanwhile.
        result = await asyncio.to_thread(assignor.assign, group)
        log.info(
            "%s: leader of generation %d assigned %d partitions to %d members with %s",
            self.group_id,
            self.generation,
            sum(len(ps) for t in result.values() for ps in t.values()),
            len(specs),
            name,
        )
        return [
            {
                "member_id": member_id,
                "assignment": encode_assignment(
                    Assignment({t: tuple(ps) for t, ps in result.get(member_id, {}).items() if ps})
                ),
            }
            for member_id in specs
        ]

    async def _complete_join(self, assignment: Assignment) -> None:
        """Java's onJoinComplete: take the new assignment, revoke what moved (cooperative)."""
        new = frozenset(TopicPartition(t, p) for t, ps in assignment.partitions.items() for p in ps)
        self._sticky_memory = (
            {t: tuple(ps) for t, ps in assignment.partitions.items()},
            self.generation,
        )
        unsubscribed = {tp.topic for tp in new} - set(self.topics)
        revoked = self._owned - new
        added = new - self._owned
        if revoked:
            self._owned = self._owned - revoked
            await self._call("on_partitions_revoked", revoked)
        self._owned = new
        self._last_heartbeat_ok = asyncio.get_running_loop().time()
        await self._set_state("stable")
        self._heartbeat_task = asyncio.create_task(
            self._heartbeats(), name=f"kgroups-heartbeat-{self.group_id}"
        )
        await self._call("on_partitions_assigned", added)
        if revoked and self.protocol == "cooperative":
            self.request_rejoin(f"revoked {len(revoked)} partitions for the follow-up rebalance")
        if unsubscribed:
            self.request_rejoin(f"assigned topics not subscribed: {sorted(unsubscribed)}")

    # -- heartbeats ---------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        lost_after = max(
            self.session_timeout_ms / 1000 - self.heartbeat_interval, self.session_timeout_ms / 2000
        )
        next_metadata = loop.time() + self.metadata_max_age
        while self.state == "stable" and not self._rejoin_needed.is_set():
            await asyncio.sleep(self.heartbeat_interval)
            sent = loop.time()
            if self.leader and sent >= next_metadata:
                next_metadata = sent + self.metadata_max_age
                if await self._partitions_changed():
                    return
            body = build(
                hb.HeartbeatRequest,
                {
                    "group_id": self.group_id,
                    "generation_id": self.generation,
                    "member_id": self.member_id,
                    "group_instance_id": self.instance_id,
                },
            )
            try:
                response = await self._link.request(body, timeout=max(self.heartbeat_interval, 1.0))
            except CoordinatorUnavailable as exc:
                if self._stale_heartbeat(body):
                    return
                if (
                    self._last_heartbeat_ok is not None
                    and sent - self._last_heartbeat_ok > lost_after
                ):
                    log.warning(
                        "%s: no heartbeat for %.1f s (%s): partitions lost",
                        self.group_id,
                        sent - self._last_heartbeat_ok,
                        exc,
                    )
                    self._reset(member_id=True)
                    self._rejoin_needed.set()
                    await self._lose_now()
                    return
                continue
            code = response.error_code
            if self._stale_heartbeat(body):
                # Java's generationUnchanged(): the member moved on while this answer was in
                # flight (a rejoin started; Python 3.11's wait_for can even swallow the
                # cancellation). Acting on it would reset the new generation or force one
                # more rebalance.
                log.debug(
                    "%s: ignoring heartbeat answer %s for an old generation",
                    self.group_id,
                    code.name,
                )
                return
            if code is not ErrorCode.none:
                log.info(
                    "%s: heartbeat of generation %d answered %s",
                    self.group_id,
                    body.generation_id,
                    code.name,
                )
            if code is ErrorCode.none:
                self._last_heartbeat_ok = sent
            elif code is ErrorCode.rebalance_in_progress:
                self._last_heartbeat_ok = sent
                self._rejoin_needed.set()
            elif code is ErrorCode.illegal_generation:
                self._reset(member_id=False)
                self._rejoin_needed.set()
            elif code is ErrorCode.unknown_member_id:
                self._reset(member_id=True)
                self._rejoin_needed.set()
            elif code is ErrorCode.fenced_instance_id:
                await self._fail(
                    FencedInstanceError(
                        f"heartbeat: group.instance.id {self.instance_id!r} was fenced by another "
                        "member",
                        code,
                    )
                )
                return
            elif code in COORDINATOR_MOVED:
                await self._link.reset()
            else:
                log.warning("%s: heartbeat answered %s", self.group_id, code.name)

    def _stale_heartbeat(self, sent: Any) -> bool:
        """Whether a heartbeat answer belongs to a generation this member has left."""
        return (
            self.state != "stable"
            or self._rejoin_needed.is_set()
            or asyncio.current_task() is not self._heartbeat_task
            or (sent.generation_id, sent.member_id) != (self.generation, self.member_id)
        )

    async def _partitions_changed(self) -> bool:
        """Leader only: rejoin when a subscribed topic's partition count moved since the
        assignment (Java's metadata snapshot check), so new partitions get an owner."""
        snapshot = self._assigned_counts
        if snapshot is None:
            return False
        try:
            counts, _ = await self._link.partitions(sorted(snapshot))
        except CoordinatorUnavailable:
            return False
        if dict(counts) == snapshot:
            return False
        self.request_rejoin(f"partition counts changed: {snapshot} -> {dict(counts)}")
        return True

    async def _lose_now(self) -> None:
        if self._owned:
            lost, self._owned = self._owned, frozenset()
            await self._call("on_partitions_lost", lost)
            await self._set_state("joining")

    async def _stop_heartbeats(self) -> None:
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- state ---------------------------------------------------------------------------------

    def _reset(self, *, member_id: bool) -> None:
        self.generation = NO_GENERATION
        self._sticky_memory = ({}, NO_GENERATION)
        if member_id:
            self.member_id = ""

    async def _set_state(self, state: State) -> None:
        self.state = state
        async with self._changed:
            self._changed.notify_all()

    async def _fail(self, error: MemberError) -> None:
        log.error("%s: %s", self.group_id, error)
        self._fatal = error
        if self._owned:
            lost, self._owned = self._owned, frozenset()
            await self._call("on_partitions_lost", lost)
        self._reset(member_id=True)
        await self._set_state("failed")

    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing:
            raise MemberError("the member is closed")

    async def _call(self, name: str, partitions: Partitions) -> None:
        callback: Callable[[Partitions], Any] | None = getattr(self.listener, name, None)
        if callback is None:
            return
        try:
            result = callback(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception:  # the application's bug must not wedge the group protocol
            log.exception("%s: rebalance listener %s failed", self.group_id, name)
