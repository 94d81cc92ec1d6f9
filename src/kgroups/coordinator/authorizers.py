"""Who may do what: the answer the server's edge gets before the core handles a request.

The core says which actions a request needs (`GroupCoordinator.needed`); an authorizer
says which of them the connection's principal is refused; the core answers those with
Kafka's authorization errors. Three authorizers:

* none (the default): everything is allowed, as on a Kafka broker without an authorizer;
* `AclFileAuthorizer`: Kafka ACLs from a file (kgroups.security.acl), reloaded on change;
* `RbacAuthorizer`: Kubernetes RBAC, one SubjectAccessReview per (principal, question),
  about the ConsumerGroup or Topic resource that declares the Kafka name, in its own
  namespace (`declared.py`), or, for names no resource declares, the Kafka name in the
  fallback namespace;
  cached for `ttl_s` (allowed and refused alike), so a heartbeat never waits on the API
  server: a grant or a revocation takes effect within the TTL. Questions already in the
  cache are answered synchronously, in the request's own turn of the event loop; only a
  request with an unknown answer waits (its connection's later requests wait behind it,
  as they do behind any request). If the API server cannot be asked, the answer is no
  (fail closed), not cached, and logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kgroups.coordinator.declared import GROUPS, TOPICS, DeclaredNames
from kgroups.coordinator.kubeapi import KubeApi, KubeApiError
from kgroups.files import Reloading
from kgroups.security.acl import Acls, load_acls
from kgroups.security.actions import Action
from kgroups.security.rbac import API_GROUP, Attributes, attributes, subject

log = logging.getLogger("kgroups.coordinator.authz")


class Authorizer(Protocol):
    def denied_now(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                   reset: bool) -> frozenset[Action] | None:  # fmt: skip
        """The refused actions, if known without waiting; None: ask `denied`."""
        ...

    async def denied(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                     reset: bool) -> frozenset[Action]:  # fmt: skip
        ...

    def start(self) -> None:
        """Begin any background work (in the running event loop)."""
        ...

    async def close(self) -> None: ...


class AclFileAuthorizer:
    def __init__(self, path: Path) -> None:
        self._acls = Reloading(f"ACL file {path}", [path], lambda: load_acls(path.read_text()))

    def reload(self) -> None:
        self._acls.reload()

    def denied_now(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                   reset: bool) -> frozenset[Action]:  # fmt: skip
        acls: Acls = self._acls.value
        return acls.denied(principal, host.lstrip("/"), actions)

    async def denied(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                     reset: bool) -> frozenset[Action]:  # fmt: skip
        return self.denied_now(principal, host, api_key, actions, reset)

    def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


Question = tuple[str, str, Attributes]
"""(principal, namespace, what is asked): one cached SubjectAccessReview."""
MAX_CACHED_ANSWERS = 50_000
"""SubjectAccessReview answers kept at once (a few MB at most)."""
DECLARED_WAIT_S = 10.0
"""How long a question waits for the first list of ConsumerGroups and Topics."""


class RbacAuthorizer:
    def __init__(self, api: KubeApi, namespace: str, ttl_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 declared: DeclaredNames | None = None) -> None:  # fmt: skip
        self.api = api
        self.namespace = namespace
        self.ttl_s = ttl_s
        self._clock = clock
        self.declared = declared
        self._cache: dict[Question, tuple[bool, float]] = {}
        self._asking: dict[Question, asyncio.Future[bool]] = {}
        self.reviews = 0

    def _questions(self, principal: str, api_key: int, action: Action,
                   reset: bool) -> tuple[Question, ...]:  # fmt: skip
        return tuple(self._place(principal, a) for a in attributes(action, api_key, reset=reset))

    def _place(self, principal: str, attrs: Attributes) -> Question:
        """The question about the resource declaring attrs.name, in its namespace."""
        declared, kind = (
            self.declared,
            {"consumergroups": GROUPS, "topics": TOPICS}.get(attrs.resource),
        )
        if declared is not None and kind is not None and attrs.name:
            found = declared.locate(kind, attrs.name)
            if found is not None:
                return (
                    principal,
                    found.namespace,
                    Attributes(attrs.resource, attrs.verb, found.name),
                )
        return principal, self.namespace, attrs

    def _cached(self, question: Question) -> bool | None:
        hit = self._cache.get(question)
        if hit is None or hit[1] <= self._clock():
            return None
        return hit[0]

    def denied_now(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                   reset: bool) -> frozenset[Action] | None:  # fmt: skip
        if self.declared is not None and not self.declared.ready:
            return None
        refused = set()
        for action in actions:
            answers = [self._cached(q) for q in self._questions(principal, api_key, action, reset)]
            if any(answers):
                continue
            if None in answers:
                return None
            refused.add(action)
        return frozenset(refused)

    async def denied(self, principal: str, host: str, api_key: int, actions: frozenset[Action],
                     reset: bool) -> frozenset[Action]:  # fmt: skip
        declared = self.declared
        if declared is not None and not await declared.wait_ready(DECLARED_WAIT_S):
            log.error("the ConsumerGroups and Topics are not listed yet: refusing")
            return actions
        refused = set()
        for action in actions:
            allowed = False
            for question in self._questions(principal, api_key, action, reset):
                if await self._ask(question):
                    allowed = True
                    break
            if not allowed:
                refused.add(action)
        return frozenset(refused)

    async def _ask(self, question: Question) -> bool:
        cached = self._cached(question)
        if cached is not None:
            return cached
        pending = self._asking.get(question)
        if pending is not None:  # one review per question, however many ask at once
            return await asyncio.shield(pending)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._asking[question] = future
        try:
            allowed = await self._review(*question)
            self._remember(question, allowed)
        except KubeApiError as exc:
            log.error("cannot ask the API server (refusing): %s", exc)  # noqa: TRY400
            allowed = False
        finally:
            del self._asking[question]
        future.set_result(allowed)
        return allowed

    def _remember(self, question: Question, allowed: bool) -> None:
        """Cache an answer. Questions name whatever group a client asks about, so the
        cache is bounded: expired answers are dropped when it is full, and if it is still
        full (a client asking about made-up names faster than answers expire), all."""
        now = self._clock()
        if len(self._cache) >= MAX_CACHED_ANSWERS:
            self._cache = {q: hit for q, hit in self._cache.items() if hit[1] > now}
            if len(self._cache) >= MAX_CACHED_ANSWERS:
                self._cache.clear()
        self._cache[question] = (allowed, now + self.ttl_s)

    async def _review(self, principal: str, namespace: str, attrs: Attributes) -> bool:
        user, groups = subject(principal)
        resource = {"namespace": namespace, "verb": attrs.verb, "group": API_GROUP,
                    "resource": attrs.resource}  # fmt: skip
        if attrs.name:
            resource["name"] = attrs.name
        self.reviews += 1
        review = await self.api.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
             "spec": {"user": user, "groups": list(groups), "resourceAttributes": resource}},
        )  # fmt: skip
        return bool((review.get("status") or {}).get("allowed"))

    def start(self) -> None:
        if self.declared is not None:
            self.declared.start()

    async def close(self) -> None:
        if self.declared is not None:
            await self.declared.close()
        await self.api.close()


@dataclass(frozen=True, slots=True)
class AuthorizationSettings:
    """`acl_file`: Kafka ACLs from a file; else Kubernetes RBAC in `namespace` (the
    API server from `kubeconfig`, $KUBECONFIG or the pod's ServiceAccount)."""

    acl_file: Path | None = None
    namespace: str | None = None
    ttl_s: float = 10.0
    kubeconfig: Path | None = None
    by_resource: bool = True
    """Ask about the ConsumerGroup or Topic declaring a Kafka name, in its namespace
    (`declared.py`); False: always the Kafka name in `namespace`."""
    super_users: tuple[str, ...] = ()
    """Kafka's super.users: principals never asked about (the operator's identity, so it
    can manage ConsumerGroups and Topics in every namespace it watches)."""


def make_authorizer(settings: AuthorizationSettings | None) -> Authorizer | None:
    if settings is None:
        return None
    if settings.acl_file is not None:
        return AclFileAuthorizer(settings.acl_file)
    if not settings.namespace:
        raise ValueError("RBAC authorization needs the namespace whose Roles say who may do what")
    api = KubeApi.discover(settings.kubeconfig)
    declared = DeclaredNames(api) if settings.by_resource else None
    return RbacAuthorizer(api, settings.namespace, settings.ttl_s, declared=declared)
