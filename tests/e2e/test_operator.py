"""The operator against a real API server: Topics and ConsumerGroups from kubectl to the
coordinator and back into status, with real members (kgroups and kafka-python).

One scenario carries the lifecycle a user goes through (apply, join, crash, grow, delete);
the others each pin one failure mode: bad specs, a missing topic, an unreachable
coordinator.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kgroups.admin import Admin
from tests.e2e.kube import ControlPlane, Operator, condition
from tests.integration.harness import ROOT, Coordinator, Member, free_port, wait_until
from tests.waits import within

EXAMPLES = ROOT / "examples" / "k8s"
SESSION_MS = 4000


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    coord = Coordinator(tmp_path / "data", "--log-level", "INFO")
    coord.start()
    yield coord
    coord.kill()


@pytest.fixture
def operator(
    controlplane: ControlPlane, coordinator: Coordinator, namespace: str, tmp_path: Path
) -> Iterator[Operator]:
    op = Operator(controlplane.kubeconfig, coordinator.bootstrap, tmp_path / "operator.log",
                  "--namespace", namespace)  # fmt: skip
    yield op
    op.stop()


def _describe(coordinator: Coordinator, group: str) -> Any:
    async def go() -> Any:
        async with Admin("127.0.0.1", coordinator.port) as admin:
            return await admin.describe_group(group)

    return asyncio.run(go())


def _topics(coordinator: Coordinator) -> dict[str, int]:
    async def go() -> dict[str, int]:
        async with Admin("127.0.0.1", coordinator.port) as admin:
            return await admin.topics()

    return asyncio.run(go())


def _cg(cp: ControlPlane, ns: str) -> dict[str, Any]:
    return cp.get("cg", "billing", ns)


def holds(ready: Any, generation: int, sessions: int = 3) -> None:
    """The group stays Stable with every member, in one generation, for `sessions`
    session timeouts: checked throughout, not caught passing through once."""
    end = time.monotonic() + sessions * SESSION_MS / 1000
    while time.monotonic() < end:
        cg = ready()
        assert cg is not None, "the group left Stable with every member"
        assert cg["status"]["generation"] == generation, "the group rebalanced meanwhile"
        time.sleep(0.5)


def settled(ready: Any, quiet_s: float = 2.0, timeout: float = 30) -> dict[str, Any]:
    """`ready()` once it has shown the same generation for `quiet_s`. A kafka-python member
    rejoins once by itself when its metadata changed while it was joining (its own check,
    as against Kafka), so the first generation of a forming group may be followed at once
    by a second; stability is asserted from there."""
    deadline = time.monotonic() + within(timeout)
    seen: tuple[int, float] | None = None
    while time.monotonic() < deadline:
        cg = ready()
        if cg is not None:
            generation = cg["status"]["generation"]
            if seen is None or seen[0] != generation:
                seen = (generation, time.monotonic())
            elif time.monotonic() - seen[1] >= quiet_s:
                return cg  # type: ignore[no-any-return]
        else:
            seen = None
        time.sleep(0.2)
    raise AssertionError(f"the group never settled within {timeout}s")


def test_lifecycle_from_kubectl_to_the_coordinator_and_back(
    controlplane: ControlPlane,
    coordinator: Coordinator,
    operator: Operator,
    namespace: str,
    members: list[Member],
) -> None:
    cp, ns = controlplane, namespace
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "consumergroup.yaml"))

    # The Topic exists on the coordinator and says so.
    wait_until(lambda: (condition(cp.get("kt", "orders", ns), "Ready") or {}).get("status")
               == "True", 60, "Topic Ready", poll=0.2)  # fmt: skip
    assert cp.get("kt", "orders", ns)["status"]["partitions"] == 6
    # The group's settings are registered before anyone joins: members with a 4 s session
    # timeout are only admitted because spec.settings lowered the minimum below 6 s.
    wait_until(lambda: _cg(cp, ns).get("status", {}).get("observedGeneration") == 1, 60,
               "ConsumerGroup observed", poll=0.2)  # fmt: skip
    assert (condition(_cg(cp, ns), "Ready") or {}).get("reason") == "NoMembers"

    for i in range(3):
        members.append(Member("kgroups", coordinator.bootstrap, "billing", ["orders"],
                              client_id=f"kg-{i}", session_timeout_ms=SESSION_MS,
                              metadata_max_age_ms=1000))  # fmt: skip
    members.append(Member("kafka-python", coordinator.bootstrap, "billing", ["orders"],
                          client_id="kp-0", session_timeout_ms=SESSION_MS,
                          metadata_max_age_ms=1000))  # fmt: skip

    def ready_with(n: int, assigned: str) -> dict[str, Any] | None:
        cg = _cg(cp, ns)
        status = cg.get("status", {})
        ready = condition(cg, "Ready") or {}
        ok = (ready.get("status") == "True" and status.get("memberCount") == n
              and status["partitions"]["summary"] == assigned)  # fmt: skip
        return cg if ok else None

    wait_until(lambda: ready_with(4, "6/6"), 40, "4 members owning 6/6")
    cg = settled(lambda: ready_with(4, "6/6"))
    holds(lambda: ready_with(4, "6/6"), cg["status"]["generation"])
    status = cg["status"]
    assert status["state"] == "Stable"
    assert status["protocol"] == "range"
    assert status["leader"] in {m["memberId"] for m in status["members"]}
    assert sorted(m["clientId"] for m in status["members"]) == ["kg-0", "kg-1", "kg-2", "kp-0"]
    owned = [(a["topic"], p) for m in status["members"] for a in m["assignment"]
             for p in a["partitions"]]  # fmt: skip
    assert sorted(owned) == [("orders", p) for p in range(6)]
    row = cp.kubectl("get", "cg", "billing", "-n", ns, "--no-headers").stdout.split()
    assert row[1:6] == ["Stable", str(status["generation"]), "4", "6/6", "True"], row
    events = cp.kubectl("get", "events", "-n", ns, "--field-selector", "reason=Rebalanced").stdout
    assert f"generation {status['generation']}" in events

    # Nothing changes, nothing is written: the resourceVersion stays put.
    version = _cg(cp, ns)["metadata"]["resourceVersion"]
    time.sleep(3)
    assert _cg(cp, ns)["metadata"]["resourceVersion"] == version

    # A member dies: a new generation reaches status within session timeout + 2 s.
    generation = status["generation"]
    members[0].kill()
    killed_at = time.monotonic()
    cg = wait_until(lambda: ready_with(3, "6/6"), SESSION_MS / 1000 + 2 + 3, "3 members")
    assert cg["status"]["generation"] > generation
    elapsed = time.monotonic() - killed_at
    assert elapsed <= SESSION_MS / 1000 + 2 + 1.5, elapsed  # + the initial delay
    holds(lambda: ready_with(3, "6/6"), cg["status"]["generation"])
    assert cg["status"]["rebalances"] >= 2
    assert cg["status"]["lastRebalanceTime"]

    # The Topic grows: the group rebalances and the new partitions get owners.
    cp.kubectl("patch", "kt", "orders", "-n", ns, "--type", "merge", "-p",
               '{"spec":{"partitions":8}}')  # fmt: skip
    wait_until(lambda: ready_with(3, "8/8"), 30, "8/8 after growing the topic")

    # Deletion waits for the group to be Empty, and says so.
    cp.kubectl("delete", "cg", "billing", "-n", ns, "--wait=false")
    wait_until(lambda: (condition(_cg(cp, ns), "Ready") or {}).get("reason")
               == "WaitingForEmptyGroup", 60, "WaitingForEmptyGroup", poll=0.2)  # fmt: skip
    assert _describe(coordinator, "billing").state == "Stable"
    for m in members[1:]:
        m.close()
    wait_until(lambda: not cp.exists("cg", "billing", ns), 30, "the ConsumerGroup to go")
    assert _describe(coordinator, "billing").state == "Dead"
    assert "Traceback" not in operator.log()


def test_bad_specs_are_refused_by_the_api_server_and_reach_nothing(
    controlplane: ControlPlane, coordinator: Coordinator, operator: Operator, namespace: str
) -> None:
    cp, ns = controlplane, namespace

    def refused(manifest: str) -> str:
        result = cp.kubectl("apply", "-n", ns, "-f", "-", input=manifest, check=False)
        assert result.returncode != 0, manifest
        return result.stderr

    topic = "apiVersion: kgroups.io/v1alpha1\nkind: Topic\nmetadata: {name: t1}\n"
    group = "apiVersion: kgroups.io/v1alpha1\nkind: ConsumerGroup\nmetadata: {name: g1}\n"
    assert 'unknown field "spec.replicas"' in refused(topic + "spec: {partitions: 3, replicas: 2}")
    assert "spec.partitions" in refused(topic + "spec: {partitions: -1}")
    assert "spec.settings" in refused(
        group + "spec: {settings: {minSessionTimeoutMs: 9000, maxSessionTimeoutMs: 8000}}"
    )
    assert "spec.groupId" in refused(group + "spec: {groupId: 'no spaces allowed'}")

    cp.kubectl("apply", "-n", ns, "-f", "-", input=topic + "spec: {partitions: 3}")
    cp.kubectl("apply", "-n", ns, "-f", "-", input=group + "spec: {groupId: g1, topics: [t1]}")
    assert "partitions may only grow" in refused(topic + "spec: {partitions: 2}")
    assert "groupId is immutable" in refused(group + "spec: {groupId: other, topics: [t1]}")
    wait_until(lambda: cp.get("kt", "t1", ns).get("status", {}).get("partitions") == 3, 60,
               "t1 created with 3 partitions", poll=0.2)  # fmt: skip

    assert _topics(coordinator) == {"t1": 3}


def test_a_group_for_a_missing_topic_says_so_until_the_topic_exists(
    controlplane: ControlPlane, coordinator: Coordinator, operator: Operator, namespace: str
) -> None:
    cp, ns = controlplane, namespace
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "consumergroup.yaml"))
    ready = wait_until(lambda: condition(_cg(cp, ns), "Ready"), 60, "a Ready condition")
    assert (ready["status"], ready["reason"]) == ("False", "TopicNotFound")
    assert "orders" in ready["message"]
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    wait_until(lambda: (condition(_cg(cp, ns), "Ready") or {}).get("reason") == "NoMembers",
               20, "the topic to be found", poll=0.2)  # fmt: skip
    assert _cg(cp, ns)["status"]["partitions"]["summary"] == "0/6"


def test_an_unreachable_coordinator_is_a_condition_and_a_retry(
    controlplane: ControlPlane, coordinator: Coordinator, operator: Operator, namespace: str
) -> None:
    cp, ns = controlplane, namespace
    coordinator.stop()
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "consumergroup.yaml"))
    for kind, name in (("kt", "orders"), ("cg", "billing")):
        ready = wait_until(lambda k=kind, n=name: condition(cp.get(k, n, ns), "Ready"), 60,
                           f"{kind} condition")  # fmt: skip
        assert (ready["status"], ready["reason"]) == ("False", "CoordinatorUnreachable")
    assert operator.proc.poll() is None  # still running
    coordinator.start()
    wait_until(lambda: (condition(cp.get("kt", "orders", ns), "Ready") or {}).get("status")
               == "True", 45, "the Topic to recover", poll=0.5)  # fmt: skip
    wait_until(lambda: (condition(_cg(cp, ns), "Ready") or {}).get("reason") == "NoMembers",
               45, "the group to recover", poll=0.5)  # fmt: skip


def test_a_coordinator_that_lost_its_data_gets_its_topics_back(
    controlplane: ControlPlane, coordinator: Coordinator, operator: Operator, namespace: str
) -> None:
    """The coordinator comes back on an empty volume: the operator's periodic check
    creates the Topic again, with nobody touching it and no operator restart."""
    cp, ns = controlplane, namespace
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    wait_until(lambda: (condition(cp.get("kt", "orders", ns), "Ready") or {}).get("status")
               == "True", 60, "the Topic to be Ready", poll=0.2)  # fmt: skip
    assert _topics(coordinator) == {"orders": 6}
    coordinator.kill()
    shutil.rmtree(coordinator.data_dir)
    coordinator.start()
    wait_until(lambda: _topics(coordinator) == {"orders": 6}, 60, "the topic to be re-created",
               poll=0.5)  # fmt: skip
    assert (condition(cp.get("kt", "orders", ns), "Ready") or {}).get("status") == "True"


def test_retain_leaves_the_group_and_its_offsets_on_the_coordinator(
    controlplane: ControlPlane,
    coordinator: Coordinator,
    operator: Operator,
    namespace: str,
    members: list[Member],
) -> None:
    cp, ns = controlplane, namespace
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    retained = (  # the default: no deletionPolicy at all
        (EXAMPLES / "consumergroup.yaml").read_text().replace("  deletionPolicy: Delete\n", "")
    )
    assert "deletionPolicy" not in retained
    cp.kubectl("apply", "-n", ns, "-f", "-", input=retained)
    wait_until(lambda: (condition(_cg(cp, ns), "Ready") or {}).get("reason") == "NoMembers",
               20, "the group registered", poll=0.2)  # fmt: skip
    wait_until(lambda: cp.get("kt", "orders", ns).get("status", {}).get("partitions") == 6,
               60, "the topic on the coordinator", poll=0.2)  # fmt: skip
    # A session no loaded machine's pause ends: the group must still be Stable with this
    # member after the resource is gone.
    member = Member("kafka-python", coordinator.bootstrap, "billing", ["orders"],
                    client_id="kp", session_timeout_ms=30_000)  # fmt: skip
    members.append(member)
    member.wait_event("assigned", timeout=60)
    member.send("commit 7")
    member.wait_event("committed", timeout=20)
    wait_until(lambda: _cg(cp, ns)["status"].get("offsets"), 30, "offsets in status")
    assert {o["offset"] for o in _cg(cp, ns)["status"]["offsets"]} == {7}

    cp.kubectl("delete", "cg", "billing", "-n", ns, "--timeout=20s")  # no wait for Empty
    assert _describe(coordinator, "billing").state == "Stable"
    member.close()

    async def offsets() -> dict[tuple[str, int], int]:
        async with Admin("127.0.0.1", coordinator.port) as admin:
            return await admin.committed_offsets("billing")

    assert set(asyncio.run(offsets()).values()) == {7}


def test_all_namespaces_follows_namespaces_created_after_it_started(
    controlplane: ControlPlane, coordinator: Coordinator, tmp_path: Path
) -> None:
    cp = controlplane
    op = Operator(cp.kubeconfig, coordinator.bootstrap, tmp_path / "operator.log",
                  "--all-namespaces")  # fmt: skip
    try:
        time.sleep(2)
        for ns in ("late-a", "late-b"):
            cp.kubectl("create", "namespace", ns)
            cp.kubectl("apply", "-n", ns, "-f", "-",
                       input=f"apiVersion: kgroups.io/v1alpha1\nkind: Topic\n"
                       f"metadata: {{name: {ns}}}\nspec: {{partitions: 2}}\n")  # fmt: skip
        for ns in ("late-a", "late-b"):
            wait_until(lambda n=ns: cp.get("kt", n, n).get("status", {}).get("partitions") == 2,
                       90, f"the Topic in {ns}", poll=0.2)  # fmt: skip
    finally:
        for ns in ("late-a", "late-b"):
            cp.kubectl("delete", "kt", ns, "-n", ns, "--timeout=20s", check=False)
        op.stop()
        for ns in ("late-a", "late-b"):
            cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_settings_the_coordinator_refuses_are_a_condition_until_fixed(
    controlplane: ControlPlane, coordinator: Coordinator, operator: Operator, namespace: str
) -> None:
    cp, ns = controlplane, namespace
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    # Valid for the schema, but above the coordinator's own maximum session timeout.
    bad = (
        (EXAMPLES / "consumergroup.yaml")
        .read_text()
        .replace("minSessionTimeoutMs: 1000", "minSessionTimeoutMs: 2000000")
    )
    cp.kubectl("apply", "-n", ns, "-f", "-", input=bad)
    ready = wait_until(lambda: (c := condition(_cg(cp, ns), "Ready")) and
                       c["reason"] == "InvalidSettings" and c, 60, "InvalidSettings")  # fmt: skip
    assert "group.min.session.timeout.ms" in ready["message"]

    async def configs() -> dict[str, str]:
        async with Admin("127.0.0.1", coordinator.port) as admin:
            return await admin.group_configs("billing")

    assert asyncio.run(configs())["group.min.session.timeout.ms"] == "6000"  # nothing applied
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "consumergroup.yaml"))
    wait_until(lambda: (condition(_cg(cp, ns), "Ready") or {}).get("reason") == "NoMembers",
               20, "the fixed settings applied", poll=0.2)  # fmt: skip
    applied = asyncio.run(configs())
    assert (applied["group.min.session.timeout.ms"], applied["group.max.size"]) == ("1000", "50")


def _operator_metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "_created" not in text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_operators_metrics_count_its_work_and_its_failures(
    controlplane: ControlPlane, coordinator: Coordinator, namespace: str, tmp_path: Path
) -> None:
    """Reconciles, status patches, coordinator round trips and watched objects, scraped
    from `kgroups operator --metrics` while it works, while the coordinator is down, and
    after the objects are deleted."""
    cp, ns, port = controlplane, namespace, free_port()
    op = Operator(cp.kubeconfig, coordinator.bootstrap, tmp_path / "operator.log",
                  "--namespace", ns, "--metrics", f"127.0.0.1:{port}")  # fmt: skip
    try:
        cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
        cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "consumergroup.yaml"))
        wait_until(lambda: (condition(_cg(cp, ns), "Ready") or {}).get("reason") == "NoMembers",
                   60, "the group's status", poll=0.5)  # fmt: skip
        seen = _operator_metrics(port)
        cg, kt = (("kind", "ConsumerGroup"),), (("kind", "Topic"),)
        assert seen["kgroups_operator_watched_objects", cg] == 1
        assert seen["kgroups_operator_watched_objects", kt] == 1
        assert seen["kgroups_operator_reconciles_total", cg] >= 1
        assert seen["kgroups_operator_reconciles_total", kt] >= 1
        assert seen["kgroups_operator_reconcile_errors_total", cg] == 0
        patches = seen["kgroups_operator_status_patches_total", cg]
        assert patches >= 1
        assert seen["kgroups_operator_status_patch_duration_seconds_count", cg] == patches
        for api in ("DescribeGroups", "OffsetFetch", "Metadata"):
            assert seen["kgroups_operator_coordinator_request_duration_seconds_count",
                        (("api", api),)] >= 1  # fmt: skip

        coordinator.stop()
        wait_until(lambda: _operator_metrics(port)["kgroups_operator_reconcile_errors_total", cg]
                   >= 2, 60, "failed reconciles to be counted", poll=0.5)  # fmt: skip
        coordinator.start()
        cp.kubectl("delete", "-n", ns, "cg", "billing", "--wait=true")
        wait_until(lambda: _operator_metrics(port)["kgroups_operator_watched_objects", cg] == 0,
                   30, "the deleted group to leave the watch", poll=0.5)  # fmt: skip
        assert _operator_metrics(port)["kgroups_operator_watched_objects", kt] == 1
    finally:
        op.stop()


def test_with_coordinator_replicas_a_group_is_mirrored_from_the_replica_that_owns_it(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The operator is given one replica; the group lives on another: its status still
    shows the group's offsets, read from (and naming) the replica that owns it."""
    from kgroups import admin
    from tests.integration.test_postgres_coordinator import Committer
    from tests.integration.test_replicas import Cluster
    from tests.postgres import PostgresServer

    cp, ns = controlplane, namespace
    pg = PostgresServer().start()
    (tmp_path / "replicas").mkdir()
    cluster = Cluster(pg.create_database(), tmp_path / "replicas")
    op: Operator | None = None
    try:
        cluster.start()
        entry, owner = cluster.replicas["r0"], cluster.replicas["r1"]
        group = cluster.names("billing", 1, on="r1")[0]
        asyncio.run(admin.create_topic("127.0.0.1", entry.port, "orders", 4))
        Committer(cluster.bootstrap, group, "orders").run_once(offset=7)
        op = Operator(cp.kubeconfig, entry.bootstrap, tmp_path / "operator.log",
                      "--namespace", ns)  # fmt: skip
        resource = {"apiVersion": "kgroups.io/v1alpha1", "kind": "ConsumerGroup",
                    "metadata": {"name": "billing"},
                    "spec": {"groupId": group, "topics": ["orders"]}}  # fmt: skip
        cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(resource))

        def mirrored() -> dict[str, Any] | None:
            status = _cg(cp, ns).get("status", {})
            return status if status.get("offsets") else None

        status = wait_until(mirrored, 30, "the group's offsets in its status", poll=0.3)
        assert status["coordinator"] == owner.bootstrap
        assert [(o["partition"], o["offset"]) for o in status["offsets"]] == [
            (p, 7) for p in range(4)
        ]
    finally:
        if op is not None:
            op.stop()
        cluster.stop()
        pg.close()


