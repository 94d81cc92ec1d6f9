"""Two teams on one cluster (issue 23, findings 6, 8 and 9), on a real API server with the
operator watching every namespace and the chart's offset-request admission policy.

Team A's ConsumerGroup owns its group id, with a live kafka-python member and a
committed offset. Team B points ConsumerGroups and a Topic of its own at A's names. Before
issue 23, B's ConsumerGroup showed A's members, hosts, assignment and offsets in its own
status, overwrote A's settings, could reset A's offsets, and its deletion (policy Delete)
deleted A's group and every offset; anyone with `patch` could reset offsets under any name
they liked; deleting a manifest deleted its offsets by default. Now the oldest claim owns
a Kafka name: B's resources are GroupIdConflict / TopicNameConflict, with an Event, and
nothing is done for them; resets need the `reset` verb and carry the real author; and a
ConsumerGroup is retained by default.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgroups.admin import Admin
from tests.e2e.kube import ControlPlane, Operator, condition
from tests.e2e.test_kubectl_plugin import kgroups
from tests.integration.harness import ROOT, Coordinator, Member, wait_until

CHART = ROOT / "charts" / "kgroups"
SESSION_MS = 6000
TP = tuple[str, int]


def cg(name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "kgroups.io/v1alpha1", "kind": "ConsumerGroup",
                           "metadata": {"name": name}, "spec": spec})  # fmt: skip


def topic(name: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "kgroups.io/v1alpha1", "kind": "Topic",
                           "metadata": {"name": name}, "spec": spec})  # fmt: skip


def policy(cp: ControlPlane) -> str:
    """The chart's admission policy for offset requests, as helm renders it for an API
    server that serves ValidatingAdmissionPolicy."""
    return subprocess.run(
        [str(cp.helm), "template", "kg", str(CHART), "-s", "templates/offset-request-policy.yaml",
         "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


class Teams:
    def __init__(self, cp: ControlPlane, coordinator: Coordinator, suffix: str) -> None:
        self.cp, self.coordinator = cp, coordinator
        self.a, self.b = f"team-a-{suffix}", f"team-b-{suffix}"
        self.group, self.topic = f"billing-{suffix}", f"orders-{suffix}"

    def ready(self, kind: str, name: str, ns: str) -> dict[str, Any]:
        return condition(self.cp.get(kind, name, ns), "Ready") or {}

    def admin(self, work: Any) -> Any:
        async def go() -> Any:
            async with Admin("127.0.0.1", self.coordinator.port) as a:
                return await work(a)

        return asyncio.run(go())

    def committed(self) -> dict[TP, int]:
        found: dict[TP, int] = self.admin(lambda a: a.committed_offsets(self.group))
        return found

    def events(self, ns: str, reason: str) -> str:
        return self.cp.kubectl("get", "events", "-n", ns, "--field-selector",
                               f"reason={reason}").stdout  # fmt: skip


@pytest.fixture
def teams(controlplane: ControlPlane, tmp_path: Path) -> Iterator[Teams]:
    cp = controlplane
    coordinator = Coordinator(tmp_path / "data", "--log-level", "INFO",
                              "--min-session-timeout-ms", "1000")  # fmt: skip
    coordinator.start()
    t = Teams(cp, coordinator, secrets.token_hex(3))
    for ns in (t.a, t.b):
        cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", input=policy(cp))
    operator = Operator(cp.kubeconfig, coordinator.bootstrap, tmp_path / "operator.log",
                        "--all-namespaces")  # fmt: skip
    try:
        yield t
        assert "Traceback" not in operator.log(), operator.log()[-3000:]
    finally:
        for ns in (t.b, t.a):
            cp.kubectl("delete", "topics,consumergroups", "--all", "-n", ns, "--timeout=30s",
                       check=False)  # fmt: skip
        operator.stop()
        coordinator.kill()
        cp.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                   "kg-kgroups-offset-requests", check=False)  # fmt: skip
        for ns in (t.a, t.b):
            cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def user(cp: ControlPlane, name: str, namespace: str, verbs: list[str]) -> Path:
    """A person with `verbs` on ConsumerGroups (and read on Topics) in `namespace`."""
    kubeconfig = cp.user(name)
    cp.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name},
         "rules": [{"apiGroups": ["kgroups.io"], "resources": ["consumergroups"], "verbs": verbs},
                   {"apiGroups": ["kgroups.io"], "resources": ["topics"],
                    "verbs": ["get", "list", "create", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}]},
    ]))  # fmt: skip
    return kubeconfig


def test_a_second_team_cannot_reach_the_first_teams_group_through_the_operator(
    teams: Teams, members: list[Member]
) -> None:
    t, cp = teams, teams.cp
    edit = ["get", "list", "watch", "create", "update", "patch", "delete"]
    bob = user(cp, "bob", t.b, [*edit, "reset"])  # team B's admin
    carol = user(cp, "carol", t.a, edit)  # team A's developer: edit, no reset
    dave = user(cp, "dave", t.a, [*edit, "reset"])  # team A's admin

    # Team A: a topic, a group (deletionPolicy left to its default), a member, an offset.
    cp.kubectl("apply", "-n", t.a, "-f", "-", input=topic(t.topic, {"partitions": 2}))
    cp.kubectl("apply", "-n", t.a, "-f", "-", input=cg(t.group, {"topics": [t.topic]}))
    wait_until(lambda: t.ready("kt", t.topic, t.a).get("status") == "True", 30, "A's topic")
    member = Member("kafka-python", t.coordinator.bootstrap, t.group, [t.topic],
                    client_id="team-a-app", session_timeout_ms=SESSION_MS)  # fmt: skip
    members.append(member)
    member.wait_event("assigned", timeout=30)
    member.send("commit 7")
    member.wait_event("committed", timeout=20)
    wait_until(lambda: t.ready("cg", t.group, t.a).get("status") == "True", 30, "A's group Ready")
    generation = cp.get("cg", t.group, t.a)["status"]["generation"]
    assert cp.get("cg", t.group, t.a)["spec"]["deletionPolicy"] == "Retain"

    # Team B claims A's group id (and would delete it), and A's topic name.
    spy = cg("spy", {"groupId": t.group, "topics": [t.topic], "deletionPolicy": "Delete",
                     "settings": {"maxSize": 1}})  # fmt: skip
    cp.kubectl("apply", "-n", t.b, "-f", "-", input=spy, kubeconfig=bob)
    cp.kubectl("apply", "-n", t.b, "-f", "-", kubeconfig=bob,
               input=topic("stolen", {"topicName": t.topic, "partitions": 1}))  # fmt: skip
    conflict = wait_until(lambda: t.ready("cg", "spy", t.b).get("reason") == "GroupIdConflict"
                          and t.ready("cg", "spy", t.b), 30, "spy in conflict")  # fmt: skip
    assert f"{t.a}/{t.group}" in conflict["message"]
    wait_until(lambda: "GroupIdConflict" in t.events(t.b, "GroupIdConflict"), 15, "the event")
    wait_until(lambda: t.ready("kt", "stolen", t.b).get("reason") == "TopicNameConflict", 30,
               "the stolen topic in conflict")  # fmt: skip
    deadline = time.monotonic() + 3 * SESSION_MS / 1000
    while time.monotonic() < deadline:  # held, not passed through: B never sees A's group
        status = cp.get("cg", "spy", t.b).get("status", {})
        leaked = {"members", "offsets", "generation", "state", "leader"} & set(status)
        assert not leaked, status
        time.sleep(0.5)
    configs = t.admin(lambda a: a.group_configs(t.group))
    assert configs.get("group.max.size") != "1", configs  # B's settings never applied
    assert t.ready("cg", t.group, t.a).get("status") == "True"

    # B asks to reset "its" group: the admission policy lets bob write it (he may reset in
    # his namespace), the operator refuses it untried.
    refused = kgroups(cp, "reset-offsets", "spy", "-n", t.b, "--all-topics", "--to-earliest",
                      "--execute", kubeconfig=bob, check=None)  # fmt: skip
    assert "Refused" in refused.stdout + refused.stderr or refused.returncode != 0, refused
    records = cp.get("cg", "spy", t.b)["status"]["offsetRequests"]
    assert records[-1]["result"] == "Refused" and t.group in records[-1]["message"]
    assert set(t.committed().values()) == {7}

    # B deletes its ConsumerGroup (policy Delete) and its Topic: nothing happens to A's.
    cp.kubectl("delete", "cg", "spy", "-n", t.b, "--timeout=30s", kubeconfig=bob)
    cp.kubectl("delete", "kt", "stolen", "-n", t.b, "--timeout=30s", kubeconfig=bob)
    member.close()
    wait_until(lambda: cp.get("cg", t.group, t.a)["status"].get("state") == "Empty", 30,
               "A's group Empty")  # fmt: skip
    time.sleep(2)
    assert set(t.committed().values()) == {7}
    assert t.admin(lambda a: a.topics([t.topic])) == {t.topic: 2}
    assert cp.get("cg", t.group, t.a)["status"]["generation"] >= generation

    # Resets in A: carol may patch, not reset; nobody may sign as someone else; dave may.
    denied = kgroups(cp, "reset-offsets", t.group, "-n", t.a, "--all-topics", "--to-offset",
                     "3", "--execute", kubeconfig=carol, check=False)  # fmt: skip
    assert "need the reset verb" in denied.stderr, denied.stderr
    forged = json.dumps({"id": "forged-1", "action": "reset", "scenario": "to-offset",
                         "argument": 0, "allTopics": True, "requestedBy": "alice",
                         "requestedAt": "2026-01-01T00:00:00Z"})  # fmt: skip
    as_alice = cp.kubectl("annotate", "cg", t.group, "-n", t.a,
                          f"kgroups.io/offset-request={forged}",
                          "kgroups.io/offset-request-by=alice", kubeconfig=dave,
                          check=False)  # fmt: skip
    assert as_alice.returncode != 0 and "must be your own user name (dave)" in as_alice.stderr
    done = kgroups(cp, "reset-offsets", t.group, "-n", t.a, "--all-topics", "--to-offset", "3",
                   "--execute", kubeconfig=dave)  # fmt: skip
    assert "by dave: Succeeded" in done.stderr, done.stderr
    assert cp.get("cg", t.group, t.a)["status"]["offsetRequests"][-1]["requestedBy"] == "dave"
    assert set(t.committed().values()) == {3}

    # A deletes its ConsumerGroup: retained by default, its offsets stay.
    cp.kubectl("delete", "cg", t.group, "-n", t.a, "--timeout=30s")
    assert set(t.committed().values()) == {3}
