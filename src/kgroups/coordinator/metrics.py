"""Prometheus metrics for the coordinator, in Kafka's vocabulary and Prometheus' shapes.

Two kinds, both per group where it matters (a `group` label, never a member id):

* what happens: the core reports facts in its effects (`RebalanceStarted`,
  `JoinPhaseCompleted`, `RebalanceCompleted`, `SessionExpired`) and the edge reports each
  answered request, each commit and each store write. These feed counters and histograms
  held here as plain numbers, on the event loop;
* what is: groups per state, each group's state, generation, members and partitions,
  topics, connections. Read from the live core at scrape time, on the event loop (the
  HTTP server runs there), so a scrape never sees a half-applied request.

Everything is yielded by one collector over plain numbers (`kgroups.exposition.Histo`).
README "Metrics" documents every name.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kgroups import __version__
from kgroups.coordinator.core import GroupCoordinator
from kgroups.coordinator.core.consumer_group import ConsumerGroupState
from kgroups.coordinator.core.effects import (
    JoinPhaseCompleted,
    MemberReconciled,
    Observation,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceStarted,
    SessionExpired,
    TargetComputed,
)
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.msg_offsets import OffsetCommitResponse
from kgroups.coordinator.core.states import GroupState
from kgroups.exposition import REBALANCE_BUCKETS, REQUEST_BUCKETS, Histo, histogram_family, histos
from kgroups.protocol.consumer import ConsumerProtocolError, decode_assignment
from kgroups.protocol.errors import ErrorCode

BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
FORGET_SLACK = 1000
"""Groups gone from the coordinator whose series may wait for the next scrape to be
dropped; past this many, they are dropped at once (no scrape may ever come)."""


_LABELS = {code: code.name.upper() for code in ErrorCode}
"""An error code as its `error` label (Kafka's name: NONE, ILLEGAL_GENERATION...)."""
_FLAT: dict[type, bool] = {}
"""Response types whose only error code is their top-level `error` (a Heartbeat's): no
walk of the body is needed to find what they report."""


def response_error(body: object) -> ErrorCode:
    """The error a response reports: its top-level code if that is one, else the first
    per-item code that is not NONE (a commit refused for one partition), else NONE."""
    top = getattr(body, "error", None)
    if isinstance(top, ErrorCode) and top is not ErrorCode.none:
        return top
    flat = _FLAT.get(type(body))
    if flat is None:
        flat = _FLAT[type(body)] = is_dataclass(body) and all(
            f.name == "error" or f.type in ("str", "int", "bool", "bytes", "str | None")
            for f in fields(body)
        )
    if flat:
        return ErrorCode.none
    found = _first_error(body, depth=0)
    return found if found is not None else ErrorCode.none


def _first_error(value: Any, depth: int) -> ErrorCode | None:
    if isinstance(value, ErrorCode):
        return value if value is not ErrorCode.none else None
    if depth > 4:
        return None
    if isinstance(value, tuple | list):
        for item in value:
            if (found := _first_error(item, depth + 1)) is not None:
                return found
    elif is_dataclass(value):
        for f in fields(value):
            if (found := _first_error(getattr(value, f.name), depth + 1)) is not None:
                return found
    return None


def _held(group: Group) -> set[tuple[str, int]]:
    """The partitions the group's members hold, from the assignments the leader gave."""
    held: set[tuple[str, int]] = set()
    if group.protocol_type != "consumer":
        return held
    for member in group.members.values():
        try:
            partitions = decode_assignment(member.assignment).partitions
        except ConsumerProtocolError:
            continue
        held.update((topic, p) for topic, ps in partitions.items() for p in ps)
    return held


REJECT_REASONS = ("total", "per_address")
RATED = ("JoinGroup", "OffsetCommit", "SaslAuthenticate")
"""The APIs with a rate: per principal, and SaslAuthenticate per client address
(failed authentications, `limits.FailureBudget`)."""


@dataclass(slots=True)
class _Tallies:
    rebalances: Tally[tuple[str, str]] = field(default_factory=Tally)
    rebalance_seconds: defaultdict[str, Histo] = field(
        default_factory=lambda: histos(REBALANCE_BUCKETS)
    )
    join_seconds: defaultdict[str, Histo] = field(default_factory=lambda: histos(REBALANCE_BUCKETS))
    sync_seconds: defaultdict[str, Histo] = field(default_factory=lambda: histos(REBALANCE_BUCKETS))
    reconcile_seconds: defaultdict[str, Histo] = field(
        default_factory=lambda: histos(REBALANCE_BUCKETS)
    )
    assignment_seconds: defaultdict[str, Histo] = field(
        default_factory=lambda: histos(REQUEST_BUCKETS)
    )
    last_rebalance: dict[str, float] = field(default_factory=dict)
    expirations: Tally[str] = field(default_factory=Tally)
    requests: Tally[tuple[str, str]] = field(default_factory=Tally)
    request_seconds: defaultdict[str, Histo] = field(
        default_factory=lambda: histos(REQUEST_BUCKETS)
    )
    commits: Tally[tuple[str, str]] = field(default_factory=Tally)
    write_seconds: Histo = field(default_factory=lambda: Histo(REQUEST_BUCKETS))
    write_records: Histo = field(default_factory=lambda: Histo(BATCH_BUCKETS))
    rejected: Tally[str] = field(default_factory=lambda: Tally(dict.fromkeys(REJECT_REASONS, 0)))
    idle_closed: int = 0
    unauthenticated_closed: int = 0
    memory_pauses: int = 0
    authentications: Tally[str] = field(
        default_factory=lambda: Tally(dict.fromkeys(("success", "failure"), 0))
    )
    refusals: Tally[str] = field(
        default_factory=lambda: Tally(dict.fromkeys(("GROUP", "TOPIC", "CLUSTER"), 0))
    )
    throttled: Tally[str] = field(default_factory=lambda: Tally(dict.fromkeys(RATED, 0)))
    throttle_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(RATED, 0.0))


