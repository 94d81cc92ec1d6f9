"""The `kgroups` command line: run a coordinator, manage topics, try assignors.

`kgroups coordinator` runs the group coordinator (Kafka wire protocol, SQLite or
PostgreSQL store; `kgroups store migrate` moves SQLite into PostgreSQL);
`kgroups topic create|partitions|list|delete` manage its topics through the Kafka admin
APIs, the same way any Kafka admin client can; `kgroups group
list|describe|reset-offsets|delete|delete-offsets` are Kafka's kafka-consumer-groups, for
kgroups or any Kafka cluster;
`kgroups assign` shows what an assignor would do; `kgroups sidecar` runs a member for an
application in any language, `kgroups operator` the Kubernetes operator, and `kgroups
credentials hash` writes SCRAM hashes for a credentials file.
"""

from __future__ import annotations

import typer

from kgroups.cli import credentials, members, operator, serve, store, topics
from kgroups.cli.options import PARAGRAPHS
from kgroups.groupcli.app import group_app

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__,
                  rich_markup_mode=PARAGRAPHS)  # fmt: skip
app.command()(serve.coordinator)
app.command()(members.assign)
app.command()(members.sidecar)
app.command()(operator.operator)
app.add_typer(topics.topic_app, name="topic")
app.add_typer(group_app, name="group")
app.add_typer(credentials.credentials_app, name="credentials")
app.add_typer(store.store_app, name="store")


def main() -> None:
    app()
