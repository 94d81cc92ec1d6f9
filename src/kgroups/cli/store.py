"""`kgroups store migrate`: move a single-replica SQLite install onto PostgreSQL.

Like `kgroups coordinator`, a command of the coordinator's side: it opens the stores
themselves (inside the command, so other commands never load the coordinator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kgroups.cli.options import PARAGRAPHS

store_app = typer.Typer(
    no_args_is_help=True, help="The coordinator's store.", rich_markup_mode=PARAGRAPHS
)


@store_app.command("migrate")
def migrate(
    to: Annotated[
        str,
        typer.Option(
            envvar="KGROUPS_STORE",
            help="The PostgreSQL store to fill: postgresql://USER[:PASSWORD]@HOST:PORT/DB "
            "(PGPASSWORD and the other libpq settings apply). It must hold no records.",
        ),
    ],
    data_dir: Annotated[
        Path, typer.Option(help="The SQLite store to copy (the coordinator's --data-dir).")
    ] = Path(".kgroups"),
    shards: Annotated[
        int, typer.Option(help="Shards of the new store (fixed from now on; Kafka's 50).")
    ] = 50,
) -> None:
    """Copy every topic, group, group setting and committed offset, and the cluster id,
    from a stopped coordinator's SQLite store into an empty PostgreSQL store, in one
    transaction, then read them back to check. Start the coordinators with --store after."""
    from kgroups.cli.serve import checked_shards, checked_store_url
    from kgroups.coordinator.store import StoreError
    from kgroups.coordinator.store.migrate import migrate as copy

    url = checked_store_url(to)
    assert url is not None
    try:
        copied = copy(data_dir, url, shards=checked_shards(shards))
    except StoreError as exc:
        typer.echo(f"kgroups store migrate: {exc}", err=True)
        raise typer.Exit(1) from None
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(copied.records.items())) or "nothing"
    typer.echo(f"copied {counts}; cluster id {copied.cluster_id}")
