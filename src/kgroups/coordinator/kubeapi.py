"""Just enough of a Kubernetes API client for the coordinator: POST a review, GET keys,
list and watch the resources that declare Kafka names (`declared.py`).

The coordinator asks the API server SubjectAccessReviews and TokenReviews, and reads the
service-account issuer's keys (to verify OAUTHBEARER tokens). It runs in a
pod (the ServiceAccount's token and CA are mounted, KUBERNETES_SERVICE_HOST is set) or
beside a cluster with a kubeconfig (the current context's server, CA, and a client
certificate or a bearer token). The in-cluster token file is read at every request: the
kubelet rotates projected tokens. aiohttp is imported at the first request: a coordinator
that never asks the API server (most) starts without it.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import aiohttp

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT_S = 10.0
WATCH_S = 300
"""How long one watch request lasts before it is resumed."""


class KubeApiError(Exception):
    """The API server could not be asked, or refused the request."""


class WatchExpired(KubeApiError):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def _data_file(directory: Path, name: str, b64: str) -> Path:
    path = directory / name
    path.write_bytes(base64.b64decode(b64))
    path.chmod(0o600)
    return path


@dataclass
class KubeApi:
    server: str
    ssl_context: ssl.SSLContext
    token: str | None = None
    token_file: Path | None = None
    _session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @classmethod
    def in_cluster(cls) -> KubeApi:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        ctx = ssl.create_default_context(cafile=SA_DIR / "ca.crt")
        return cls(f"https://{host}:{port}", ctx, token_file=SA_DIR / "token")

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeApi:
        """The current context of a kubeconfig (client certificates or a token)."""
        config: dict[str, Any] = yaml.safe_load(path.read_text())
        context_name = config.get("current-context")
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        if context_name not in contexts:
            raise KubeApiError(f"{path}: no current context")
        context = contexts[context_name]
        cluster = {c["name"]: c["cluster"] for c in config["clusters"]}[context["cluster"]]
        user = {u["name"]: u["user"] for u in config["users"]}[context["user"]]
        # Inline certificates go to files only while ssl reads them (it reads them at once).
        with tempfile.TemporaryDirectory(prefix="kgroups-kubeconfig-") as tmp:
            keep = Path(tmp)
            ca = cluster.get("certificate-authority")
            if "certificate-authority-data" in cluster:
                ca = _data_file(keep, "ca.crt", cluster["certificate-authority-data"])
            ctx = ssl.create_default_context(cafile=ca)
            cert, key = user.get("client-certificate"), user.get("client-key")
            if "client-certificate-data" in user:
                cert = _data_file(keep, "client.crt", user["client-certificate-data"])
                key = _data_file(keep, "client.key", user["client-key-data"])
            if cert is not None:
                ctx.load_cert_chain(cert, key)
        token_file = Path(user["tokenFile"]) if user.get("tokenFile") else None
        return cls(cluster["server"].rstrip("/"), ctx, user.get("token"), token_file)

    @classmethod
    def discover(cls, kubeconfig: Path | None) -> KubeApi:
        """A kubeconfig if given (or $KUBECONFIG), else the pod's ServiceAccount."""
        path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG")
                              else None)  # fmt: skip
        if path is not None:
            return cls.from_kubeconfig(path)
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            return cls.in_cluster()
        raise KubeApiError("no kubeconfig and not in a pod: cannot reach an API server")

    def _headers(self) -> dict[str, str]:
        token = self.token
        if self.token_file is not None:
            token = self.token_file.read_text().strip()
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `path` (e.g. a review) and return the object the server made."""
        return await self._call("POST", path, body)

    async def get(self, path: str) -> dict[str, Any]:
        """GET `path` as JSON (e.g. the service-account issuer's keys)."""
        return await self._call("GET", path, None)

    async def watch(self, path: str, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        """The watch events of `path` from `resource_version`, until the server ends the
        watch (resume from the last event's version) or it expires (WatchExpired)."""
        import aiohttp

        session = self._session
        if session is None:
            session = self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)
            )
        params = {"watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_S)}  # fmt: skip
        try:
            async with session.get(
                self.server + path, params=params, ssl=self.ssl_context,
                headers=self._headers(), timeout=aiohttp.ClientTimeout(sock_read=WATCH_S + 30),
            ) as response:  # fmt: skip
                if response.status == 410:
                    raise WatchExpired(f"{path}: 410 Gone")
                if response.status >= 300:
                    raise KubeApiError(f"{path}: {response.status} {await response.text()}")
                async for line in response.content:
                    if not line.strip():
                        continue
                    event: dict[str, Any] = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        if status.get("code") == 410:
                            raise WatchExpired(f"{path}: {status.get('message', 'expired')}")
                        raise KubeApiError(f"{path}: {status.get('message', status)}")
                    yield event
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise KubeApiError(f"{path}: {exc or type(exc).__name__}") from exc

    async def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        try:
            async with self._session.request(
                method, self.server + path, json=body, ssl=self.ssl_context,
                headers=self._headers(),
            ) as response:  # fmt: skip
                answer: dict[str, Any] = await response.json(content_type=None)
                if response.status >= 300:
                    raise KubeApiError(f"{path}: {response.status} {answer.get('message', '')}")
                return answer
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise KubeApiError(f"{path}: {exc or type(exc).__name__}") from exc