def _counted(name: str, help_: str, label: str, counts: Mapping[str, float]) -> Metric:
    """A counter with one label, a series per key of `counts`."""
    family = CounterMetricFamily(name, help_, labels=[label])
    for key, n in sorted(counts.items()):
        family.add_metric([key], n)
    return family


class CoordinatorMetrics(Collector):
    """The coordinator's registry: facts go in through `observe`/`answered`/`written`,
    the state is read from `coordinator()` at scrape time."""

    def __init__(
        self,
        coordinator: Callable[[], GroupCoordinator | None],
        connections: Callable[[], int],
        wall_clock: Callable[[], float],
        buffered: Callable[[], int] = lambda: 0,
    ) -> None:
        self._coordinator = coordinator
        self._connections = connections
        self._buffered = buffered
        self._wall_clock = wall_clock
        self._t = _Tallies()
        self._groups: set[str] = set()
        """Groups with per-group series (in any tally)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- facts ---------------------------------------------------------------------------

    def observe(self, observations: Iterable[Observation]) -> None:
        t = self._t
        for o in observations:
            self._tallied(o.group_id)
            if isinstance(o, RebalanceStarted):
                t.rebalances[o.group_id, o.reason.value] += 1
            elif isinstance(o, JoinPhaseCompleted):
                t.join_seconds[o.group_id].observe(o.duration_ms / 1000)
            elif isinstance(o, RebalanceCompleted):
                t.rebalance_seconds[o.group_id].observe(o.duration_ms / 1000)
                if not self._consumer_protocol(o.group_id):  # no sync phase there
                    t.sync_seconds[o.group_id].observe(o.sync_ms / 1000)
                t.last_rebalance[o.group_id] = self._wall_clock()
            elif isinstance(o, SessionExpired):
                t.expirations[o.group_id] += 1
            elif isinstance(o, MemberReconciled):
                t.reconcile_seconds[o.group_id].observe(o.duration_ms / 1000)
            elif isinstance(o, TargetComputed):
                t.assignment_seconds[o.group_id].observe(o.seconds)

    def _consumer_protocol(self, group_id: str) -> bool:
        coordinator = self._coordinator()
        return coordinator is not None and group_id in coordinator.core.consumer_groups

    def _live(self) -> set[str]:
        """Every group the coordinator has, classic and consumer-protocol."""
        coordinator = self._coordinator()
        if coordinator is None:
            return set()
        return set(coordinator.groups) | set(coordinator.core.consumer_groups)

    def answered(self, api: str, body: object, seconds: float, group_id: str | None) -> None:
        """A request was answered `seconds` after it arrived. Commits are counted per
        group only for a group that exists once it is answered: a commit refused for a
        group id nobody uses (an unauthorized client sending thousands) leaves no series."""
        t = self._t
        t.requests[api, _LABELS[response_error(body)]] += 1
        t.request_seconds[api].observe(seconds)
        if isinstance(body, OffsetCommitResponse) and group_id is not None:
            coordinator = self._coordinator()
            if coordinator is None or (
                group_id not in coordinator.groups
                and group_id not in coordinator.core.consumer_groups
            ):
                return
            self._tallied(group_id)
            for topic in body.topics:
                for _, code in topic.partitions:
                    t.commits[group_id, code.name.upper()] += 1

    def heartbeat(self, code: ErrorCode, seconds: float, api: str = "Heartbeat") -> None:
        """`answered` for a heartbeat answered with `code` (the hot paths' shortcut: a
        Heartbeat, or a ConsumerGroupHeartbeat that changed nothing)."""
        t = self._t
        t.requests[api, _LABELS[code]] += 1
        t.request_seconds[api].observe(seconds)

    def _tallied(self, group_id: str) -> None:
        """`group_id` has per-group series: drop those of deleted groups when too many."""
        if group_id in self._groups:
            return
        self._groups.add(group_id)
        coordinator = self._coordinator()
        if coordinator is not None and len(self._groups) > (
            len(coordinator.groups) + len(coordinator.core.consumer_groups) + FORGET_SLACK
        ):
            self._forget_all_but(self._live())

    def _forget_all_but(self, live: set[str]) -> None:
        """Drop every per-group series of groups not in `live` (deleted, expired)."""
        t = self._t
        gone = self._groups - live
        if not gone:
            return
        for tally in (t.rebalances, t.commits):
            for key in [k for k in tally if k[0] in gone]:
                del tally[key]
        for per_group in (t.rebalance_seconds, t.join_seconds, t.sync_seconds,
                          t.reconcile_seconds, t.assignment_seconds, t.last_rebalance,
                          t.expirations):  # fmt: skip
            for group_id in gone:
                per_group.pop(group_id, None)
        self._groups &= live

    def rejected(self, reason: str) -> None:
        self._t.rejected[reason] += 1

    def idle_closed(self) -> None:
        self._t.idle_closed += 1

    def unauthenticated_closed(self) -> None:
        self._t.unauthenticated_closed += 1

    def authentication_delayed(self, seconds: float) -> None:
        self.throttled("SaslAuthenticate", seconds)

    def paused_for_memory(self) -> None:
        self._t.memory_pauses += 1

    def authenticated(self, ok: bool) -> None:
        self._t.authentications["success" if ok else "failure"] += 1

    def refused(self, resource_types: Iterable[str]) -> None:
        for kind in resource_types:
            self._t.refusals[kind] += 1

    def throttled(self, api: str, seconds: float) -> None:
        self._t.throttled[api] += 1
        self._t.throttle_seconds[api] = self._t.throttle_seconds.get(api, 0.0) + seconds

    def written(self, records: int, seconds: float) -> None:
        self._t.write_records.observe(records)
        self._t.write_seconds.observe(seconds)

    # -- scrape --------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("kgroups_build_info", "kgroups' version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        coordinator = self._coordinator()
        live = self._live()
        if coordinator is not None:
            self._forget_all_but(live)
        yield from self._events(live)
        if coordinator is not None:
            yield from self._state(coordinator)

    def _events(self, live: set[str]) -> Iterator[Metric]:
        """Counters of the live groups are all there, at 0 until something happens: a
        series that first appears at 1 loses that first increment in `increase()`."""
        t = self._t
        self._groups |= live
        for group in live:
            for cause in RebalanceReason:
                t.rebalances.setdefault((group, cause.value), 0)
            t.expirations.setdefault(group, 0)
            t.commits.setdefault((group, "NONE"), 0)
        rebalances = CounterMetricFamily(
            "kgroups_group_rebalances",
            "Rebalances started (the group entered PreparingRebalance), by what started them.",
            labels=["group", "reason"],
        )
        for (group_id, reason), n in sorted(t.rebalances.items()):
            rebalances.add_metric([group_id, reason], n)
        yield rebalances
        yield histogram_family(
            "kgroups_group_rebalance_duration_seconds",
            "PreparingRebalance to Stable (the leader's assignment), restarted rounds included.",
            "group",
            sorted(t.rebalance_seconds.items()),
        )
        yield histogram_family(
            "kgroups_group_join_phase_duration_seconds",
            "PreparingRebalance to CompletingRebalance: waiting for members to (re)join.",
            "group",
            sorted(t.join_seconds.items()),
        )
        yield histogram_family(
            "kgroups_group_sync_phase_duration_seconds",
            "CompletingRebalance to Stable: waiting for the leader's assignment.",
            "group",
            sorted(t.sync_seconds.items()),
        )
        yield histogram_family(
            "kgroups_consumer_member_reconciliation_seconds",
            "Consumer protocol (KIP-848): from a new target assignment to a member holding "
            "exactly its share of it.",
            "group",
            sorted(t.reconcile_seconds.items()),
        )
        yield histogram_family(
            "kgroups_consumer_assignment_seconds",
            "Consumer protocol (KIP-848): the coordinator's time computing a target "
            "assignment (the server-side assignor's run).",
            "group",
            sorted(t.assignment_seconds.items()),
        )
        last = GaugeMetricFamily(
            "kgroups_group_last_rebalance_timestamp_seconds",
            "When the group's last rebalance completed (Unix time).",
            labels=["group"],
        )
        for group, when in sorted(t.last_rebalance.items()):
            last.add_metric([group], when)
        yield last
        expired = CounterMetricFamily(
            "kgroups_session_expirations",
            "Members removed because their session timed out without a heartbeat.",
            labels=["group"],
        )
        for group, n in sorted(t.expirations.items()):
            expired.add_metric([group], n)
        yield expired
        requests = CounterMetricFamily(
            "kgroups_requests",
            "Requests answered, by API and the error answered (NONE: success).",
            labels=["api", "error"],
        )
        for (api, error), n in sorted(t.requests.items()):
            requests.add_metric([api, error], n)
        yield requests
        yield histogram_family(
            "kgroups_request_duration_seconds",
            "Request received to answer written, waiting in a rebalance included.",
            "api",
            sorted(t.request_seconds.items()),
        )
        commits = CounterMetricFamily(
            "kgroups_offset_commits",
            "Partition offsets committed (error NONE) or refused (the error), per group.",
            labels=["group", "error"],
        )
        for (group, error), n in sorted(t.commits.items()):
            commits.add_metric([group, error], n)
        yield commits
        yield histogram_family(
            "kgroups_store_write_duration_seconds",
            "One durable write (a group commit of every record queued) to SQLite.",
            None,
            [(None, t.write_seconds)],
        )
        yield histogram_family(
            "kgroups_store_write_records",
            "Records per durable write.",
            None,
            [(None, t.write_records)],
        )

    def _state(self, coordinator: GroupCoordinator) -> Iterator[Metric]:
        groups = coordinator.groups
        by_state = GaugeMetricFamily(
            "kgroups_groups", "Consumer groups on the coordinator, by state.", labels=["state"]
        )
        tally = Tally(g.state for g in groups.values())
        for state in GroupState:
            by_state.add_metric([state.value], tally.get(state, 0))
        yield by_state
        state_set = GaugeMetricFamily(
            "kgroups_group_state", "1 for the group's current state, 0 for the others.",
            labels=["group", "state"],
        )  # fmt: skip
        members = GaugeMetricFamily(
            "kgroups_group_members", "Members of each group.", labels=["group"]
        )
        generation = GaugeMetricFamily(
            "kgroups_group_generation", "Each group's generation id.", labels=["group"]
        )
        assigned = GaugeMetricFamily(
            "kgroups_group_assigned_partitions",
            "Partitions the group's members hold, from their assignments.",
            labels=["group"],
        )
        unassigned = GaugeMetricFamily(
            "kgroups_group_unassigned_partitions",
            "Partitions of the topics the group's members subscribe to that no member holds.",
            labels=["group"],
        )
        topics = coordinator.core.topics
        for group_id, group in sorted(groups.items()):
            for state in GroupState:
                state_set.add_metric([group_id, state.value], 1 if group.state is state else 0)
            members.add_metric([group_id], len(group.members))
            generation.add_metric([group_id], group.generation_id)
            held = _held(group)
            assigned.add_metric([group_id], len(held))
            nobody = sum(
                1
                for name in group.subscribed_topics or ()
                if name in topics
                for p in range(topics[name].partitions)
                if (name, p) not in held
            )
            unassigned.add_metric([group_id], nobody)
        yield from self._consumer_state(coordinator, members, assigned, unassigned)
        yield from (state_set, members, generation, assigned, unassigned)
        yield GaugeMetricFamily("kgroups_topics", "Topics on the coordinator.", value=len(topics))
        yield GaugeMetricFamily(
            "kgroups_partitions",
            "Partitions of all topics on the coordinator.",
            value=sum(t.partitions for t in topics.values()),
        )
        yield GaugeMetricFamily(
            "kgroups_connections", "Open client connections.", value=self._connections()
        )
        sharding = coordinator.core.sharding
        if sharding is not None:  # one replica of several
            shards = GaugeMetricFamily(
                "kgroups_replica_shards", "Shards this replica serves, or is loading.",
                labels=["state"],
            )  # fmt: skip
            shards.add_metric(["serving"], len(sharding.serving))
            shards.add_metric(["loading"], len(sharding.loading))
            yield shards
            yield GaugeMetricFamily(
                "kgroups_replicas",
                "Live replicas this one sees (brokers in Metadata).",
                value=len(sharding.brokers),
            )
        yield from self._guard()

    def _consumer_state(
        self,
        coordinator: GroupCoordinator,
        members: GaugeMetricFamily,
        assigned: GaugeMetricFamily,
        unassigned: GaugeMetricFamily,
    ) -> Iterator[Metric]:
        """Consumer-protocol groups (KIP-848): by state, their epochs and the members not
        yet reconciled; their members and partitions go in the families all groups share."""
        groups = coordinator.core.consumer_groups
        topics = coordinator.core.topics
        by_state = GaugeMetricFamily(
            "kgroups_consumer_groups",
            "Consumer-protocol (KIP-848) groups on the coordinator, by state.",
            labels=["state"],
        )
        tally = Tally(g.state for g in groups.values())
        for state in ConsumerGroupState:
            by_state.add_metric([state.value], tally.get(state, 0))
        yield by_state
        epoch = GaugeMetricFamily(
            "kgroups_consumer_group_epoch",
            "Each consumer-protocol group's group epoch.",
            labels=["group"],
        )
        target = GaugeMetricFamily(
            "kgroups_consumer_group_assignment_epoch",
            "The epoch of each consumer-protocol group's target assignment.",
            labels=["group"],
        )
        behind = GaugeMetricFamily(
            "kgroups_consumer_group_unreconciled_members",
            "Members not yet holding exactly their share of the target assignment.",
            labels=["group"],
        )
        for group_id, group in sorted(groups.items()):
            epoch.add_metric([group_id], group.group_epoch)
            target.add_metric([group_id], group.assignment_epoch)
            behind.add_metric([group_id], len(group.unreconciled))
            members.add_metric([group_id], len(group.members))
            assigned.add_metric([group_id], len(group.holders))
            subscribed = {t for m in group.members.values() for t in m.subscribed_topic_names}
            nobody = sum(
                1
                for name in subscribed
                if name in topics
                for p in range(topics[name].partitions)
                if (name, p) not in group.holders
            )
            unassigned.add_metric([group_id], nobody)
        yield from (epoch, target, behind)

    def _guard(self) -> Iterator[Metric]:
        """Security and limits: who was turned away, and why."""
        t = self._t
        yield _counted(
            "kgroups_connections_rejected",
            "Connections closed on accept: over max connections in total or per address.",
            "reason", t.rejected,
        )  # fmt: skip
        yield CounterMetricFamily(
            "kgroups_connections_idle_closed",
            "Connections closed after connections.max.idle.ms without a request.",
            value=t.idle_closed,
        )
        yield CounterMetricFamily(
            "kgroups_connections_unauthenticated_closed",
            "Connections on SASL listeners closed for not authenticating in time.",
            value=t.unauthenticated_closed,
        )
        yield GaugeMetricFamily(
            "kgroups_buffered_request_bytes",
            "Bytes of requests received but not handled yet, partial frames included.",
            value=self._buffered(),
        )
        yield CounterMetricFamily(
            "kgroups_buffered_request_pauses",
            "Times a connection stopped being read because buffered bytes were over the limit.",
            value=t.memory_pauses,
        )
        yield _counted("kgroups_authentications",
                       "SASL authentications and re-authentications, by result.",
                       "result", t.authentications)  # fmt: skip
        yield _counted("kgroups_authorization_refusals",
                       "Actions refused by the authorizer, by Kafka resource type.",
                       "resource_type", t.refusals)  # fmt: skip
        yield _counted(
            "kgroups_requests_throttled",
            "Requests delayed for going over their principal's rate (JoinGroup, OffsetCommit), "
            "or their address's failed authentications (SaslAuthenticate).",
            "api", t.throttled,
        )  # fmt: skip
        yield _counted("kgroups_request_throttle_seconds",
                       "Time throttled requests were made to wait.", "api",
                       t.throttle_seconds)  # fmt: skip
