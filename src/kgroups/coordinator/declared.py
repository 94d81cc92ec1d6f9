"""Which ConsumerGroup and Topic resource declares each Kafka name, kept current by a watch.

RBAC is namespaced, Kafka names are not: group `billing` may be declared by the
ConsumerGroup `shop/billing` (or by `shop/payments-consumers` with `spec.groupId:
billing`). A question about group `billing` is then a question about that resource, in
its namespace, so a team's Roles in its own namespace decide who may join its groups.
Names no resource declares are asked about in the coordinator's fallback namespace under
their Kafka name, as before.

If two resources claim one Kafka name, the oldest (then the first by namespace/name) owns
it (`kgroups.claims`, the operator's rule too: it reports the newcomer as conflicting).

The index lists both kinds across the cluster, then watches from the list's
resourceVersion; a watch that ends is resumed, one that has expired (410 Gone) relists.
Until the first lists complete the index is not `ready`, and the authorizer waits for it
(then refuses: a question it cannot place is not answered yes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgroups.claims import Claim, claim_of, kafka_name, owner
from kgroups.coordinator.kubeapi import KubeApi, KubeApiError, WatchExpired
from kgroups.tasks import Tasks, wait_set

log = logging.getLogger("kgroups.coordinator.declared")

RETRY_S = 2.0
MAX_RETRY_S = 60.0
"""A list or watch that keeps failing (no permission) is retried at most this rarely."""


@dataclass(frozen=True, slots=True)
class Kind:
    resource: str
    """The RBAC resource name (plural)."""
    name_field: str
    """The spec field holding the Kafka name (default: metadata.name)."""

    @property
    def path(self) -> str:
        return f"/apis/kgroups.io/v1alpha1/{self.resource}"


GROUPS = Kind("consumergroups", "groupId")
TOPICS = Kind("topics", "topicName")
KINDS = (GROUPS, TOPICS)


Declaration = Claim


def _declaration(kind: Kind, obj: Mapping[str, Any]) -> tuple[str, str, Declaration]:
    """(uid, Kafka name, declaration) of a resource."""
    decl = claim_of(obj)
    uid = str((obj.get("metadata") or {}).get("uid") or decl)
    return uid, kafka_name(obj, kind.name_field), decl


class DeclaredNames:
    """Kafka name -> the resource declaring it, per kind."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._by_uid: dict[Kind, dict[str, tuple[str, Declaration]]] = {k: {} for k in KINDS}
        self._synced: set[Kind] = set()
        self._ready = asyncio.Event()
        self._tasks = Tasks("declared-names")

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self, timeout_s: float) -> bool:
        return await wait_set(self._ready, timeout_s)

    def locate(self, kind: Kind, name: str) -> Declaration | None:
        return owner(d for kafka, d in self._by_uid[kind].values() if kafka == name)

    def start(self) -> None:
        for kind in KINDS:
            self._watch(kind)

    def _watch(self, kind: Kind, after_s: float = 0.0) -> None:
        self._tasks.spawn(f"watch-{kind.resource}", self._follow(kind, after_s),
                          on_crash=lambda name, exc: self._crashed(kind, name, exc))  # fmt: skip

    def _crashed(self, kind: Kind, name: str, exc: BaseException) -> None:
        """A bug in following `kind`: logged, and the watch starts over (names are
        only as fresh as the watch, so it must not stay dead)."""
        log.error("%s crashed (restarting in %.0f s)", name, MAX_RETRY_S, exc_info=exc)
        self._watch(kind, after_s=MAX_RETRY_S)

    async def close(self) -> None:
        await self._tasks.close()

    def apply(self, kind: Kind, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        uid, kafka, decl = _declaration(kind, obj)
        if event_type == "DELETED":
            self._by_uid[kind].pop(uid, None)
        else:
            self._by_uid[kind][uid] = (kafka, decl)

    def replace(self, kind: Kind, items: list[Mapping[str, Any]]) -> None:
        """A fresh list: everything known of `kind`."""
        self._by_uid[kind] = {}
        for obj in items:
            self.apply(kind, "ADDED", obj)
        self._synced.add(kind)
        if self._synced == set(KINDS):
            self._ready.set()

    async def _follow(self, kind: Kind, after_s: float = 0.0) -> None:
        await asyncio.sleep(after_s)
        backoff = RETRY_S
        while True:
            try:
                listed = await self.api.get(kind.path)
                self.replace(kind, listed.get("items") or [])
                backoff = RETRY_S
                version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
                while True:  # resume the watch where it ended, until it expires
                    async for event in self.api.watch(kind.path, version):
                        obj = event.get("object") or {}
                        version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.apply(kind, str(event["type"]), obj)
            except WatchExpired:
                continue  # relist
            except KubeApiError as exc:
                log.error("cannot list or watch %s (retrying in %.0f s): %s", kind.resource,  # noqa: TRY400
                          backoff, exc)  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_S)
