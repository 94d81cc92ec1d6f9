"""The kopf handlers: which event of which resource runs which reconciler.

Everything the handlers do reaches the coordinator through the Kafka admin protocol
(`kgroups.admin.Admin`, one shared connection); the work is in `topics.TopicReconciler`,
`groups.GroupReconciler` and `self_access`. Here only the wiring lives: the handler ids
(kopf keeps progress under them in each object's annotations, so they must not change),
the claim indexes both reconcilers consult, the watched-object counters, and the
operator's own checks of what it may do.
"""

from __future__ import annotations

from typing import Any

import kopf

from kgroups.admin import Admin
from kgroups.api import offset_requests as rq
from kgroups.api.models import API_GROUP, API_VERSION
from kgroups.claims import Claim, claim_of, kafka_name
from kgroups.operator import access, self_access
from kgroups.operator.groups import POLL_INTERVAL_S, GroupReconciler
from kgroups.operator.metrics import OperatorMetrics
from kgroups.operator.reporting import not_deleting
from kgroups.operator.topics import TOPIC_CHECK_S, TopicReconciler
from kgroups.tasks import Tasks

MIRROR_ID = "group-status"
"""The id of the ConsumerGroup timer (its progress annotation carries it)."""


def register(
    registry: kopf.OperatorRegistry,
    admin: Admin,
    namespaces: list[str] | None = None,
    metrics: OperatorMetrics | None = None,
) -> None:
    """Attach every handler to `registry`, all talking to the coordinator through `admin`.
    `namespaces` are the ones watched (none: every namespace), whose access is checked;
    `metrics` counts reconciles and watched objects."""
    metrics = metrics or OperatorMetrics()
    started: list[kopf.OperatorSettings] = []
    """kopf's settings once the operator started: for the API calls handlers make
    themselves (kopf passes settings to startup handlers only)."""
    _register_lifecycle(registry, admin, namespaces or [], metrics, started)
    _register_topics(registry, TopicReconciler(admin, metrics))
    _register_groups(registry, GroupReconciler(admin, metrics, lambda: started[0]))


def _register_lifecycle(
    registry: kopf.OperatorRegistry,
    admin: Admin,
    namespaces: list[str],
    metrics: OperatorMetrics,
    started: list[kopf.OperatorSettings],
) -> None:
    watch = access.AccessWatch()
    tasks = Tasks("kgroups-operator")

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def check_access(settings: kopf.OperatorSettings, logger: kopf.Logger, **_: Any) -> None:
        started.append(settings)
        # In the background: kopf's API client answers only once startup is done.
        tasks.spawn("access-checks", self_access.watch_access(settings, namespaces, watch, logger))

    @kopf.on.probe(id="missingPermissions", registry=registry)
    def missing_permissions(**_: Any) -> list[str]:
        return list(watch.missing)

    @kopf.on.cleanup(registry=registry)
    async def close(**_: Any) -> None:
        await tasks.close()
        await admin.close()

    @kopf.index(API_GROUP, API_VERSION, "consumergroups", id="group_claims", registry=registry)
    def group_claims(body: kopf.Body, **_: Any) -> dict[str, Claim]:
        """Kafka group id -> this ConsumerGroup's claim on it (`kgroups.claims`)."""
        return {kafka_name(body, "groupId"): claim_of(body)}

    @kopf.index(API_GROUP, API_VERSION, "topics", id="topic_claims", registry=registry)
    def topic_claims(body: kopf.Body, **_: Any) -> dict[str, Claim]:
        """Kafka topic name -> this Topic's claim on it."""
        return {kafka_name(body, "topicName"): claim_of(body)}

    @kopf.on.event(API_GROUP, API_VERSION, "topics", registry=registry)
    def topic_event(name: str, namespace: str | None, event: kopf.RawEvent, **_: Any) -> None:
        metrics.event("Topic", event.get("type"), namespace, name)

    @kopf.on.event(API_GROUP, API_VERSION, "consumergroups", registry=registry)
    def group_event(name: str, namespace: str | None, event: kopf.RawEvent, **_: Any) -> None:
        metrics.event("ConsumerGroup", event.get("type"), namespace, name)


def _register_topics(registry: kopf.OperatorRegistry, topics: TopicReconciler) -> None:
    resource = (API_GROUP, API_VERSION, "topics")
    reconcile = kopf.on.resume(*resource, id="topic", registry=registry)(topics.reconcile)
    reconcile = kopf.on.create(*resource, id="topic", registry=registry)(reconcile)
    kopf.on.update(*resource, field="spec", id="topic", registry=registry)(reconcile)
    kopf.timer(
        *resource, id="topic-check", interval=TOPIC_CHECK_S, initial_delay=TOPIC_CHECK_S,
        when=not_deleting, registry=registry,
    )(topics.check)  # fmt: skip
    kopf.on.delete(*resource, id="topic-delete", registry=registry)(topics.delete)


def _register_groups(registry: kopf.OperatorRegistry, groups: GroupReconciler) -> None:
    resource = (API_GROUP, API_VERSION, "consumergroups")
    kopf.timer(*resource, id=MIRROR_ID, interval=POLL_INTERVAL_S, when=not_deleting,
               registry=registry)(groups.mirror)  # fmt: skip
    kopf.on.event(
        *resource, id="offset-requests", annotations={rq.ANNOTATION: kopf.PRESENT},
        when=not_deleting, registry=registry,
    )(groups.offset_request)  # fmt: skip
    kopf.on.delete(*resource, id="group-delete", registry=registry)(groups.delete)
