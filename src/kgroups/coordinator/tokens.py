"""OAUTHBEARER tokens at run time: the issuer's keys kept current, and TokenReviews cached.

On Kubernetes a workload's identity is its ServiceAccount, and the kubelet mounts it a
short-lived token for any audience the pod asks for (a projected token). So a member
authenticates with OAUTHBEARER and that token; the coordinator verifies it itself, with the
keys the API server publishes for it (`/openid/v1/jwks`, the issuer from
`/.well-known/openid-configuration`), or with a JWKS file for any other OIDC issuer:

* keys are fetched at start and every `refresh_s`; a token naming a key id the set lacks
  makes the authentication wait for a fetch (at most one per MIN_REFETCH_S), so a rotated
  signing key is picked up at its first use rather than failing it (Kafka's resolver
  fails that first authentication and refreshes for the next);
* a JWT stays valid until it expires even if its ServiceAccount or pod is deleted. With
  `review`, each new token is also shown to the API server (a TokenReview with the
  accepted audiences), which knows about deletions; answers are cached for
  `review_cache_s`, and a token the API server cannot be asked about is refused (fail
  closed). Re-authentication (KIP-368, `--max-reauth-ms`) bounds how long an
  already-authenticated connection outlives a revocation.

Only what cannot be known without I/O waits: `prepare` says whether an authentication must
wait (and for what); `verify`, called by the sans-IO mechanism, only reads the caches.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from kgroups.coordinator.kubeapi import KubeApi, KubeApiError
from kgroups.files import Reloading
from kgroups.security import jwt
from kgroups.security.jwt import InvalidToken, KeySet, TokenPolicy, UnknownKey, VerifiedToken
from kgroups.security.oauthbearer import NAME, parse_initial_response
from kgroups.tasks import Tasks

log = logging.getLogger("kgroups.coordinator.tokens")

MIN_REFETCH_S = 10.0
"""A token with an unknown key id triggers a key fetch at most this often."""
MAX_REVIEWS_CACHED = 10_000
JWKS_PATH = "/openid/v1/jwks"
DISCOVERY_PATH = "/.well-known/openid-configuration"
REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass(frozen=True, slots=True)
class OAuthBearerSettings:
    """How OAUTHBEARER tokens are verified."""

    audiences: tuple[str, ...] = ("kgroups",)
    """A token must be for one of these (its `aud`): never the API server's own audience,
    or any token a pod has could be replayed here."""
    jwks_file: Path | None = None
    """The issuer's keys as a JWKS file (reloaded on change); None: the API server's."""
    issuer: str | None = None
    """The `iss` tokens must have; None: the API server's (its discovery document), or
    any issuer with a JWKS file."""
    review: bool = False
    review_cache_s: float = 30.0
    skew_s: int = jwt.DEFAULT_SKEW_S
    refresh_s: float = 300.0
    kubeconfig: Path | None = None

    def check(self) -> None:
        if not self.audiences or not all(self.audiences):
            raise ValueError("OAUTHBEARER needs at least one audience tokens must be for")
        if self.review_cache_s <= 0 or self.refresh_s <= 0:
            raise ValueError("OAUTHBEARER review cache and key refresh times must be positive")
        if self.skew_s < 0:
            raise ValueError("OAUTHBEARER clock skew must be 0 or more")

    @property
    def uses_api_server(self) -> bool:
        return self.jwks_file is None or self.review


@dataclass(frozen=True, slots=True)
class _Review:
    refused: str | None
    until: float


class BearerTokens:
    """The coordinator's OAUTHBEARER verifier (one per server, shared by listeners)."""

    def __init__(
        self,
        settings: OAuthBearerSettings,
        *,
        api: KubeApi | None = None,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings.check()
        self.settings = settings
        self._wall_clock = wall_clock
        self._clock = clock
        self._api = api
        if api is None and settings.uses_api_server:
            self._api = KubeApi.discover(settings.kubeconfig)
        self._file: Reloading[KeySet] | None = None
        path = settings.jwks_file
        if path is not None:
            self._file = Reloading(
                f"JWKS {path}", [path], lambda: _usable(KeySet.parse(path.read_bytes()))
            )
        self._keys = self._file.value if self._file else KeySet(())
        self._issuer = settings.issuer
        self._fetched_at: float | None = None
        self._fetch_error: str | None = "the keys have not been fetched yet"
        self._tasks = Tasks("service-account-tokens")
        """Key fetches and TokenReviews, each shared by every connection waiting on it (a
        crash is logged; the waiting connections see it through their await)."""
        self._fetching: asyncio.Task[None] | None = None
        self._reviews: dict[bytes, _Review] = {}
        self._reviewing: dict[bytes, asyncio.Task[None]] = {}
        self.fetches = 0
        self.reviews = 0

    # -- what the mechanism calls (sync, caches only) ------------------------------------

    def policy(self) -> TokenPolicy:
        s = self.settings
        return TokenPolicy(frozenset(s.audiences), self._issuer, s.skew_s)

    def verify(self, token: str, now_ms: int) -> VerifiedToken:
        try:
            verified = jwt.verify(token, self._keys, self.policy(), now_ms)
        except UnknownKey as exc:
            if self._file is None and self._fetch_error is not None:
                raise InvalidToken(f"{exc}; the API server's keys: {self._fetch_error}") from None
            raise
        if self.settings.review:
            review = self._reviews.get(_digest(token))
            if review is None or review.until <= self._clock():
                raise InvalidToken("the API server could not be asked to review the token")
            if review.refused is not None:
                raise InvalidToken(review.refused)
        return verified

    # -- what the server awaits before the mechanism runs --------------------------------

    def prepare(self, mechanism: str | None, auth_bytes: bytes) -> Awaitable[None] | None:
        """What must be fetched or asked before `verify` can answer for this
        SaslAuthenticate token; None: nothing (the common case, answered at once)."""
        if mechanism != NAME:
            return None
        try:
            token, _, _ = parse_initial_response(auth_bytes)
        except ValueError:
            return None
        now_ms = int(self._wall_clock() * 1000)
        try:
            jwt.verify(token, self._keys, self.policy(), now_ms)
        except UnknownKey:
            if self._may_refetch():
                return self._refetch_then_review(token)
            return None
        except InvalidToken:
            return None  # refused without asking anyone
        if self.settings.review and not self._reviewed(token):
            return self._review(token)
        return None

    def _may_refetch(self) -> bool:
        if self._file is not None:
            return False
        last = self._fetched_at
        return last is None or self._clock() - last >= MIN_REFETCH_S

    def _reviewed(self, token: str) -> bool:
        review = self._reviews.get(_digest(token))
        return review is not None and review.until > self._clock()

    async def _refetch_then_review(self, token: str) -> None:
        await self.refresh()
        if not self.settings.review:
            return
        try:
            jwt.verify(token, self._keys, self.policy(), int(self._wall_clock() * 1000))
        except InvalidToken:
            return
        await self._review(token)

    # -- the key set ---------------------------------------------------------------------

    @property
    def from_file(self) -> bool:
        return self._file is not None

    def reload(self) -> None:
        """Re-read a JWKS file if it changed (the server's file poll calls this)."""
        if self._file is not None:
            self._file.reload()
            self._keys = self._file.value

    async def refresh(self) -> None:
        """Fetch the API server's keys now (one fetch at a time; callers share it)."""
        if self._file is not None:
            return
        if self._fetching is None:
            self._fetching = self._tasks.spawn("fetch-keys", self._fetch())
        task = self._fetching
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._fetching is task:
                self._fetching = None

    async def _fetch(self) -> None:
        assert self._api is not None
        self._fetched_at = self._clock()
        self.fetches += 1
        try:
            if self.settings.issuer is None:
                discovery = await self._api.get(DISCOVERY_PATH)
                issuer = discovery.get("issuer")
                if not isinstance(issuer, str) or not issuer:
                    raise KubeApiError(f"{DISCOVERY_PATH}: no issuer")
                self._issuer = issuer
            keys = _usable(KeySet.of(await self._api.get(JWKS_PATH)))
        except (KubeApiError, ValueError) as exc:
            self._fetch_error = str(exc)
            log.error("cannot fetch the service-account issuer's keys: %s", exc)  # noqa: TRY400
            return
        if keys.keys != self._keys.keys:
            log.info("service-account issuer %s: %d verification keys (%s)", self._issuer,
                     len(keys.keys), ", ".join(str(k.kid) for k in keys.keys))  # fmt: skip
        self._keys, self._fetch_error = keys, None

    async def run(self) -> None:
        """Keep the API server's keys current until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.settings.refresh_s)

    # -- TokenReview ---------------------------------------------------------------------

    async def _review(self, token: str) -> None:
        digest = _digest(token)
        task = self._reviewing.get(digest)
        if task is None:
            task = self._tasks.spawn("token-review", self._ask(token, digest))
            self._reviewing[digest] = task
            task.add_done_callback(lambda _: self._reviewing.pop(digest, None))
        await asyncio.shield(task)

    async def _ask(self, token: str, digest: bytes) -> None:
        assert self._api is not None
        self.reviews += 1
        try:
            answer = await self._api.create(REVIEW_PATH, {
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": list(self.settings.audiences)},
            })  # fmt: skip
        except KubeApiError as exc:
            log.error("cannot ask the API server to review a token (refusing): %s", exc)  # noqa: TRY400
            return
        status = answer.get("status") or {}
        refused = None
        if not status.get("authenticated"):
            error = status.get("error") or "not authenticated"
            refused = f"the API server does not accept the token: {error}"
        if len(self._reviews) >= MAX_REVIEWS_CACHED:
            now = self._clock()
            self._reviews = {d: r for d, r in self._reviews.items() if r.until > now}
            if len(self._reviews) >= MAX_REVIEWS_CACHED:
                self._reviews.clear()
        self._reviews[digest] = _Review(refused, self._clock() + self.settings.review_cache_s)

    async def close(self) -> None:
        await self._tasks.close()
        if self._api is not None:
            await self._api.close()


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _usable(keys: KeySet) -> KeySet:
    for why in keys.skipped:
        log.warning("a key the issuer publishes cannot be used: %s", why)
    return keys
