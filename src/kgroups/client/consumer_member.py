"""`ConsumerProtocolMember`: a group member of Kafka 4's consumer protocol (KIP-848).

The coordinator assigns: the member sends ConsumerGroupHeartbeat at the interval the
coordinator names, says what it owns, and receives its assignment one step at a time
(Java's `ConsumerMembershipManager`). When an answer carries an assignment, the member
reconciles, beside its heartbeats (a revocation callback may take long: the batch in
flight ends first, bounded by the coordinator's rebalance timeout): it stops work on what
it loses (the listener's `on_partitions_revoked`), reports what it still owns in a
heartbeat sent straight away, and starts what was added (`on_partitions_assigned`). A
newer assignment that comes meanwhile is reconciled next. Until the callback returns,
heartbeats still report the partitions as owned: the coordinator hands a partition to
another member only once this one said it released it, or was fenced.

Fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): everything it held is lost
(`on_partitions_lost`) and it joins again at epoch 0 under its member id. Silent
(no answer proving membership for `session_timeout_ms`, the coordinator's
`group.consumer.session.timeout.ms`, less a margin, counted from when the last proving
heartbeat was *sent*): it gives everything up as lost before the coordinator can fence
it and hand its partitions on, as kgroups' classic member does. Errors a client cannot
recover from (authorization, an unsupported assignor, a full group, an invalid request)
fail the member, which reports its partitions lost and raises the error to the
application.

Commits carry the member epoch (OffsetCommit v9); a commit pinned to an older epoch is
accepted by a Kafka 4.3+ coordinator for partitions the member held since then
(KIP-1251). `close` revokes everything, then leaves (epoch -1; -2 for a static member,
which keeps its partitions until it returns or its session ends).

This is `GroupMember`'s counterpart; its callers see the same surface (`start`, `state`,
`wait_stable`, `assignment`, `generation` (the member epoch), `proven_since`, `commit`,
`committed`, `close`, `wait_failed`). Time comes only from the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.consumer_group_heartbeat.v1 import request as hb
from kio.schema.consumer_group_heartbeat.v1 import response as hbr
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12 import response as mdr
from kio.schema.offset_commit.v9 import response as ocr
from kio.schema.offset_fetch.v7 import response as ofr

from kgroups.client.errors import (
    CommitError,
    CommitFailedError,
    MemberError,
    TopicPartition,
)
from kgroups.client.link import (
    COORDINATOR_MOVED,
    CoordinatorLink,
    CoordinatorUnavailable,
    parse_bootstrap,
)
from kgroups.client.listener import Callback, Partitions, invoke
from kgroups.client.offsets import (
    Offsets,
    commit_errors,
    commit_request,
    fetch_request,
    fetch_result,
)
from kgroups.client.states import MemberState
from kgroups.protocol.build import build
from kgroups.protocol.client import Connector
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import COORDINATOR, MEMBER
from kgroups.security.client import ClientSecurity
from kgroups.tasks import wait_set

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
FENCED = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})
"""Answers after which the member gives up what it held and joins again at epoch 0."""
RETRY = frozenset({ErrorCode.unreleased_instance_id}) | COORDINATOR_MOVED
"""Answers after which the same heartbeat is sent again, later."""
SESSION_MARGIN = 0.8
"""The member gives its partitions up after this share of the session without proof."""


def _seconds(value: Any) -> float:
    """A kio duration (a timedelta) or a number of milliseconds, in seconds."""
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return float(value) / 1000


class ConsumerProtocolMember:
    """One member of a consumer-protocol group (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str | list[str],
        group_id: str,
        topics: Iterable[str],
        *,
        listener: object | None = None,
        client_id: str = "kgroups",
        instance_id: str | None = None,
        server_assignor: str | None = None,
        rebalance_timeout_ms: int = MEMBER.rebalance_timeout_ms,
        session_timeout_ms: int = COORDINATOR.consumer_session_timeout_ms,
        request_timeout: float = 30.0,
        security: ClientSecurity | None = None,
        connect: Connector | None = None,
    ) -> None:
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.listener = listener
        self.instance_id = instance_id
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout = session_timeout_ms / 1000
        self.member_id = str(uuid.uuid4())  # v1: the member names itself (KIP-1082)
        self.generation = 0
        """The member epoch (0: joining)."""
        self._owned: set[TopicPartition] = set()
        self._revoking: frozenset[TopicPartition] = frozenset()
        self._state = MemberState.JOINING
        self._target: frozenset[TopicPartition] | None = None
        """The newest assignment the coordinator sent, not yet reconciled."""
        self._reconciling: asyncio.Task[None] | None = None
        self._stable = asyncio.Event()
        self._proven_since: float | None = None
        self._reported: frozenset[TopicPartition] | None = None
        """What the coordinator was last told the member owns (None: nothing yet)."""
        self._interval = 0.5
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._joined = asyncio.Event()
        self._failed: asyncio.Future[MemberError] | None = None
        self._error: MemberError | None = None
        self._task: asyncio.Task[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()
        self._background: set[asyncio.Future[None]] = set()
        self._closing = False
        self._incarnation = 0
        """Moves whenever the member gives everything up: an answer to a heartbeat sent
        before then is ignored."""
        security = security or ClientSecurity()
        self._link = CoordinatorLink(
            parse_bootstrap(bootstrap), group_id, client_id, request_timeout,
            connect=security.connector(connect), authenticate=security.authenticator(),
        )  # fmt: skip

    # -- the application's view -----------------------------------------------------------

    @property
    def assignment(self) -> Partitions:
        """What the member may work on: what it owns, less what it is giving up."""
        return frozenset(self._owned - self._revoking)

    @property
    def revoking(self) -> Partitions:
        """What its revocation callback is giving up now."""
        return self._revoking

    @property
    def state(self) -> MemberState:
        """JOINING, STABLE (an answer confirmed its epoch), FAILED or CLOSED."""
        return self._state

    @property
    def error(self) -> MemberError | None:
        return self._error

    @property
    def session_timeout_ms(self) -> int:
        """The session the member assumes the coordinator gives it."""
        return round(self.session_timeout * 1000)

    @property
    def proven_since(self) -> float | None:
        """When (on the event loop's clock) the last heartbeat was sent whose answer
        proved the coordinator still counted this member at its epoch."""
        return self._proven_since

    async def wait_stable(self, *, timeout: float | None = None) -> int:
        """Wait until an answer confirmed the member's epoch; return it. Raises the
        member's fatal error."""
        async with asyncio.timeout(timeout):
            while self._state is not MemberState.STABLE:
                if self._error is not None:
                    raise self._error
                if self._state is MemberState.CLOSED:
                    raise MemberError(f"{self.group_id}: the member is closed")
                stable = asyncio.ensure_future(self._stable.wait())
                waited: set[asyncio.Future[Any]] = {stable}
                if self._failed is not None:
                    waited.add(self._failed)
                try:
                    await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stable.cancel()
        return self.generation

    def request_rejoin(self, reason: str = "requested by the application") -> None:
        """Nothing to do: the coordinator follows its topics' partitions and moves the
        group's epoch itself when they change."""
        log.info("%s: %s: the coordinator reassigns by itself", self.group_id, reason)

    async def start(self, timeout: float | None = None) -> None:
        """Start heartbeating; return once the coordinator has answered the join."""
        self._failed = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(), name=f"{self.group_id}-heartbeats")
        joined = asyncio.ensure_future(self._joined.wait())
        waited: set[asyncio.Future[Any]] = {joined, self._failed}
        done, _ = await asyncio.wait(waited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        joined.cancel()
        if self._error is not None:
            raise self._error
        if not done:
            raise TimeoutError(f"{self.group_id}: not joined within {timeout} s")

    async def wait_failed(self) -> MemberError:
        assert self._failed is not None, "start() first"
        return await asyncio.shield(self._failed)

    async def __aenter__(self) -> ConsumerProtocolMember:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def commit(
        self,
        offsets: Offsets,
        *,
        generation: int | None = None,
        log_ends: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Commit `offsets` at the member's epoch (or the older `generation` the work was
        planned in), with where the source ends where known (`log_ends`);
        CommitFailedError when the coordinator refuses it."""
        epoch = self.generation if generation is None else generation
        body = commit_request(self.group_id, epoch, self.member_id, self.instance_id, offsets,
                              log_ends, version=9)  # fmt: skip
        try:
            response = await self._link.request(body, ocr.OffsetCommitResponse)
        except CoordinatorUnavailable as exc:
            raise CommitError(f"{self.group_id}: commit: {exc}", {}) from exc
        errors = commit_errors(response)
        if not errors:
            return
        fenced = {ErrorCode.stale_member_epoch, ErrorCode.fenced_member_epoch,
                  ErrorCode.unknown_member_id, ErrorCode.illegal_generation}  # fmt: skip
        codes = set(errors.values())
        if codes & fenced:
            code = next(iter(codes & fenced))
            raise CommitFailedError(
                f"{self.group_id}: commit at generation (member epoch) {epoch}: {code.name}", code
            )
        raise CommitError(f"{self.group_id}: commit failed: {errors}", errors)

    async def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, Any]:
        response = await self._link.request(
            fetch_request(self.group_id, list(partitions)), ofr.OffsetFetchResponse
        )
        return fetch_result(response, list(partitions))

    async def close(self, *, leave: bool = True) -> None:
        """Stop: revoke everything (the listener finishes its work), then leave the group
        (a static member leaves for a while: epoch -2)."""
        if self._closing:
            return
        self._closing = True
        if self._reconciling is not None and not self._reconciling.done():
            # A revocation in flight ends first (its work commits while the member is
            # still in the group), within the rebalance timeout.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._reconciling),
                                       self.rebalance_timeout_ms / 1000)  # fmt: skip
        self._state = MemberState.CLOSED
        self._stable.clear()
        for task in (self._task, self._reconciling):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._cancel_deadline()
        if self._owned and self._error is None:
            revoked = frozenset(self._owned)
            self._owned.clear()
            with contextlib.suppress(MemberError):
                await self._invoke("on_partitions_revoked", revoked)
        if leave and self.generation > 0:
            epoch = LEAVE_EPOCH if self.instance_id is None else STATIC_LEAVE_EPOCH
            with contextlib.suppress(CoordinatorUnavailable):
                await self._link.heartbeat(self._request(epoch), hbr.ConsumerGroupHeartbeatResponse,
                                           timeout=self._link.timeout)  # fmt: skip
        await self._link.close()

    # -- the heartbeat loop ---------------------------------------------------------------

    def _request(self, epoch: int) -> Any:
        joining = epoch == 0
        owned = None
        if epoch >= 0 and (joining or self._reported != frozenset(self._owned)):
            owned = self._owned_by_id()
        return build(hb.ConsumerGroupHeartbeatRequest, {
            "group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
            "instance_id": self.instance_id,
            "rebalance_timeout": self.rebalance_timeout_ms if joining else -1,
            "subscribed_topic_names": self.topics if joining else None,
            "server_assignor": self.server_assignor if joining else None,
            "topic_partitions": owned,
        })  # fmt: skip

    def _owned_by_id(self) -> list[dict[str, Any]]:
        by_topic: dict[str, list[int]] = {}
        for tp in self._owned:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return [{"topic_id": self._ids[t], "partitions": sorted(ps)}
                for t, ps in sorted(by_topic.items()) if t in self._ids]  # fmt: skip

    async def _run(self) -> None:
        try:
            await self._beat()
        except asyncio.CancelledError:
            raise
        except MemberError as exc:
            await self._fail(exc)
        except Exception as exc:  # a bug: the member cannot go on as if nothing happened
            log.exception("%s: the member stopped", self.group_id)
            await self._fail(MemberError(f"{self.group_id}: {exc!r}"))

    async def _beat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            owned = frozenset(self._owned)
            incarnation = self._incarnation
            sent = loop.time()
            try:
                response = await self._link.heartbeat(
                    self._request(self.generation), hbr.ConsumerGroupHeartbeatResponse,
                    timeout=max(self._interval, 1.0) + 1.0,
                )  # fmt: skip
            except CoordinatorUnavailable as exc:
                log.debug("%s: heartbeat failed: %s", self.group_id, exc)
                await self._pause(min(self._interval, 1.0))
                continue
            if incarnation != self._incarnation:
                # It gave everything up while this answer was in flight (Java's
                # generationUnchanged): the answer is about a member it no longer is.
                continue
            code = response.error_code
            if code is ErrorCode.none:
                self._proven(sent)
                self._reported = owned
                self.generation = int(response.member_epoch)
                self._interval = _seconds(response.heartbeat_interval)
                if not self._closing:
                    self._state = MemberState.STABLE
                    self._stable.set()
                self._joined.set()
                if response.assignment is not None:
                    await self._assign(response.assignment.topic_partitions)
            elif code in FENCED:
                log.info("%s: %s: joining again", self.group_id, code.name)
                await self._lose(f"fenced ({code.name})")
                continue
            elif code in RETRY:
                if code in COORDINATOR_MOVED:
                    await self._link.reset()
                await self._pause(min(self._interval, 1.0))
                continue
            else:
                raise MemberError(
                    f"{self.group_id}: heartbeat: {code.name}: {response.error_message}", code
                )
            await self._pause(self._interval)

    async def _pause(self, seconds: float) -> None:
        """Up to `seconds`, less if woken (a reconciliation changed what it owns, or
        woke it meanwhile)."""
        await wait_set(self._wake, seconds)
        self._wake.clear()

    async def _assign(self, assigned: Sequence[Any]) -> None:
        """Take the coordinator's assignment as the target, and reconcile toward it
        unless a reconciliation is under way (it takes the newest target when done)."""
        target: set[TopicPartition] = set()
        unknown = [t.topic_id for t in assigned if t.topic_id not in self._names]
        if unknown:
            await self._learn_topics()
        for t in assigned:
            name = self._names.get(t.topic_id)
            if name is not None:
                target.update(TopicPartition(name, int(p)) for p in t.partitions)
        self._target = frozenset(target)
        if self._reconciling is None or self._reconciling.done():
            self._reconciling = asyncio.create_task(
                self._reconcile(self._incarnation), name=f"{self.group_id}-reconcile"
            )

    async def _reconcile(self, incarnation: int) -> None:
        """Become the newest target: revoke first, report, then assign. Stops if the
        member gives everything up meanwhile (what it held is lost, not revoked); a
        callback that raises fails the member."""
        try:
            while self._target is not None and incarnation == self._incarnation:
                target, self._target = self._target, None
                revoked = frozenset(self._owned - target)
                if revoked:
                    self._revoking = revoked
                    await self._invoke("on_partitions_revoked", revoked)
                    if incarnation != self._incarnation:
                        return
                    self._owned -= revoked
                    self._revoking = frozenset()
                    self._wake.set()  # tell the coordinator at once
                added = frozenset(target - self._owned)
                if added:
                    self._owned |= added
                    self._wake.set()
                    await self._invoke("on_partitions_assigned", added)
        except MemberError as exc:
            if incarnation == self._incarnation:
                if self._task is not None:
                    self._task.cancel()
                await self._fail(exc)

    async def _learn_topics(self) -> None:
        """Topic ids and names (assignments name topics by id)."""
        body = build(md.MetadataRequest, {"topics": [{"name": t} for t in self.topics]})
        response = await self._link.request(body, mdr.MetadataResponse)
        for topic in response.topics:
            if (
                topic.error_code is ErrorCode.none
                and topic.name is not None
                and topic.topic_id is not None
            ):
                self._names[topic.topic_id] = topic.name
                self._ids[topic.name] = topic.topic_id

    # -- proof of membership and losses -----------------------------------------------------

    def _proven(self, sent: float) -> None:
        """An answer proves membership from when its heartbeat was sent."""
        self._proven_since = sent
        self._cancel_deadline()
        when = sent + self.session_timeout * SESSION_MARGIN
        self._deadline = asyncio.get_running_loop().call_at(when, self._silent)

    def _silent(self) -> None:
        self._deadline = None
        if self._owned:
            log.warning("%s: no proof of membership for a session timeout: partitions lost",
                        self.group_id)  # fmt: skip
            lost = self._give_up()
            task = asyncio.ensure_future(self._call_quietly("on_partitions_lost", lost))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            self._wake.set()

    def _give_up(self) -> Partitions:
        """Hold nothing and join again at epoch 0 (answers in flight are ignored); what
        it held."""
        reconciling = self._reconciling
        if reconciling is not None and reconciling is not asyncio.current_task():
            reconciling.cancel()  # its callbacks are about partitions now lost
        lost = frozenset(self._owned)
        self._owned.clear()
        self._revoking = frozenset()
        self._target = None
        self.generation = 0
        self._reported = None
        self._incarnation += 1
        if not self._closing:
            self._state = MemberState.JOINING
        self._stable.clear()
        return lost

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    async def _lose(self, reason: str) -> None:
        lost = self._give_up()
        self._cancel_deadline()
        if lost:
            log.info("%s: partitions lost (%s): %s", self.group_id, reason, sorted(lost))
            await self._invoke("on_partitions_lost", lost)

    async def _fail(self, error: MemberError) -> None:
        self._error = error
        self._state = MemberState.FAILED
        self._stable.clear()
        self._incarnation += 1
        reconciling = self._reconciling
        if reconciling is not None and reconciling is not asyncio.current_task():
            reconciling.cancel()
        lost = frozenset(self._owned)
        self._owned.clear()
        self._revoking = frozenset()
        self._cancel_deadline()
        if lost:
            await self._call_quietly("on_partitions_lost", lost)
        if self._failed is not None and not self._failed.done():
            self._failed.set_result(error)

    async def _invoke(self, name: Callback, partitions: Partitions) -> None:
        await invoke(self.listener, name, partitions)

    async def _call_quietly(self, name: Callback, partitions: Partitions) -> None:
        try:
            await self._invoke(name, partitions)
        except MemberError as exc:
            log.warning("%s: %s", self.group_id, exc)
