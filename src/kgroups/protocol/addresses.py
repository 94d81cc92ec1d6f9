"""HOST:PORT, the one way every kgroups command, member and listener reads an address.

Kafka's spelling: `host:port`, `[v6]:port`, and a bootstrap list separated by commas.
An empty host means the machine itself (`default_host`). Callers differ only in whether a
bare host takes a default port (a listener's 9092) and whether port 0 (any free port)
makes sense (a listener, a metrics endpoint: yes; a server to connect to: no).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["parse_bootstrap", "parse_host_port"]


def parse_host_port(
    value: str,
    *,
    default_port: int | None = None,
    default_host: str = "127.0.0.1",
    any_port: bool = False,
) -> tuple[str, int]:
    """`value` as (host, port); ValueError naming `value` if it is not HOST:PORT.

    `default_port`: the port of a bare HOST (None: a port is required); `any_port`: port 0
    (bind to any free port) is allowed."""
    text = value.strip()
    if text.startswith("["):  # [v6] or [v6]:port
        host, bracket, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
        if not bracket or (rest and port is None):
            raise ValueError(f"{value!r} is not HOST:PORT")
    else:  # host, host:port (an unbracketed v6 address takes its last colon as Kafka does)
        host, sep, after = text.rpartition(":")
        port = after if sep else None
        host = host if sep else text
    if port is None:
        if default_port is None:
            raise ValueError(f"{value!r} is not HOST:PORT")
        port = str(default_port)
    lowest = 0 if any_port else 1
    if not port.isdigit() or not lowest <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host or default_host, int(port)


def parse_bootstrap(value: str | Sequence[str]) -> list[tuple[str, int]]:
    """Kafka's bootstrap list (`h1:9092,h2:9093`, or a sequence of entries) as (host,
    port) pairs; ValueError if it is empty or an entry is not HOST:PORT."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = [parse_host_port(item) for item in items if item.strip()]
    if not out:
        raise ValueError("no bootstrap address (HOST:PORT)")
    return out