MODERN = """
apiVersion: kgroups.io/v1alpha1
kind: ConsumerGroup
metadata:
  name: modern
spec:
  topics: [orders]
  settings:
    consumerSessionTimeoutMs: 4000
    consumerHeartbeatIntervalMs: 500
  deletionPolicy: Delete
"""


def test_a_consumer_protocol_group_is_mirrored_with_its_epochs_and_settings(
    controlplane: ControlPlane,
    coordinator: Coordinator,
    operator: Operator,
    namespace: str,
    members: list[Member],
) -> None:
    """Java consumers with group.protocol=consumer (Kafka 4's KIP-848): the ConsumerGroup
    shows the group's type, epochs and each member's epoch and target; its spec.settings
    (a 4-s session, a 500-ms heartbeat interval, where the coordinator's defaults are 45 s
    and 5 s) reach the coordinator before the members join and rule their timing."""
    cp, ns = controlplane, namespace
    cp.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "topic.yaml"))
    cp.kubectl("apply", "-n", ns, "-f", "-", input=MODERN)
    wait_until(lambda: cp.get("cg", "modern", ns).get("status", {}).get("observedGeneration")
               == 1, 60, "ConsumerGroup observed", poll=0.2)  # fmt: skip
    for i in range(2):
        members.append(Member("java", coordinator.bootstrap, "modern", ["orders"],
                              client_id=f"j{i}", extra=("--group-protocol", "consumer")))  # fmt: skip

    def ready_with(n: int) -> dict[str, Any] | None:
        cg = cp.get("cg", "modern", ns)
        status = cg.get("status", {})
        ok = ((condition(cg, "Ready") or {}).get("status") == "True"
              and status.get("memberCount") == n and status["partitions"]["summary"] == "6/6")  # fmt: skip
        return cg if ok else None

    status = wait_until(lambda: ready_with(2), 60, "2 consumers owning 6/6")["status"]
    assert (status["groupType"], status["state"], status["protocol"]) == (
        "consumer", "Stable", "uniform")  # fmt: skip
    assert status["groupEpoch"] == status["assignmentEpoch"] == status["generation"]
    for m in status["members"]:
        assert m["memberEpoch"] == status["assignmentEpoch"]
        assert m["targetAssignment"] == m["assignment"]
    # The group's own 4-s session (not the coordinator's 45 s) fences a killed member.
    members[0].kill()
    killed_at = time.monotonic()
    wait_until(lambda: ready_with(1), 15, "the survivor owning 6/6")
    assert time.monotonic() - killed_at < 4 + 2 + 3  # session + the operator's poll + slack
