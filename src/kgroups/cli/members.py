"""`kgroups assign` (an assignor run on JSON) and `kgroups sidecar` (a member for an
application in another process)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from kgroups.cli.options import BootstrapOption, client_security, parse_address
from kgroups.protocol.groups import MEMBER


def assign(
    strategy: Annotated[
        str, typer.Option(help="Assignor name: range, roundrobin, sticky, cooperative-sticky, ...")
    ],
    input_path: Annotated[
        str, typer.Option("--input", help="JSON file describing the group, or - for stdin.")
    ] = "-",
) -> None:
    """Print the assignment an assignor would make for a group described in JSON.

    Input: {"topics": {"t": 3}, "members": {"m1": {"topics": ["t"], "owned": {"t": [0]},
    "generation": 1, "instance_id": null, "rack": null}}, "replicas": 1}.
    Output: {"assignment": {"m1": {"t": [0, 1, 2]}}}.
    """
    import json

    from kgroups.client import assignors
    from kgroups.client.assignors.jsonio import SpecError, assignment_to_json, group_from_json

    try:
        text = sys.stdin.read() if input_path == "-" else Path(input_path).read_text()
    except OSError as exc:
        typer.echo(f"error: cannot read {input_path}: {exc.strerror}", err=True)
        raise typer.Exit(2) from exc
    try:
        group = group_from_json(json.loads(text))
        assignor = assignors.get(strategy)
        result = assignor.assign(group)
    except json.JSONDecodeError as exc:
        typer.echo(f"error: the input is not JSON: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (SpecError, assignors.AssignorError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(json.dumps(assignment_to_json(group, result), sort_keys=True))


def sidecar(
    group: Annotated[str, typer.Option(help="Consumer group id.")],
    topics: Annotated[str, typer.Option(help="Topics to subscribe to, comma-separated.")],
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    assignment_file: Annotated[
        Path | None, typer.Option(help="Write the assignment here (atomically) on every change.")
    ] = None,
    http: Annotated[
        str | None,
        typer.Option(
            help="Serve GET /assignment, POST /revoked, POST /commit, GET /healthz and "
            "GET /metrics (Prometheus) on HOST:PORT (port 0: any)."
        ),
    ] = None,
    strategy: Annotated[
        str, typer.Option(help="Assignors in preference order, comma-separated.")
    ] = "range,cooperative-sticky",
    instance_id: Annotated[str | None, typer.Option(help="group.instance.id (static).")] = None,
    rack: Annotated[str | None, typer.Option(help="client.rack")] = None,
    session_timeout_ms: Annotated[int, typer.Option()] = MEMBER.session_timeout_ms,
    heartbeat_interval_ms: Annotated[int, typer.Option()] = MEMBER.heartbeat_interval_ms,
    rebalance_timeout_ms: Annotated[int, typer.Option()] = MEMBER.rebalance_timeout_ms,
    metadata_max_age_ms: Annotated[
        int,
        typer.Option(
            help="How often the leader checks the topics' partition counts "
            "(metadata.max.age.ms); a change triggers a rebalance."
        ),
    ] = MEMBER.metadata_max_age_ms,
    revoke_timeout_ms: Annotated[
        int | None,
        typer.Option(
            help="Release revoked partitions after this long without POST /revoked "
            "(default with --http: wait for the acknowledgement, heartbeating meanwhile; "
            "past the rebalance timeout they are reported lost. Without --http: 1 s)."
        ),
    ] = None,
    close_timeout_ms: Annotated[
        int,
        typer.Option(
            help="On SIGTERM, wait at most this long for POST /revoked before leaving "
            "the group (the application may be shutting down too; Kafka's close timeout)."
        ),
    ] = 10_000,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Also serve only GET /metrics and /healthz on HOST:PORT, for Prometheus "
            "(--http, which takes commits, can then stay on 127.0.0.1)."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option()] = "INFO",
    group_protocol: Annotated[
        str,
        typer.Option(
            help="classic, or consumer: Kafka 4's protocol (KIP-848), where the coordinator "
            "assigns (--strategy, --heartbeat-interval-ms and --metadata-max-age-ms then do "
            "not apply; --session-timeout-ms is the coordinator's "
            "group.consumer.session.timeout.ms, which the member must not outlive silent)."
        ),
    ] = "classic",
    server_assignor: Annotated[
        str | None,
        typer.Option(
            help="With --group-protocol consumer: uniform or range (group.remote.assignor)."
        ),
    ] = None,
) -> None:
    """Run a group member for an application in another process (file and HTTP API)."""
    from kgroups.client import ConsumerProtocolMember, GroupMember
    from kgroups.client.sidecar import Sidecar

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)  # fmt: skip
    if assignment_file is None and http is None:
        raise typer.BadParameter("give --assignment-file, --http or both")
    address = parse_address(http) if http is not None else None
    if revoke_timeout_ms is None and http is None:
        revoke_timeout_ms = 1000
    security = client_security()

    if group_protocol not in ("classic", "consumer"):
        raise typer.BadParameter("--group-protocol must be classic or consumer")

    def make_member(listener: Sidecar) -> GroupMember | ConsumerProtocolMember:
        if group_protocol == "consumer":
            return ConsumerProtocolMember(
                bootstrap, group, [t for t in topics.split(",") if t], instance_id=instance_id,
                server_assignor=server_assignor, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms, listener=listener, security=security,
            )  # fmt: skip
        return GroupMember(
            bootstrap, group, [t for t in topics.split(",") if t],
            assignors=[s for s in strategy.split(",") if s], instance_id=instance_id, rack=rack,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, metadata_max_age_ms=metadata_max_age_ms,
            listener=listener, registry=listener.registry, security=security,
        )  # fmt: skip

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        revoke = None if revoke_timeout_ms is None else revoke_timeout_ms / 1000
        car = Sidecar(make_member, assignment_file=assignment_file, http=address,
                      revoke_timeout=revoke, close_timeout=close_timeout_ms / 1000,
                      metrics=parse_address(metrics) if metrics else None)  # fmt: skip
        return await car.run(stop)

    try:
        code = asyncio.run(run())
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(code)
