"""kgroups' metric vocabulary (issue 14) as data: every name, type and label it exports.

The contract the coordinator, the member library, the Spark members and the operator
implement, written down once so tests can hold each part to it: the dashboards and alerting
rules (dashboards/) may only query these names, and an exporter's /metrics may only expose
them. Conventions: prefix `kgroups_`; counters end `_total`; durations are `_seconds`
histograms; timestamps end `_timestamp_seconds`; `group` is the consumer group id; never a
member id, client id or host as a label; no `_created` series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]
Source = Literal["coordinator", "member", "spark", "operator"]

REBALANCE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
                     600)  # fmt: skip
"""Histograms of rebalance-like durations reach the rebalance timeout (max.poll.interval)."""
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30, 60, 300)  # fmt: skip
"""Request and other short latencies."""
STORE_WRITE_RECORDS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)

GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
REBALANCE_REASONS = ("member_joined", "member_left", "session_expired", "sync_timeout",
                     "metadata_changed", "static_replacement", "over_capacity")  # fmt: skip
CALLBACKS = ("assigned", "revoked", "lost")


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind
    labels: tuple[str, ...]
    source: Source
    help: str

    def series(self) -> tuple[str, ...]:
        """The sample names Prometheus stores for it (a histogram's _bucket/_sum/_count)."""
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


def _m(name: str, kind: Kind, labels: str, source: Source, help: str) -> Metric:
    return Metric(name, kind, tuple(labels.split()), source, help)


METRICS: tuple[Metric, ...] = (
    # the coordinator's --metrics endpoint
    _m("kgroups_build_info", "gauge", "version", "coordinator", "build (value 1)"),
    _m("kgroups_groups", "gauge", "state", "coordinator",
       "groups per state (every state present)"),
    _m("kgroups_group_state", "gauge", "group state", "coordinator",
       "state-set: 1 for the group's current state, 0 for the others"),
    _m("kgroups_group_generation", "gauge", "group", "coordinator", "generation id"),
    _m("kgroups_group_members", "gauge", "group", "coordinator", "members"),
    _m("kgroups_group_assigned_partitions", "gauge", "group", "coordinator",
       "partitions its members hold (from their assignments)"),
    _m("kgroups_group_unassigned_partitions", "gauge", "group", "coordinator",
       "partitions of the topics the members subscribe to that nobody holds"),
    _m("kgroups_group_rebalances_total", "counter", "group reason", "coordinator",
       "rebalances started (entered PreparingRebalance), by the first trigger"),
    _m("kgroups_group_rebalance_duration_seconds", "histogram", "group", "coordinator",
       "PreparingRebalance -> Stable, spanning restarted rounds"),
    _m("kgroups_group_join_phase_duration_seconds", "histogram", "group", "coordinator",
       "PreparingRebalance -> CompletingRebalance"),
    _m("kgroups_group_sync_phase_duration_seconds", "histogram", "group", "coordinator",
       "CompletingRebalance -> Stable"),
    _m("kgroups_group_last_rebalance_timestamp_seconds", "gauge", "group", "coordinator",
       "when the last rebalance completed (unix s)"),
    _m("kgroups_session_expirations_total", "counter", "group", "coordinator",
       "members removed because their session timed out"),
    _m("kgroups_consumer_groups", "gauge", "state", "coordinator",
       "consumer-protocol (KIP-848) groups per state"),
    _m("kgroups_consumer_group_epoch", "gauge", "group", "coordinator",
       "a consumer-protocol group's group epoch"),
    _m("kgroups_consumer_group_assignment_epoch", "gauge", "group", "coordinator",
       "the epoch of its target assignment"),
    _m("kgroups_consumer_group_unreconciled_members", "gauge", "group", "coordinator",
       "members not yet holding exactly their share of the target"),
    _m("kgroups_consumer_member_reconciliation_seconds", "histogram", "group", "coordinator",
       "target assignment computed to a member holding its share"),
    _m("kgroups_consumer_assignment_seconds", "histogram", "group", "coordinator",
       "the coordinator's time computing a target assignment"),
    _m("kgroups_requests_total", "counter", "api error", "coordinator",
       "requests answered, by API and Kafka error name (NONE on success)"),
    _m("kgroups_request_duration_seconds", "histogram", "api", "coordinator",
       "request received -> answer written (includes waiting in a rebalance)"),
    _m("kgroups_offset_commits_total", "counter", "group error", "coordinator",
       "partition offsets committed (error NONE) or refused (error name)"),
    _m("kgroups_store_write_duration_seconds", "histogram", "", "coordinator",
       "one group-commit write to SQLite"),
    _m("kgroups_store_write_records", "histogram", "", "coordinator", "records per write"),
    _m("kgroups_connections", "gauge", "", "coordinator", "open client connections"),
    _m("kgroups_connections_rejected_total", "counter", "reason", "coordinator",
       "connections closed on accept: over max connections (total) or per address"),
    _m("kgroups_connections_idle_closed_total", "counter", "", "coordinator",
       "connections closed after connections.max.idle.ms without a request"),
    _m("kgroups_connections_unauthenticated_closed_total", "counter", "", "coordinator",
       "connections on SASL listeners closed for not authenticating in time"),
    _m("kgroups_buffered_request_bytes", "gauge", "", "coordinator",
       "bytes of requests received and not handled yet, partial frames included"),
    _m("kgroups_buffered_request_pauses_total", "counter", "", "coordinator",
       "times a connection stopped being read at the buffered-bytes limit"),
    _m("kgroups_authentications_total", "counter", "result", "coordinator",
       "SASL authentications and re-authentications (success, failure)"),
    _m("kgroups_authorization_refusals_total", "counter", "resource_type", "coordinator",
       "actions the authorizer refused, by Kafka resource type (GROUP, TOPIC, CLUSTER)"),
    _m("kgroups_requests_throttled_total", "counter", "api", "coordinator",
       "requests delayed for going over their principal's rate (JoinGroup, OffsetCommit)"),
    _m("kgroups_request_throttle_seconds_total", "counter", "api", "coordinator",
       "time throttled requests were made to wait"),
    _m("kgroups_topics", "gauge", "", "coordinator", "topics"),
    _m("kgroups_partitions", "gauge", "", "coordinator", "partitions of all topics"),
    _m("kgroups_replica_shards", "gauge", "state", "coordinator",
       "shards a replica serves or is loading (replicas on PostgreSQL only)"),
    _m("kgroups_replicas", "gauge", "", "coordinator",
       "live replicas a replica sees (replicas on PostgreSQL only)"),
    # members: GroupMember in-process, the sidecar's /metrics, Spark members
    _m("kgroups_member_rebalance_duration_seconds", "histogram", "group", "member",
       "first JoinGroup sent -> SyncGroup assignment received (Kafka rebalance-latency)"),
    _m("kgroups_member_rebalances_total", "counter", "group", "member",
       "successful rebalances (rebalance-total)"),
    _m("kgroups_member_failed_rebalances_total", "counter", "group", "member",
       "rebalances that failed (failed-rebalance-total)"),
    _m("kgroups_member_last_rebalance_timestamp_seconds", "gauge", "group", "member",
       "last successful rebalance"),
    _m("kgroups_member_join_duration_seconds", "histogram", "group", "member",
       "JoinGroup round trip (join-time)"),
    _m("kgroups_member_sync_duration_seconds", "histogram", "group", "member",
       "SyncGroup round trip (sync-time)"),
    _m("kgroups_member_heartbeat_response_duration_seconds", "histogram", "group", "member",
       "Heartbeat round trip (heartbeat-response-time; _count = heartbeat-total)"),
    _m("kgroups_member_last_heartbeat_timestamp_seconds", "gauge", "group", "member",
       "last heartbeat sent"),
    _m("kgroups_member_partitions_callback_duration_seconds", "histogram", "group callback",
       "member", "the application's rebalance callbacks (partition-*-latency)"),
    _m("kgroups_member_commit_duration_seconds", "histogram", "group", "member",
       "OffsetCommit round trip (commit-latency; _count = commit-total)"),
    _m("kgroups_member_commit_failures_total", "counter", "group", "member",
       "commits refused or failed"),
    _m("kgroups_member_assigned_partitions", "gauge", "group", "member",
       "partitions assigned now (assigned-partitions)"),
    _m("kgroups_member_generation", "gauge", "group", "member",
       "the generation this member is in (-1 when none)"),
    _m("kgroups_spark_records_total", "counter", "group", "spark", "records processed"),
    _m("kgroups_spark_batches_total", "counter", "group", "spark", "micro-batches completed"),
    _m("kgroups_spark_batch_duration_seconds", "histogram", "group", "spark", "one micro-batch"),
    _m("kgroups_spark_lag_records", "gauge", "group topic", "spark",
       "end offset - committed offset over the member's partitions, where known"),
    # the operator's health port
    _m("kgroups_operator_reconciles_total", "counter", "kind", "operator",
       "reconcile passes (handler runs, timers included)"),
    _m("kgroups_operator_reconcile_errors_total", "counter", "kind", "operator",
       "reconcile passes that failed"),
    _m("kgroups_operator_status_patches_total", "counter", "kind", "operator",
       "status patches written"),
    _m("kgroups_operator_status_patch_duration_seconds", "histogram", "kind", "operator",
       "one status patch"),
    _m("kgroups_operator_coordinator_request_duration_seconds", "histogram", "api", "operator",
       "operator -> coordinator round trip"),
    _m("kgroups_operator_watched_objects", "gauge", "kind", "operator",
       "objects the operator currently watches"),
)  # fmt: skip

BY_NAME = {m.name: m for m in METRICS}
SERIES = {s: m for m in METRICS for s in m.series()}
"""Every sample name a scrape of kgroups may yield -> its metric."""
