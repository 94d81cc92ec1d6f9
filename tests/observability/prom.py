"""A real Prometheus for tests: scraping kgroups' endpoints, answering PromQL.

The binaries come from Debian's package through tools/prometheus/fetch.sh (cached in
~/.cache/kgroups). `Prometheus` writes a prometheus.yml for static targets, runs the server
on a free loopback port with its TSDB in a temporary directory, and wraps the HTTP API
(query, query_range, series, targets). Every wait is bounded and `stop()` always ends the
process (SIGTERM, then SIGKILL).

    with Prometheus(tmp_path, {"coordinator": ["127.0.0.1:9404"]}) as prom:
        prom.targets()                      # every target scraped and up
        prom.query('kgroups_groups{state="Stable"}')
"""

from __future__ import annotations

import functools
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.integration.harness import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
FETCH = ROOT / "tools" / "prometheus" / "fetch.sh"


@functools.cache
def bin_dir() -> Path:
    """The directory holding `prometheus` and `promtool` (fetched on first use)."""
    done = subprocess.run(["bash", str(FETCH)], capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"tools/prometheus/fetch.sh failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.split()[-1])


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs promtool (check config, check rules, test rules, ...); the caller checks."""
    return subprocess.run([str(bin_dir() / "promtool"), *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, check=False)  # fmt: skip


class PromQLError(Exception):
    """The API answered status "error" (errorType "bad_data" for a bad expression)."""

    def __init__(self, error_type: str, error: str) -> None:
        super().__init__(f"{error_type}: {error}")
        self.error_type = error_type
        self.error = error


class _Exited(RuntimeError):
    """The server process ended while we waited for it."""


class Prometheus:
    """One Prometheus server scraping `targets` ({job name: ["host:port", ...]})."""

    def __init__(
        self,
        workdir: Path,
        targets: Mapping[str, Sequence[str]] | None = None,
        *,
        scrape_interval: str = "1s",
        rule_files: Sequence[Path] = (),
        evaluation_interval: str = "1s",
    ) -> None:
        self.workdir = workdir
        self.targets_by_job = {job: list(addrs) for job, addrs in (targets or {}).items()}
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.rule_files = list(rule_files)
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": self.scrape_interval,
                       "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": addrs}]}
                for job, addrs in self.targets_by_job.items()
            ],
        }  # fmt: skip

    def start(self, timeout: float = 30) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        for _ in range(3):  # another process may take the free port before Prometheus binds it
            self.port = free_port()
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    [str(bin_dir() / "prometheus"),
                     f"--config.file={self.config_path}",
                     f"--web.listen-address=127.0.0.1:{self.port}",
                     f"--storage.tsdb.path={self.workdir / 'data'}",
                     "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                )  # fmt: skip
            try:
                wait_until(self._ready, timeout, "Prometheus to be ready")
                return
            except _Exited:
                if "address already in use" not in self.log():
                    raise
            except BaseException:
                self.stop()
                raise
        raise RuntimeError(f"Prometheus could not bind a port:\n{self.log()[-3000:]}")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise _Exited(f"prometheus exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- the HTTP API ----------------------------------------------------------------------

    def api(self, path: str, params: Mapping[str, str] | Sequence[tuple[str, str]]) -> Any:
        """POSTs form parameters to /api/v1/<path>; returns `data` or raises PromQLError."""
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/{path}", data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                answer = json.load(resp)
        except urllib.error.HTTPError as e:  # 400/422/503 still carry a JSON error body
            try:
                answer = json.load(e)
            except ValueError:
                raise e from None
        if answer.get("status") != "success":
            raise PromQLError(answer.get("errorType", "?"), answer.get("error", "?"))
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query; the vector's samples (or a one-element list for a scalar)."""
        params = {"query": expr} | ({} if at is None else {"time": f"{at:.3f}"})
        data = self.api("query", params)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.api("query_range", {"query": expr, "start": f"{start:.3f}",
                                        "end": f"{end:.3f}", "step": f"{step}"})  # fmt: skip
        result: list[dict[str, Any]] = data["result"]
        return result

    def series(self, match: str, start: float | None = None) -> list[dict[str, str]]:
        params = [("match[]", match)] + ([] if start is None else [("start", f"{start:.3f}")])
        result: list[dict[str, str]] = self.api("series", params)
        return result

    def targets(self, timeout: float = 30) -> list[dict[str, Any]]:
        """The active targets, once every configured one has been scraped and is up."""
        expected = sum(len(addrs) for addrs in self.targets_by_job.values())

        def all_up() -> tuple[list[dict[str, Any]]] | None:
            url = f"{self.url}/api/v1/targets?state=active"
            with urllib.request.urlopen(url, timeout=10) as resp:
                active: list[dict[str, Any]] = json.load(resp)["data"]["activeTargets"]
            up = [t for t in active if t["health"] == "up"]
            return (active,) if len(up) == expected and len(active) == expected else None

        try:
            found: tuple[list[dict[str, Any]]] = wait_until(all_up, timeout, "every target up", 0.2)
        except AssertionError:
            with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as resp:
                state = [(t["scrapeUrl"], t["health"], t["lastError"])
                         for t in json.load(resp)["data"]["activeTargets"]]  # fmt: skip
            raise TimeoutError(f"targets not all up after {timeout}s: {state}") from None
        return found[0]

    def wait_for(self, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Polls an instant query until it returns samples (e.g. once a scrape landed)."""
        result: list[dict[str, Any]] = wait_until(lambda: self.query(expr), timeout, expr, poll=0.2)
        return result
