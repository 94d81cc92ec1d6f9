"""`kgroups topic`: create, grow, list and delete topics over the Kafka admin APIs (any
Kafka admin client could do the same)."""

from __future__ import annotations

from typing import Annotated

import typer

from kgroups.cli.options import (
    PARAGRAPHS,
    BootstrapOption,
    client_security,
    parse_address,
    run_admin,
)

topic_app = typer.Typer(
    no_args_is_help=True, help="Create, list and delete topics.", rich_markup_mode=PARAGRAPHS
)


@topic_app.command("create")
def topic_create(
    name: str,
    partitions: Annotated[int, typer.Option(min=1, help="Number of partitions.")] = 1,
    bootstrap: BootstrapOption = "127.0.0.1:9092",
) -> None:
    """Create a topic (CreateTopics), or fail if it exists."""
    from kgroups import admin

    host, port = parse_address(bootstrap)
    run_admin(
        admin.create_topic(host, port, name, partitions, security=client_security()),
        f"created topic {name} with {partitions} partitions",
    )


@topic_app.command("partitions")
def topic_partitions(
    name: str,
    partitions: Annotated[int, typer.Option(min=1, help="New total number of partitions.")],
    bootstrap: BootstrapOption = "127.0.0.1:9092",
) -> None:
    """Grow a topic to N partitions (CreatePartitions)."""
    from kgroups import admin

    host, port = parse_address(bootstrap)
    run_admin(
        admin.create_partitions(host, port, name, partitions, security=client_security()),
        f"topic {name} now has {partitions} partitions",
    )


@topic_app.command("list")
def topic_list(bootstrap: BootstrapOption = "127.0.0.1:9092") -> None:
    """List topics and their partition counts (Metadata)."""
    from kgroups import admin

    host, port = parse_address(bootstrap)
    for name, count in run_admin(admin.list_topics(host, port, security=client_security()), ""):
        typer.echo(f"{name}\t{count}")


@topic_app.command("delete")
def topic_delete(name: str, bootstrap: BootstrapOption = "127.0.0.1:9092") -> None:
    """Delete a topic and every committed offset for it (DeleteTopics)."""
    from kgroups import admin

    host, port = parse_address(bootstrap)
    run_admin(
        admin.delete_topic(host, port, name, security=client_security()), f"deleted topic {name}"
    )
