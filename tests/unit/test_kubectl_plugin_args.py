"""`kubectl kgroups` arguments: kubectl's global flags, kafka-consumer-groups' reset flags,
and the kubectl command lines they become.

kubectl here is a stand-in script (KGROUPS_KUBECTL) that records its arguments and answers
with a canned object, so what the plugin asks kubectl is checked without an API server;
usage errors are refused before kubectl is run at all."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kgroups.api.offset_requests import ANNOTATION, OffsetRequest, parse_request
from kgroups.kubectl.app import app, hoist
from kgroups.kubectl.kube import RESOURCE, Kubectl, KubectlError, Target, parse_duration
from kgroups.kubectl.submit import CONFLICT_RETRIES


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["list", "-n", "a"], ["list", "-n", "a"]),
        (["-n", "a", "list"], ["list", "-n", "a"]),
        (["-A", "--context", "c", "list", "-o", "wide"], ["list", "-A", "--context", "c", "-o", "wide"]),
        (["--namespace=a", "-ojson", "describe", "g"], ["describe", "--namespace=a", "-ojson", "g"]),
        (["--kubeconfig", "k", "reset-offsets", "g"], ["reset-offsets", "--kubeconfig", "k", "g"]),
        (["-n", "a"], ["-n", "a"]),  # no verb: left for the usage message
        (["--help"], ["--help"]),
    ],
)  # fmt: skip
def test_global_flags_before_the_verb_move_after_it(args: list[str], expected: list[str]) -> None:
    assert hoist(args) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1m30s", 90), ("500ms", 0.5), ("2h", 7200), ("5", 5), ("1.5s", 1.5)],
)
def test_timeouts_read_as_kubectl_reads_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "30x", "1m 30s", "-1s", "P1D"])
def test_bad_timeouts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_kubectl_gets_the_target_flags_after_its_verb() -> None:
    """kubectl takes a flag before the verb for a plugin's name (and -A is get's flag)."""
    target = Target(kubeconfig="k", context="c", namespace="n")
    assert target.flags() == ["--kubeconfig", "k", "--context", "c", "--namespace", "n"]
    assert target.flags(namespaced=False) == ["--kubeconfig", "k", "--context", "c"]
    assert Target(namespace="n", all_namespaces=True).flags() == ["--all-namespaces"]
    assert Target().flags() == []  # the kubeconfig's current context and its namespace


FAKE = """#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
case "$1" in
  get) cat "{answer}" ;;
  auth) echo '{{"status": {{"userInfo": {{"username": "alice"}}}}}}' ;;
  annotate) cat "{reply}" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def fake_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the log of kubectl calls, the file whose JSON `kubectl get` answers); `kubectl
    annotate` says what the file `refusal` holds (Forbidden unless a test changes it)."""
    log, answer = tmp_path / "calls", tmp_path / "answer.json"
    script, reply = tmp_path / "kubectl", tmp_path / "refusal"
    reply.write_text("Error from server (Forbidden): nope\n")
    script.write_text(FAKE.format(log=log, answer=answer, reply=reply))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("KGROUPS_KUBECTL", str(script))
    answer.write_text(json.dumps({"items": []}))
    return log, answer


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    # Usage errors come in a box, wrapped to the terminal: keep the words only.
    err = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split())
    return result.exit_code, result.stdout, err


def test_list_asks_kubectl_with_the_users_flags(fake_kubectl: tuple[Path, Path]) -> None:
    log, _ = fake_kubectl
    code, _, err = run("list", "-A", "--context", "prod", "--kubeconfig", "/k")
    assert code == 0
    assert "No ConsumerGroups found in any namespace." in err
    assert log.read_text().splitlines() == [
        f"get {RESOURCE} -o json --kubeconfig /k --context prod --all-namespaces"
    ]


def _group(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "billing", "namespace": "team", "resourceVersion": "7",
                     "annotations": annotations or {}},
        "spec": {"groupId": "billing-v2"},
    }  # fmt: skip


def test_reset_offsets_writes_a_request_only_on_the_object_as_read(
    fake_kubectl: tuple[Path, Path],
) -> None:
    log, answer = fake_kubectl
    answer.write_text(json.dumps(_group()))
    code, _, err = run("reset-offsets", "billing", "-n", "team", "--topic", "orders:1,0",
                       "--shift-by", "-3", "--execute")  # fmt: skip
    assert code == 1
    assert "Error from server (Forbidden): nope" in err
    get, whoami, annotate = log.read_text().splitlines()
    assert get == f"get {RESOURCE} billing -o json --namespace team"
    assert whoami == "auth whoami -o json"  # cluster-wide: no namespace flag
    verb, resource, name, pair, by, overwrite, version, *flags = annotate.split(" ")
    assert (verb, resource, name, version) == ("annotate", RESOURCE, "billing",
                                               "--resource-version=7")  # fmt: skip
    # the author beside the request, as the admission policy checks it; --overwrite is
    # safe only because the write is conditional on the version read (no request pending)
    assert (by, overwrite) == ("kgroups.io/offset-request-by=alice", "--overwrite")
    assert flags == ["--namespace", "team"]
    key, _, value = pair.partition("=")
    assert key == ANNOTATION
    assert isinstance(parse_request(value), OffsetRequest)
    sent = json.loads(value)
    assert {k: sent[k] for k in ("action", "scenario", "argument", "topics", "requestedBy")} == {
        "action": "reset", "scenario": "shift-by", "argument": -3,
        "topics": [{"topic": "orders", "partitions": [1, 0]}], "requestedBy": "alice",
    }  # fmt: skip
    assert "dryRun" not in sent or sent["dryRun"] is False


def test_a_write_refused_as_a_conflict_is_retried_on_a_fresh_read(
    fake_kubectl: tuple[Path, Path],
) -> None:
    """The operator patches the status every few seconds: the conditional write is made
    again on a new read (and re-checked), a bounded number of times, then reported."""
    log, answer = fake_kubectl
    answer.write_text(json.dumps(_group()))
    conflict = ('Error from server (Conflict): Operation cannot be fulfilled on '
                'consumergroups.kgroups.io "billing": the object has been modified')  # fmt: skip
    (log.parent / "refusal").write_text(conflict + "\n")
    code, _, err = run("delete-offsets", "billing", "-n", "team", "--topic", "orders:2")
    assert code == 1
    assert "(Conflict)" in err
    calls = [line.split(" ")[0] for line in log.read_text().splitlines()]
    assert calls == ["get", "auth", "annotate"] + ["get", "annotate"] * (CONFLICT_RETRIES - 1)
    values = {
        line.split(" ")[3] for line in log.read_text().splitlines() if line.startswith("annotate")
    }
    assert len(values) == 1  # the same request each time (one id)


def test_a_pending_request_is_not_replaced(fake_kubectl: tuple[Path, Path]) -> None:
    log, answer = fake_kubectl
    answer.write_text(json.dumps(_group({ANNOTATION: '{"id": "x"}'})))
    code, _, err = run("reset-offsets", "billing", "--all-topics", "--to-earliest")
    assert code == 1
    assert "has an offset request the operator has not recorded yet" in err
    assert "WARN: No action will be performed as the --execute option is missing." in err
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["get"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["reset-offsets", "g", "--all-topics"], "give exactly one of --to-earliest"),
        (["reset-offsets", "g", "--all-topics", "--to-earliest", "--to-latest"],
         "give exactly one of --to-earliest, --to-latest"),
        (["reset-offsets", "g", "--to-earliest"], "One of the reset scopes should be defined"),
        (["reset-offsets", "g", "--topic", "t", "--all-topics", "--to-earliest"],
         "give --topic or --all-topics, not both"),
        (["reset-offsets", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"],
         "give --dry-run or --execute, not both"),
        (["reset-offsets", "g", "--topic", "t:x", "--to-earliest"],
         "Invalid partition 'x' specified in topic arg 't:x'"),
        (["reset-offsets", "g", "--topic", "no spaces", "--to-earliest"], "invalid topic name"),
        (["reset-offsets", "g", "--all-topics", "--by-duration", "1H"], "is not a duration"),
        (["reset-offsets", "g", "--all-topics", "--to-datetime", "2024-01-01"],
         "does not contain a 'T'"),
        (["reset-offsets", "g", "--all-topics", "--to-earliest", "--timeout", "soon"],
         "invalid duration 'soon'"),
        (["reset-offsets", "g", "--all-topics", "--from-file", "x.csv"], "No such option"),
        (["delete-offsets", "g"], "give at least one --topic"),
        (["describe", "g", "--members", "--requests"], "give at most one of --members"),
        (["describe", "g", "-A"], "No such option"),
    ],
)  # fmt: skip
def test_usage_errors_are_refused_before_kubectl_runs(
    args: list[str], reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KGROUPS_KUBECTL", "/nonexistent/kubectl")
    code, _, err = run(*args)
    assert code == 2, err
    assert reason in err


def test_a_missing_kubectl_is_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGROUPS_KUBECTL", "/nonexistent/kubectl")
    with pytest.raises(KubectlError, match="not found: kubectl kgroups runs kubectl"):
        Kubectl(Target()).list()
    code, _, err = run("list")
    assert code == 1 and "KGROUPS_KUBECTL" in err
