"""`kgroups group` refuses what Kafka's tool refuses before it asks anyone anything:
usage errors (exit code 2) with the reason, and no connection attempted (the bootstrap
address is a port nothing listens on, so a command that tried would fail otherwise)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgroups.cli import app

NOWHERE = "127.0.0.1:1"
RESET_ALL = ["reset-offsets", "--group", "g", "--all-topics", "--to-earliest"]


def kgroups_group(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["group", *args, "--bootstrap-server", NOWHERE])
    # Usage errors come in a box, wrapped to the terminal: keep the words only.
    text = re.sub(r"[│╭╮╰╯─]", " ", result.stdout + result.stderr)
    return result.exit_code, " ".join(text.split())


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["list", "stable"], "a state list goes with --state"),
        (["list", "--state", "stable,nope"], "Invalid state list 'stable,nope'"),
        (["describe"], "give at least one group"),
        (["describe", "g", "--all-groups"], "give groups or --all-groups, not both"),
        (["describe", "g", "--members", "--state"], "at most one of --members, --offsets"),
        (["reset-offsets", "--group", "g", "--all-topics"], "give exactly one of --to-earliest"),
        (
            ["reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"],
            "give exactly one of --to-earliest, --to-latest",
        ),
        (["reset-offsets", "--group", "g", "--to-earliest"], "One of the reset scopes"),
        (
            ["reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-earliest"],
            "give --topic or --all-topics, not both",
        ),
        ([*RESET_ALL, "--dry-run", "--execute"], "give --dry-run or --execute, not both"),
        (
            ["reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
            "Invalid partition 'x' specified in topic arg 't:x'",
        ),
        (
            ["reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1H"],
            "not a duration",
        ),
        (
            ["reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
            "does not contain a 'T'",
        ),
        ([*RESET_ALL, "--export", "-o", "json"], "--export prints CSV"),
        (["delete"], "give at least one group"),
        (["delete-offsets", "--group", "g", "--topic", "t:"], "Invalid topic arg 't:'"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(args: list[str], reason: str) -> None:
    code, text = kgroups_group(*args)
    assert code == 2, text
    assert reason in text


def test_a_plan_file_is_checked_before_anything_is_asked(tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("t,0,5\n")
    code, text = kgroups_group(
        "reset-offsets", "--group", "a", "--group", "b", "--from-file", str(plan)
    )
    assert (code, "exactly one --group" in text) == (2, True)
    code, text = kgroups_group("reset-offsets", "--group", "a", "--from-file", str(tmp_path / "x"))
    assert code == 2
    assert "cannot read" in text


def test_an_unreachable_cluster_is_an_error_not_a_traceback() -> None:
    code, text = kgroups_group("list", "--timeout", "2000")
    assert code == 1
    assert f"Error: cannot reach {NOWHERE}" in text
    assert "Traceback" not in text
