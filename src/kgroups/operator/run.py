"""Run the operator: kopf with kgroups' handlers, settings and storage names.

kopf's own state (diff base, handler progress, finalizer) is kept under the `kgroups.io`
prefix rather than kopf's default, so that another kopf operator watching the same
objects cannot be confused with this one. Peering is off (one replica; the chart runs a
single operator pod with the Recreate strategy).
"""

from __future__ import annotations

import asyncio
import logging
import threading

import kopf
from kopf._cogs.clients import errors as kopf_errors

from kgroups.exposition import HttpEndpoints, metrics_route
from kgroups.files import say_why_stopped
from kgroups.operator.handlers import MIRROR_ID, register
from kgroups.operator.metrics import OperatorMetrics, TimedAdmin, time_patches
from kgroups.security.client import ClientSecurity

FINALIZER = "kgroups.io/finalizer"


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.persistence.finalizer = FINALIZER
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kgroups.io")
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kgroups.io", key="last-handled-configuration"
    )
    s.watching.server_timeout = 60
    s.watching.client_timeout = 90
    s.execution.max_workers = 4
    s.execution.default_backoff = 5  # unexpected errors; expected ones set their own delay
    s.posting.level = logging.WARNING  # handler chatter stays in logs; Events are ours
    s.networking.error_backoffs = [1, 2, 5, 10]
    return s


class _QuietTimer(logging.Filter):
    """Drops the status timer's once-a-second "succeeded" line (failures still log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (MIRROR_ID in record.getMessage() and "succeeded" in record.getMessage())


async def run(
    coordinator: tuple[str, int],
    *,
    namespaces: list[str],
    clusterwide: bool,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
    liveness: str | None = None,
    metrics: tuple[str, int] | None = None,
    operator_metrics: OperatorMetrics | None = None,
    security: ClientSecurity | None = None,
) -> None:
    """Run until `stop_flag`; `metrics` serves /metrics there (`operator_metrics`, given
    or made here)."""
    logging.getLogger("kopf.objects").addFilter(_QuietTimer())
    registry = kopf.OperatorRegistry()
    facts = operator_metrics or OperatorMetrics()
    # The operator's own identity towards the coordinator (KGROUPS_* settings).
    admin = TimedAdmin(*coordinator, facts, client_id="kgroups-operator",
                       security=security or ClientSecurity.from_env())  # fmt: skip
    register(registry, admin, [] if clusterwide else namespaces, facts)
    endpoints = HttpEndpoints({"/metrics": metrics_route(facts.registry)})
    try:
        if metrics is not None:
            await endpoints.serve(*metrics)
        with time_patches(facts):
            await _operate(registry, clusterwide, namespaces, stop_flag, ready_flag, liveness)
    finally:
        await endpoints.close()
        await admin.close()


async def _operate(
    registry: kopf.OperatorRegistry,
    clusterwide: bool,
    namespaces: list[str],
    stop_flag: asyncio.Event | threading.Event | None,
    ready_flag: asyncio.Event | threading.Event | None,
    liveness: str | None,
) -> None:
    try:
        await kopf.operator(
            registry=registry,
            settings=settings(),
            standalone=True,
            clusterwide=clusterwide,
            namespaces=namespaces,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
            liveness_endpoint=liveness,
        )
    except kopf_errors.APIError as exc:  # e.g. a watch refused (403): kopf stops
        say_why_stopped(f"operator stopped: {exc.args[0] if exc.args else exc}")
        raise
