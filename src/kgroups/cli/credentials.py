"""`kgroups credentials hash`: a credentials file entry holding SCRAM hashes, no password."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kgroups.cli.options import PARAGRAPHS

credentials_app = typer.Typer(
    no_args_is_help=True, help="Users for PLAIN and SCRAM.", rich_markup_mode=PARAGRAPHS
)


@credentials_app.command("hash")
def credentials_hash(
    username: str,
    iterations: Annotated[
        int, typer.Option(help="PBKDF2 iterations (Kafka's range: 4096 to 16384).")
    ] = 8192,
) -> None:
    """Print USERNAME's entry for the --credentials file with SCRAM-SHA-256 and -512 hashes
    of a password read from standard input (hidden when typed): the Secret then holds no
    password, yet PLAIN and both SCRAMs work."""
    from kgroups.security import credentials

    if sys.stdin.isatty():
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise typer.BadParameter("an empty password")
    try:
        scram = {m: credentials.scram_credential(password, m, iterations=iterations)
                 for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(credentials.render_user(username, scram), nl=False)
