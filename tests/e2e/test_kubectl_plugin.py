"""`kubectl kgroups` as a user runs it: kubectl finding the plugin on PATH, against a real
API server, the operator and the coordinator, with kafka-python members.

Reads (list, describe) come from the ConsumerGroups' status; offset resets and deletions
are requests the operator executes and records on the ConsumerGroup. What the plugin
prints is checked against what the coordinator then holds (read back with kgroups.admin),
against what `kgroups group` prints for the same request, and against the record.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgroups.admin import Admin
from tests.e2e.kube import ControlPlane, Operator, condition
from tests.integration.harness import PYTHON, ROOT, Coordinator, Member, wait_until

EXAMPLES = ROOT / "examples" / "k8s"
VENV_BIN = Path(sys.executable).parent
"""Where `pip install` put the kubectl-kgroups console script (the project's venv)."""
ANNOTATION = "kgroups.io/offset-request"
TP = tuple[str, int]


def kgroups(cp: ControlPlane, *args: str, kubeconfig: Path | None = None,
            check: bool | None = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`kubectl kgroups ARGS` with the venv's bin on PATH, as after `pip install kgroups`.
    check: True (must succeed), False (must fail), None (either)."""
    env = {**os.environ, "PATH": f"{VENV_BIN}:{cp.bin}:{os.environ['PATH']}",
           "KUBECONFIG": str(kubeconfig or cp.kubeconfig)}  # fmt: skip
    done = subprocess.run([str(cp.bin / "kubectl"), "kgroups", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if check is not None:
        assert (done.returncode == 0) == check, (
            f"kubectl kgroups {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return done


def table(text: str) -> list[list[str]]:
    """A printed table's rows (header first), cells split on whitespace."""
    return [line.split() for line in text.splitlines() if line.strip()]


def admin(coordinator: Coordinator, work: Any) -> Any:
    async def go() -> Any:
        async with Admin("127.0.0.1", coordinator.port) as a:
            return await work(a)

    return asyncio.run(go())


def committed(coordinator: Coordinator) -> dict[TP, int]:
    offsets: dict[TP, int] = admin(coordinator, lambda a: a.committed_offsets("billing"))
    return offsets


def commit(coordinator: Coordinator, offsets: dict[TP, int]) -> None:
    """Commit as an admin (the group must have no members)."""
    codes = admin(coordinator, lambda a: a.commit_offsets("billing", offsets))
    assert {c.name for c in codes.values()} == {"none"}, codes


def records(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (
        cp.get("cg", "billing", ns).get("status", {}).get("offsetRequests", [])
    )
    return found


def record(cp: ControlPlane, ns: str, request_id: str) -> dict[str, Any] | None:
    return next((r for r in records(cp, ns) if r["id"] == request_id), None)


def annotation(cp: ControlPlane, ns: str) -> str | None:
    value: str | None = (
        cp.get("cg", "billing", ns)["metadata"].get("annotations", {}).get(ANNOTATION)
    )
    return value


def events(cp: ControlPlane, ns: str, reason: str) -> str:
    return cp.kubectl("get", "events", "-n", ns, "--field-selector", f"reason={reason}").stdout


class Stack:
    """The coordinator, and the operator watching one namespace, with the example Topic
    (orders, 6 partitions) and ConsumerGroup (billing) applied and registered."""

    def __init__(self, cp: ControlPlane, ns: str, tmp: Path) -> None:
        self.cp, self.ns, self.tmp = cp, ns, tmp
        self.coordinator = Coordinator(tmp / "data", "--log-level", "INFO")
        self.coordinator.start()
        self.operator: Operator | None = None
        self.starts = 0

    def start_operator(self) -> Operator:
        self.starts += 1
        self.operator = Operator(self.cp.kubeconfig, self.coordinator.bootstrap,
                                 self.tmp / f"operator-{self.starts}.log", "--namespace",
                                 self.ns)  # fmt: skip
        return self.operator

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop()
            assert "Traceback" not in self.operator.log(), self.operator.log()[-3000:]
            self.operator = None

    def apply(self) -> None:
        self.cp.kubectl("apply", "-n", self.ns, "-f", str(EXAMPLES / "topic.yaml"),
                        "-f", str(EXAMPLES / "consumergroup.yaml"))  # fmt: skip
        wait_until(lambda: (condition(self.cp.get("cg", "billing", self.ns), "Ready") or {})
                   .get("reason") == "NoMembers", 30, "billing registered", poll=0.2)  # fmt: skip

    def close(self) -> None:
        try:
            self.stop_operator()
        finally:
            self.coordinator.kill()


@pytest.fixture
def stack(controlplane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Stack]:
    s = Stack(controlplane, namespace, tmp_path)
    try:
        s.start_operator()
        s.apply()
        yield s
    finally:
        s.close()


def status_where(cp: ControlPlane, ns: str, test: Any, what: str, timeout: float = 30) -> Any:
    return wait_until(lambda: (s := cp.get("cg", "billing", ns).get("status", {})) and test(s)
                      and s, timeout, what, poll=0.2)  # fmt: skip


def test_kubectl_finds_the_plugin_and_it_honours_namespaces_contexts_and_outputs(
    controlplane: ControlPlane, stack: Stack, namespace: str, members: list[Member],
    tmp_path: Path,
) -> None:  # fmt: skip
    cp, ns, coordinator = controlplane, namespace, stack.coordinator
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    plugins = subprocess.run([str(cp.bin / "kubectl"), "plugin", "list"], env=env,
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
    assert str(VENV_BIN / "kubectl-kgroups") in plugins

    # Offsets at 8 first (an admin commit, as after an earlier consumer), then a member
    # joins and commits 5: the log's known end stays 8, so each partition lags by 3.
    commit(coordinator, {("orders", p): 8 for p in range(6)})
    member = Member("kafka-python", coordinator.bootstrap, "billing", ["orders"],
                    client_id="kp-0", session_timeout_ms=4000)  # fmt: skip
    members.append(member)
    member.wait_event("assigned", timeout=30)
    member.send("commit 5")
    member.wait_event("committed", timeout=20)
    status = status_where(cp, ns, lambda s: s.get("state") == "Stable" and s.get("lag") == 18
                          and (condition({"status": s}, "Ready") or {}).get("status") == "True",
                          "Stable with lag 18")  # fmt: skip
    assert {(o["offset"], o["logEndOffset"], o["lag"]) for o in status["offsets"]} == {(5, 8, 3)}

    # A second namespace with a group the operator does not watch (no status yet).
    other = f"{ns}-b"[:63]
    cp.kubectl("create", "namespace", other)
    try:
        cp.kubectl("apply", "-n", other, "-f", str(EXAMPLES / "consumergroup.yaml"))
        rows = table(kgroups(cp, "list", "-n", ns).stdout)
        assert rows == [
            ["NAME", "GROUP-ID", "STATE", "GENERATION", "MEMBERS", "ASSIGNED", "LAG", "READY"],
            ["billing", "billing", "Stable", str(status["generation"]), "1", "6/6", "18", "True"],
        ]
        rows = table(kgroups(cp, "list", "-A").stdout)
        assert rows[0][0] == "NAMESPACE"
        assert [r[:2] for r in rows[1:] if r[0] in (ns, other)] == [
            [ns, "billing"], [other, "billing"]]  # fmt: skip
        assert next(r for r in rows if r[0] == other)[3:] == ["-"] * 6
        wide = table(kgroups(cp, "-n", ns, "list", "-o", "wide").stdout)  # flags before the verb
        assert wide[0][-4:] == ["PROTOCOL", "LEADER", "COORDINATOR", "REASON"]
        assert wide[1][-4:] == ["range", status["leader"], coordinator.bootstrap, "Stable"]
        as_json = json.loads(kgroups(cp, "list", "-n", ns, "-o", "json").stdout)
        as_yaml = yaml.safe_load(kgroups(cp, "list", "-n", ns, "-o", "yaml").stdout)
        assert as_json == as_yaml
        assert as_json[0] | {"generation": 0} == {
            "namespace": ns, "name": "billing", "groupId": "billing", "state": "Stable",
            "generation": 0, "members": 1, "assigned": "6/6", "lag": 18, "ready": "True",
            "reason": "Stable", "protocol": "range", "leader": status["leader"],
            "coordinator": coordinator.bootstrap,
        }  # fmt: skip
    finally:
        cp.kubectl("delete", "namespace", other, "--wait=false", check=False)

    # --context: the kubeconfig's current context points at no cluster; --context picks the
    # one that works, and its namespace is the default one.
    config = yaml.safe_load(cp.kubeconfig.read_text())
    real = config["contexts"][0]["context"]
    config["clusters"].append({"name": "missing", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"] = [
        {"name": "broken", "context": {**real, "cluster": "missing"}},
        {"name": "team", "context": {**real, "namespace": ns}},
    ]
    config["current-context"] = "broken"
    two = tmp_path / "two-contexts"
    two.write_text(yaml.safe_dump(config))
    refused = kgroups(cp, "list", kubeconfig=two, check=False)
    assert "127.0.0.1:1" in refused.stderr
    assert table(kgroups(cp, "list", "--context", "team", kubeconfig=two).stdout)[1][0] == "billing"
    explicit = kgroups(cp, "list", "--context=team", "--kubeconfig", str(two),
                       kubeconfig=tmp_path / "absent")  # fmt: skip
    assert table(explicit.stdout)[1][0] == "billing"

    # describe: kgroups group describe's three views, from the status.
    offsets = table(kgroups(cp, "describe", "billing", "-n", ns).stdout)
    assert offsets[0][:7] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                              "LAG", "CONSUMER-ID"]  # fmt: skip
    assert sorted((r[2], r[3], r[4], r[5], r[7], r[8]) for r in offsets[1:]) == [
        (str(p), "5", "8", "3", "/127.0.0.1", "kp-0") for p in range(6)]  # fmt: skip
    kafka = subprocess.run([PYTHON, "-m", "kgroups", "group", "describe", "billing",
                            "--bootstrap-server", coordinator.bootstrap],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert table(kgroups(cp, "describe", "billing", "-n", ns).stdout) == table(kafka.stdout)
    members_view = table(kgroups(cp, "describe", "billing", "-n", ns, "--members").stdout)
    assert members_view[1][-2:] == ["yes", "orders(0,1,2,3,4,5)"]
    state = kgroups(cp, "describe", "billing", "-n", ns, "--state").stdout
    assert f"{coordinator.bootstrap}  (0)" in state
    assert table(state)[1][-3:] == ["1", str(status["generation"]), status["leader"]]
    described = json.loads(kgroups(cp, "describe", "billing", "-n", ns, "-o", "json").stdout)
    assert described[0]["generation"] == status["generation"]
    assert described[0]["lag"] == 18
    missing = kgroups(cp, "describe", "nothing", "-n", ns, check=False)
    assert 'consumergroups.kgroups.io "nothing" not found' in missing.stderr

    # delete: deletionPolicy Delete waits for the group to be Empty, and says so.
    waiting = kgroups(cp, "delete", "billing", "-n", ns, check=False)
    assert ("is still being deleted: deletionPolicy is Delete: waiting until the group is "
            "Empty (1 members still joined)") in waiting.stderr  # fmt: skip
    member.close()
    wait_until(lambda: not cp.exists("cg", "billing", ns), 30, "the group deleted")
    assert admin(coordinator, lambda a: a.describe_group("billing")).state == "Dead"


def test_resets_are_requests_the_operator_executes_and_records(
    controlplane: ControlPlane, stack: Stack, namespace: str, members: list[Member]
) -> None:
    cp, ns, coordinator = controlplane, namespace, stack.coordinator
    me = json.loads(cp.kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    commit(coordinator, {("orders", p): 5 for p in range(6)})
    member = Member("kafka-python", coordinator.bootstrap, "billing", ["orders"],
                    client_id="kp-0", session_timeout_ms=4000)  # fmt: skip
    members.append(member)
    member.wait_event("assigned", timeout=30)
    status_where(cp, ns, lambda s: s.get("state") == "Stable", "Stable")

    # With a member: refused, in Kafka's words, recorded, a Warning, nothing written.
    refused = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--all-topics", "--to-earliest",
                      "--execute", check=False)  # fmt: skip
    assert ("Error: Assignments can only be reset if the group 'billing' is inactive, but the "
            "current state is Stable.") in refused.stderr  # fmt: skip
    [first] = records(cp, ns)
    assert (first["result"], first["requestedBy"], first["dryRun"]) == ("Refused", me["username"],
                                                                        False)  # fmt: skip
    wait_until(lambda: "is inactive" in events(cp, ns, "OffsetResetRefused"), 10,
               "the OffsetResetRefused event")  # fmt: skip
    assert committed(coordinator) == {("orders", p): 5 for p in range(6)}
    assert annotation(cp, ns) is None
    kept = kgroups(cp, "delete-offsets", "billing", "-n", ns, "--topic", "orders:0", check=False)
    assert (
        "Error: Encountered some partition-level error, see the follow-up details." in kept.stderr
    )
    assert table(kept.stdout)[-1][:3] == ["orders", "0", "Error:"]
    assert "GROUP_SUBSCRIBED_TO_TOPIC" in kept.stdout
    assert records(cp, ns)[-1]["result"] == "Refused"
    assert ("orders", 0) in committed(coordinator)

    member.close()
    status_where(cp, ns, lambda s: s.get("state") == "Empty", "Empty")

    # A dry run (the default): Kafka's warning and table, recorded with the plan, nothing
    # written.
    dry = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--topic", "orders", "--shift-by",
                  "-2")  # fmt: skip
    assert "WARN: No action will be performed as the --execute option is missing." in dry.stderr
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                 *(["billing", "orders", str(p), "3"] for p in range(6))]  # fmt: skip
    planned = records(cp, ns)[-1]
    assert (planned["result"], planned["scenario"], planned["argument"]) == ("DryRun", "shift-by",
                                                                            "-2")  # fmt: skip
    assert planned["plan"] == [{"topic": "orders", "partition": p, "previousOffset": 5,
                                "newOffset": 3} for p in range(6)]  # fmt: skip
    assert committed(coordinator) == {("orders", p): 5 for p in range(6)}

    # The same dry runs as `kgroups group reset-offsets` prints them.
    for scenario in (["--to-datetime", "2000-01-01T00:00:00"], ["--by-duration", "P3650D"],
                     ["--to-latest"], ["--to-offset", "99"]):  # fmt: skip
        plugin = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--all-topics", "--dry-run",
                         *scenario)  # fmt: skip
        kafka = subprocess.run([PYTHON, "-m", "kgroups", "group", "reset-offsets", "--group",
                                "billing", "--all-topics", "--dry-run", *scenario,
                                "--bootstrap-server", coordinator.bootstrap],
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert table(plugin.stdout) == table(kafka.stdout), scenario
        assert kafka.stderr.strip() in plugin.stderr, scenario  # Kafka's warnings too

    # --execute writes exactly what it prints; the record has who, before and after.
    done = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--topic", "orders:0,1",
                   "--to-offset", "1", "--execute", "-o", "wide")  # fmt: skip
    printed = table(done.stdout)
    assert printed[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", "PREVIOUS-OFFSET"]
    after = committed(coordinator)
    assert {("orders", int(r[2])): int(r[3]) for r in printed[1:]} == {
        tp: o for tp, o in after.items() if o != 5}  # fmt: skip
    assert after == {("orders", 0): 1, ("orders", 1): 1, **{("orders", p): 5 for p in range(2, 6)}}
    executed = records(cp, ns)[-1]
    assert executed["result"] == "Succeeded" and executed["requestedBy"] == me["username"]
    assert executed["topics"] == ["orders:0,1"] and executed["completedAt"]
    assert executed["plan"] == [{"topic": "orders", "partition": p, "previousOffset": 5,
                                 "newOffset": 1} for p in (0, 1)]  # fmt: skip
    wait_until(lambda: "requested by" in events(cp, ns, "OffsetsReset"), 10, "OffsetsReset")

    # delete-offsets: Kafka's report; the partition is gone from the coordinator.
    deleted = kgroups(cp, "delete-offsets", "billing", "-n", ns, "--topic", "orders:2")
    assert deleted.stdout.splitlines()[0] == (
        "Request succeeded for deleting offsets from group billing.")  # fmt: skip
    assert table(deleted.stdout)[-2:] == [["TOPIC", "PARTITION", "STATUS"],
                                          ["orders", "2", "Successful"]]  # fmt: skip
    assert ("orders", 2) not in committed(coordinator)
    assert records(cp, ns)[-1]["plan"] == [{"topic": "orders", "partition": 2,
                                            "previousOffset": 5}]  # fmt: skip

    # A malformed request: recorded Failed, with why, and removed.
    bad_1 = '{"id": "bad-1", "action": "reset", "requestedAt": "2026-01-01T00:00:00Z"}'
    for value, why in ((bad_1, "scenario must be one of"),
                       ("not json", "is not JSON")):  # fmt: skip
        cp.kubectl("annotate", "cg", "billing", "-n", ns, f"{ANNOTATION}={value}")
        bad = wait_until(lambda w=why: next((r for r in records(cp, ns) if w in r["message"]),
                                            None),
                         20, f"the malformed request recorded ({why})", poll=0.2)  # fmt: skip
        assert bad["result"] == "Failed"
        wait_until(lambda: annotation(cp, ns) is None, 10, "the annotation removed", poll=0.2)
    assert [r["id"] for r in records(cp, ns)][-2] == "bad-1"
    assert [r["id"] for r in records(cp, ns)][-1].startswith("invalid-")

    history = kgroups(cp, "describe", "billing", "-n", ns, "--requests").stdout
    # The last ten, newest first: the first request (the refused reset) is gone.
    assert [(r[1], r[5]) for r in table(history)[1:]] == [
        ("-", "Failed"), ("-", "Failed"), ("delete-offsets", "Succeeded"), ("reset", "Succeeded"),
        *[("reset", "DryRun")] * 5, ("delete-offsets", "Refused")]  # fmt: skip
    assert first["id"] not in history
    assert committed(coordinator) == {("orders", 0): 1, ("orders", 1): 1,
                                      **{("orders", p): 5 for p in range(3, 6)}}  # fmt: skip


def _request(request_id: str, **extra: Any) -> str:
    return json.dumps({"id": request_id, "action": "reset", "scenario": "shift-by",
                       "argument": -1, "allTopics": True, "requestedBy": "someone",
                       "requestedAt": "2026-01-01T00:00:00.000Z", **extra})  # fmt: skip


def test_a_request_is_executed_once_across_operator_restarts(
    controlplane: ControlPlane, stack: Stack, namespace: str
) -> None:
    """shift-by makes a second execution visible: every offset would move twice."""
    cp, ns, coordinator = controlplane, namespace, stack.coordinator
    commit(coordinator, {("orders", p): 10 for p in range(6)})
    ten = committed(coordinator)

    # The operator is down: the request waits on the object; the plugin says so.
    stack.stop_operator()
    waiting = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--all-topics", "--shift-by",
                      "-1", "--execute", "--timeout", "2s", check=False)  # fmt: skip
    assert "no answer from the operator within 2s" in waiting.stderr
    pending = json.loads(annotation(cp, ns) or "{}")
    again = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--all-topics", "--to-earliest",
                    check=False)  # fmt: skip
    assert "has an offset request the operator has not recorded yet" in again.stderr

    stack.start_operator()
    done = wait_until(lambda: (r := record(cp, ns, pending["id"])) and r["result"] != "Running"
                      and r, 30, "the pending request executed")  # fmt: skip
    assert done["result"] == "Succeeded"
    assert committed(coordinator) == dict.fromkeys(ten, 9)
    wait_until(lambda: annotation(cp, ns) is None, 10, "the annotation removed", poll=0.2)

    # The same request again (its id recorded): removed, not executed; also after a restart.
    cp.kubectl("annotate", "cg", "billing", "-n", ns, f"{ANNOTATION}={_request(pending['id'])}")
    wait_until(lambda: annotation(cp, ns) is None, 10, "the repeated request removed", poll=0.2)
    stack.stop_operator()
    cp.kubectl("annotate", "cg", "billing", "-n", ns, f"{ANNOTATION}={_request(pending['id'])}")
    stack.start_operator()
    wait_until(lambda: annotation(cp, ns) is None, 30, "the repeated request removed", poll=0.2)
    assert committed(coordinator) == dict.fromkeys(ten, 9)
    assert [r["id"] for r in records(cp, ns)] == [pending["id"]]
    assert record(cp, ns, pending["id"]) == done

    # Interrupted: a Running record (the operator stopped after claiming it) is not run
    # again but recorded Failed, since it may have been partly written.
    stack.stop_operator()
    claimed = str(uuid.uuid4())
    running = {"id": claimed, "action": "reset", "scenario": "shift-by", "argument": "-1",
               "allTopics": True, "dryRun": False, "requestedBy": "someone",
               "requestedAt": "2026-01-01T00:00:00.000Z", "result": "Running"}  # fmt: skip
    cp.kubectl("patch", "cg", "billing", "-n", ns, "--subresource=status", "--type=merge", "-p",
               json.dumps({"status": {"offsetRequests": [*records(cp, ns), running]}}))  # fmt: skip
    cp.kubectl("annotate", "cg", "billing", "-n", ns, f"{ANNOTATION}={_request(claimed)}")
    stack.start_operator()
    failed = wait_until(lambda: (r := record(cp, ns, claimed)) and r["result"] == "Failed" and r,
                        30, "the interrupted request recorded Failed")  # fmt: skip
    assert failed["message"].startswith("interrupted")
    wait_until(lambda: annotation(cp, ns) is None, 10, "the annotation removed", poll=0.2)
    assert committed(coordinator) == dict.fromkeys(ten, 9)


def test_users_need_only_the_charts_kgroups_roles(
    controlplane: ControlPlane, stack: Stack, namespace: str
) -> None:
    """The chart's viewer, editor and offset-resetter roles (rbac.userRoles): `view` in a
    namespace (aggregated) lists and describes; the editor and offset-resetter roles
    request resets, recorded with the user's name."""
    cp, ns = controlplane, namespace
    commit(stack.coordinator, {("orders", 0): 3})
    rendered = subprocess.run(
        [str(cp.helm), "template", "kg", str(ROOT / "charts" / "kgroups"), "--namespace", ns,
         "--set", "rbac.userRoles=true",
         "--show-only", "templates/user-roles.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    roles = [d for d in yaml.safe_load_all(rendered) if d]
    assert sorted(r["metadata"]["name"] for r in roles) == [
        "kg-kgroups-editor", "kg-kgroups-offset-resetter", "kg-kgroups-viewer"]  # fmt: skip
    for role in roles:
        role["metadata"]["name"] += f"-{ns}"
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(roles))
    try:
        alice, bob = (cp.user(f"{name}-{ns[-8:]}") for name in ("alice", "bob"))
        cp.kubectl("create", "rolebinding", "alice", "-n", ns, f"--user=alice-{ns[-8:]}",
                   f"--clusterrole=kg-kgroups-editor-{ns}")  # fmt: skip
        # resets are a verb of their own (what the chart's admission policy asks for)
        cp.kubectl("create", "rolebinding", "alice-resets", "-n", ns, f"--user=alice-{ns[-8:]}",
                   f"--clusterrole=kg-kgroups-offset-resetter-{ns}")  # fmt: skip
        cp.kubectl("create", "rolebinding", "bob", "-n", ns, f"--user=bob-{ns[-8:]}",
                   "--clusterrole=view")  # fmt: skip
        wait_until(lambda: kgroups(cp, "list", "-n", ns, kubeconfig=bob, check=None)
                   .returncode == 0, 30, "view to aggregate the viewer role")  # fmt: skip
        wait_until(lambda: cp.get("cg", "billing", ns)["status"].get("state") == "Empty", 10,
                   "the group seen Empty")  # fmt: skip
        state = kgroups(cp, "describe", "billing", "-n", ns, "--state", kubeconfig=bob)
        assert "Consumer group 'billing' has no active members." in state.stderr
        assert table(state.stdout)[1][:2] == ["billing", stack.coordinator.bootstrap]
        refused = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--all-topics",
                          "--to-earliest", kubeconfig=bob, check=False)  # fmt: skip
        assert "forbidden" in refused.stderr and annotation(cp, ns) is None
        assert kgroups(cp, "list", "-A", kubeconfig=bob, check=False).returncode == 1

        planned = kgroups(cp, "reset-offsets", "billing", "-n", ns, "--all-topics",
                          "--to-earliest", "--dry-run", "-o", "json", kubeconfig=alice)  # fmt: skip
        assert json.loads(planned.stdout)["requestedBy"] == f"alice-{ns[-8:]}"
        assert json.loads(planned.stdout)["result"] == "DryRun"
    finally:
        for role in roles:
            cp.kubectl("delete", "clusterrole", role["metadata"]["name"], check=False)
