"""What the commands share: the paragraph help, HOST:PORT flags, `--bootstrap-server`,
the client's TLS and SASL from KGROUPS_* variables, and an admin call's exit code."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any, Literal

import typer

from kgroups.protocol.addresses import parse_host_port
from kgroups.security.client import ClientSecurity

PARAGRAPHS: Literal["markdown"] = "markdown"
"""Help from docstrings reads as paragraphs: their line breaks are the source's, not the
terminal's (a blank line still separates paragraphs)."""


def parse_address(value: str, default_port: int = 9092) -> tuple[str, int]:
    """`HOST:PORT` (or `HOST`, or `[v6]:PORT`) into a host and a port."""
    try:
        return parse_host_port(value, default_port=default_port, any_port=True)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


BootstrapOption = Annotated[
    str,
    typer.Option("--bootstrap-server", "--bootstrap",
                 help="The coordinator (or any Kafka broker), HOST:PORT."),
]  # fmt: skip
"""Every command names its coordinator as Kafka's tools do: `--bootstrap-server`."""


def client_security() -> ClientSecurity:
    """TLS and SASL for reaching the coordinator, from KGROUPS_* environment variables
    (see ClientSecurity.from_env): never passwords on a command line."""
    try:
        return ClientSecurity.from_env()
    except ValueError as exc:
        raise typer.BadParameter(f"KGROUPS_* security settings: {exc}") from exc


def run_admin(call: Coroutine[Any, Any, Any], done: str) -> Any:
    """Run one admin call; a Kafka error becomes a message and exit code 1."""
    from kgroups import admin

    try:
        result = asyncio.run(call)
    except admin.AdminError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except OSError as exc:
        typer.echo(f"error: cannot reach the coordinator: {exc}", err=True)
        raise typer.Exit(1) from exc
    if done:
        typer.echo(done)
    return result
