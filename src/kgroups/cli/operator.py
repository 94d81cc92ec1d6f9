"""`kgroups operator`: the Kubernetes operator (kopf), imported only when it runs."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer

from kgroups.cli.options import parse_address


def operator(
    coordinator: Annotated[
        str,
        typer.Option(
            "--bootstrap-server",
            "--coordinator",
            help="The kgroups coordinator's Kafka address, HOST:PORT.",
        ),
    ] = "127.0.0.1:9092",
    namespace: Annotated[
        list[str] | None,
        typer.Option(help="Namespace to watch (repeatable; default: default)."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
    liveness: Annotated[
        str | None,
        typer.Option(
            help="Serve kopf's liveness probe at this URL, e.g. http://0.0.0.0:8080/healthz."
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(help="Serve the operator's Prometheus metrics at http://HOST:PORT/metrics."),
    ] = None,
) -> None:
    """Run the operator: Topics and ConsumerGroups (kgroups.io/v1alpha1) reconciled against
    the coordinator, live group state mirrored into their status. Credentials come from the
    pod's service account or from KUBECONFIG."""
    from kgroups.operator.run import run

    if namespace and all_namespaces:
        raise typer.BadParameter("use --namespace or --all-namespaces, not both")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    address = parse_address(coordinator)
    namespaces = namespace or ([] if all_namespaces else ["default"])
    asyncio.run(
        run(
            address,
            namespaces=namespaces,
            clusterwide=all_namespaces,
            liveness=liveness,
            metrics=parse_address(metrics) if metrics else None,
        )
    )
