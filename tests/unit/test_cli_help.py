"""`--help` reads as paragraphs: a docstring's line breaks are where the source wrapped, not
sentence ends, so on a wide terminal each paragraph comes out on one line."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from kgroups.cli import app
from kgroups.kubectl.app import app as plugin


def words(text: str) -> str:
    return " ".join(text.split())


def one_line(output: str, paragraph: str) -> bool:
    return any(words(paragraph) in line for line in output.splitlines())


@pytest.mark.parametrize(("cli", "args", "paragraph"), [
    (app, ["--help"], "kgroups coordinator runs the group coordinator (Kafka wire protocol, "
                      "SQLite store); kgroups topic"),
    (app, ["--help"], "Run the operator: Topics and ConsumerGroups (kgroups.io/v1alpha1) "
                      "reconciled against the coordinator, live group state mirrored"),
    (app, ["credentials", "hash", "--help"], "Print USERNAME's entry for the --credentials file "
                                             "with SCRAM-SHA-256 and -512 hashes of a password"),
    (plugin, ["--help"], "Consumer groups as Kubernetes resources: list, describe, reset the "
                         "offsets of and delete ConsumerGroups"),
])  # fmt: skip
def test_a_paragraph_of_help_is_one_line_on_a_wide_terminal(
    cli: typer.Typer, args: list[str], paragraph: str
) -> None:
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    output = re.sub(r"[│╭╮╰╯─]", " ", result.output)
    assert one_line(output, paragraph), result.output
