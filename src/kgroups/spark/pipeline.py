"""`Pipeline`: one Spark application = one group member, for a blocking Spark driver.

The decisions are `loop.BatchLoop`'s (read its docstring for the protocol); this facade
runs it, with its member (`GroupMember`, or `ConsumerProtocolMember` under Kafka 4's
consumer protocol), on an event loop in a background thread, so that the
driver's main thread can block in `run()` and stop it from a signal handler. Spark's
work (reading a batch, the user's `process`) runs in worker threads meanwhile, and the
member heartbeats through it.

Metrics: the member's and the loop's (`kgroups_member_*`, `kgroups_spark_*`) go to a
prometheus_client registry (`registry`, default prometheus_client's). A Spark driver has
no place for them of its own (Spark's metrics system reports the JVM's jobs, and its
PrometheusServlet only those), so `metrics="HOST:PORT"` serves that registry at
http://HOST:PORT/metrics from the driver process (prometheus_client's
`start_http_server`, in a daemon thread); a driver that already serves a registry just
passes it as `registry`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY, start_http_server

from kgroups.client import ConsumerProtocolMember, GroupMember
from kgroups.client.sync import LoopThread
from kgroups.protocol.addresses import parse_host_port
from kgroups.spark.loop import BatchLoop, PipelineError, Progress, Transform
from kgroups.spark.sinks import Process

__all__ = ["Pipeline", "PipelineError", "Process", "Progress", "Transform"]


def _address(value: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(value, tuple):
        return value
    try:
        return parse_host_port(value, default_host="0.0.0.0", any_port=True)
    except ValueError as exc:
        raise ValueError(f"metrics address: {exc}") from None


class Pipeline:
    """Takes `BatchLoop`'s arguments (the member's options among them), and `metrics`:
    HOST:PORT (port 0: any) to serve the metrics on; see the module docstring."""

    def __init__(self, *, metrics: str | tuple[str, int] | None = None, **options: Any) -> None:
        host, port = _address(metrics) if metrics is not None else ("", 0)
        self._thread = LoopThread("kgroups-spark-loop")

        async def make() -> BatchLoop:
            return BatchLoop(**options)

        self.loop = self._thread.call(make())
        self._metrics_server: Any = None
        self.metrics_address: tuple[str, int] | None = None
        """Where the metrics are served (the port bound, if 0 was asked for)."""
        if metrics is not None:
            registry = options.get("registry") or REGISTRY
            try:
                self._metrics_server, _ = start_http_server(port, host, registry=registry)
            except OSError:
                self.close()
                raise
            bound = self._metrics_server.server_address
            self.metrics_address = (str(bound[0]), int(bound[1]))

    @property
    def member(self) -> GroupMember | ConsumerProtocolMember:
        return self.loop.member

    def start(self, timeout: float | None = None) -> None:
        self._thread.call(self.loop.start(timeout=timeout))

    def run(self) -> None:
        """Turn the loop until `stop()` (or the member fails, which raises)."""
        self._thread.call(self.loop.run())

    def run_once(self) -> Progress | None:
        return self._thread.call(self.loop.run_once())

    def stop(self) -> None:
        """Safe from a signal handler or any thread: the batch in flight finishes first."""
        self._thread.loop.call_soon_threadsafe(self.loop.stop)

    def close(self) -> None:
        """Leave the group (a batch in flight is waited for, within the rebalance timeout),
        then stop serving the metrics."""
        try:
            if not self._thread.loop.is_closed():
                try:
                    self._thread.call(self.loop.close())
                finally:
                    self._thread.close()
        finally:
            server, self._metrics_server = self._metrics_server, None
            if server is not None:
                server.shutdown()
                server.server_close()
