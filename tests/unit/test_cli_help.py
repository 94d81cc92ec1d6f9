"""`--help` reads as paragraphs: a docstring's line breaks are where the source wrapped, not
sentence ends, so on a wide terminal each paragraph comes out on one line."""

from __future__ import annotations

import re
import subprocess
import sys

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
                      "SQLite or PostgreSQL store; kgroups store migrate moves SQLite"),
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


LOADED = """
import sys
from kgroups.cli import app
try:
    app({args!r}, standalone_mode=False)
except BaseException as exc:  # a refused connection: what was loaded is what is asked
    print(type(exc).__name__, file=sys.stderr)
print("loaded:", *(m for m in sys.modules if m.startswith("kgroups.coordinator.")))
"""


def loaded(args: list[str]) -> set[str]:
    """The coordinator's modules a `kgroups` run with `args` loaded."""
    script = LOADED.format(args=args)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("loaded:"), result.stdout + result.stderr
    return set(line.split()[1:])


@pytest.mark.parametrize("args", [["topic", "list", "--help"], ["group", "describe", "--help"],
                                  ["topic", "list", "--bootstrap-server", "127.0.0.1:1"],
                                  ["group", "list", "--bootstrap-server", "127.0.0.1:1"]])  # fmt: skip
def test_topic_and_group_commands_do_not_load_the_coordinator(args: list[str]) -> None:
    """`kgroups topic` and `kgroups group` reach a coordinator over the wire: they start
    without loading one (only its stdlib-only limits, `coordinator`'s flag defaults)."""
    assert loaded(args) <= {"kgroups.coordinator.limits"}


def test_the_coordinator_command_loads_the_coordinator() -> None:
    """The check above can fail: a bad --listen is refused by the listener parser, which
    only the coordinator command loads."""
    assert "kgroups.coordinator.listeners" in loaded(["coordinator", "--listen", "nope://x:1"])
