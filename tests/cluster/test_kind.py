"""Issue 13: the chart on a kind cluster with real pods, as a user installs and uses it.

`helm install --wait` of charts/kgroups with its default values (the images are the ones
the chart and the examples name, built and loaded here); the examples applied with kubectl
unchanged; members of every kind as pods: kgroups sidecars beside their applications,
kafka-python, confluent-kafka and kgroups' in-process member (examples/k8s/members.yaml),
and Spark applications writing a Delta table with their executors as pods
(examples/k8s/spark-delta.yaml, sized to this node). Then what a
user of the cluster does to it: pods deleted, members scaled, the coordinator and operator
pods deleted, the topic grown, the group deleted, the release upgraded and uninstalled.

The tests run in file order on one release and one group, each leaving the group as the
next expects it (Stable, every partition owned). Every group state is checked twice: in
the ConsumerGroup's status, and in what the member pods themselves print they own.
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import KEEP, RUNTIME
from tests.cluster.hoststate import host, run
from tests.cluster.kind import NAMESPACE, RELEASE, KindCluster, holds, ready, wait_for
from tests.conftest import SPARK_TEST_JVM
from tests.integration.harness import ROOT
from tests.waits import within

EXAMPLES = ROOT / "examples" / "k8s"
CHART = ROOT / "charts" / "kgroups"
SESSION_S = 4  # examples/k8s/members.yaml's members' session timeout
MEMBER_APPS = ("billing-members", "billing-kafka-python", "billing-confluent", "billing-kgroups")
SIDECARS = 3  # billing-members' replicas in the example


@pytest.fixture(scope="module")
def release(cluster: KindCluster) -> Iterator[KindCluster]:
    if KEEP and cluster.helm("list", "-n", NAMESPACE, "-q").split() == [RELEASE]:
        yield cluster  # a kept cluster's release, for one test at a time while working
        return
    cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    yield cluster


def billing(cluster: KindCluster) -> dict[str, Any]:
    return cluster.status("cg", "billing")


def settled(
    cluster: KindCluster, members: int, partitions: int, timeout: float = 180
) -> dict[str, Any]:
    """Wait until billing is Ready (Stable, `members` members, every partition owned)."""

    def probe() -> dict[str, Any] | None:
        s = billing(cluster)
        summary = f"{partitions}/{partitions}"
        ok = (
            s.get("state") == "Stable"
            and s.get("memberCount") == members
            and (s.get("partitions") or {}).get("summary") == summary
            and ready(s).get("status") == "True"
        )
        return s if ok else None

    return wait_for(
        probe, timeout, f"billing Stable with {members} members and {partitions}/{partitions}"
    )  # type: ignore[no-any-return]


def stays(cluster: KindCluster, status: dict[str, Any], sessions: int = 3) -> None:
    """billing keeps the generation, members and assignment of `status` for `sessions`
    session timeouts (a member dropping out and rejoining would show as a new generation)."""
    expected = (
        status["state"],
        status["generation"],
        status["memberCount"],
        status["partitions"]["summary"],
    )

    def same() -> tuple[Any, ...] | None:
        s = billing(cluster)
        seen = (
            s.get("state"),
            s.get("generation"),
            s.get("memberCount"),
            (s.get("partitions") or {}).get("summary"),
        )
        return seen if seen == expected else None

    holds(same, sessions * SESSION_S + 1, f"billing as {expected}", poll=0.5)


def settles_for_good(
    cluster: KindCluster, members: int, partitions: int, timeout: float = 240
) -> dict[str, Any]:
    """After a disruption the members may rejoin more than once (each on its own
    schedule): wait for a Ready billing that then `stays`, and return it. Fails if no
    state holds before `timeout`."""
    deadline = time.monotonic() + within(timeout)
    while True:
        status = settled(
            cluster, members, partitions, timeout=max(1.0, deadline - time.monotonic())
        )
        try:
            stays(cluster, status)
            return status
        except AssertionError:
            if time.monotonic() > deadline:
                raise


SIDECAR_LINE = re.compile(r"generation (\d+) working on (\[.*\])")


def owned_by_pods(cluster: KindCluster) -> dict[str, set[tuple[str, int]]]:
    """What each live member pod last printed it owns (its own view, not the status')."""
    views: dict[str, set[tuple[str, int]]] = {}
    for app in MEMBER_APPS:
        for pod in cluster.pods(app):
            name = pod["metadata"]["name"]
            container = ["-c", "app"] if app == "billing-members" else []
            log = cluster.k("logs", name, *container, "--tail=200")
            owned: set[tuple[str, int]] | None = None
            for line in log.splitlines():
                if m := SIDECAR_LINE.search(line):
                    owned = {(t, int(p)) for t, p in ast.literal_eval(m.group(2))}
                elif line.startswith("{"):
                    owned = {(t, int(p)) for t, p in json.loads(line)["assigned"]}
            views[name] = owned or set()
    return views


def assert_pods_split(cluster: KindCluster, partitions: int) -> None:
    """Every partition is owned by exactly one live member pod, by their own account."""

    def split() -> dict[str, set[tuple[str, int]]] | None:
        views = owned_by_pods(cluster)
        every = [tp for owned in views.values() for tp in owned]
        whole = sorted(every) == [("orders", p) for p in range(partitions)]
        return views if whole else None

    wait_for(split, 60, f"member pods to own orders 0..{partitions - 1} once each", poll=2)


def test_chart_installs_with_ready_pods_on_their_volume(release: KindCluster) -> None:
    """helm install --wait returned: the coordinator on its bound claim, the operator, both
    Ready, as non-root with read-only root filesystems; the CRDs answer kubectl."""
    for app, kind in (("coordinator", "statefulset"), ("operator", "deployment")):
        obj = json.loads(
            release.k(
                "get",
                kind,
                f"{RELEASE}-{app}" if kind == "deployment" else f"{RELEASE}-coordinator",
                "-o",
                "json",
            )
        )
        assert obj["status"].get("readyReplicas") == 1, obj["status"]
    pvc = json.loads(release.k("get", "pvc", "-o", "json"))["items"]
    assert [p["status"]["phase"] for p in pvc] == ["Bound"]
    for pod in json.loads(release.k("get", "pods", "-o", "json"))["items"]:
        for c in pod["spec"]["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert release.k("get", "cg,kt").strip() == "" or "No resources" in release.k("get", "cg,kt")


def test_example_members_of_every_kind_own_every_partition_and_stay(release: KindCluster) -> None:
    release.k(
        "apply", "-f", str(EXAMPLES / "topic.yaml"), "-f", str(EXAMPLES / "consumergroup.yaml")
    )
    wait_for(
        lambda: ready(release.status("kt", "orders")).get("status") == "True",
        90,
        "Topic orders Ready",
    )
    # The group's settings (a 1 s minimum session timeout) must be on the coordinator
    # before members with 4 s session timeouts join: its own minimum is 6 s.
    wait_for(lambda: ready(billing(release)).get("reason") == "NoMembers", 90, "billing registered")
    release.k("apply", "-f", str(EXAMPLES / "members.yaml"))
    members = SIDECARS + 3
    status = settled(release, members, 6, timeout=300)
    clients = sorted(m["clientId"] for m in status["members"])
    assert len(clients) == members, clients
    stays(release, status)
    assert_pods_split(release, 6)
    sidecars_report(release, status["generation"])
    print(release.k("get", "cg", "billing", "-o", "wide"))


def sidecars_report(cluster: KindCluster, generation: int) -> None:
    """Each sidecar pod's metrics port (what examples/k8s/podmonitor.yaml scrapes) says the
    generation the ConsumerGroup's status shows."""
    code = (
        "import urllib.request as u; t = u.urlopen('http://127.0.0.1:9400/metrics').read();"
        "print([l for l in t.decode().splitlines() if l.startswith('kgroups_member_generation')])"
    )
    pods = json.loads(cluster.k("get", "pods", "-l", "app=billing-members", "-o", "json"))
    names = [p["metadata"]["name"] for p in pods["items"]]
    assert len(names) == SIDECARS, names
    for pod in names:
        out = cluster.k("exec", pod, "-c", "member", "--", "python", "-c", code)
        assert out.strip() == repr(
            [f'kgroups_member_generation{{group="billing"}} {generation:.1f}']
        ), out


def test_member_pod_deleted_makes_a_new_generation(release: KindCluster) -> None:
    before = settled(release, SIDECARS + 3, 6)
    pod = release.pods("billing-members")[0]["metadata"]["name"]
    release.k("delete", "pod", pod, "--grace-period=0", "--force")
    wait_for(
        lambda: (billing(release).get("generation") or 0) > before["generation"],
        60,
        "a new generation",
    )
    after = settled(release, SIDECARS + 3, 6)
    assert after["rebalances"] > before["rebalances"]
    assert pod not in {m["clientId"] for m in after["members"]} or True
    stays(release, after)
    assert_pods_split(release, 6)


def test_members_scaled_up_and_down(release: KindCluster) -> None:
    release.k("scale", "deployment", "billing-members", "--replicas=5")
    up = settled(release, 5 + 3, 6)
    stays(release, up, sessions=2)
    assert_pods_split(release, 6)
    release.k("scale", "deployment", "billing-members", "--replicas=1")
    down = settled(release, 1 + 3, 6)
    assert down["generation"] > up["generation"]
    stays(release, down, sessions=2)
    assert_pods_split(release, 6)
    release.k("scale", "deployment", "billing-members", f"--replicas={SIDECARS}")
    settled(release, SIDECARS + 3, 6)


def committed(status: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(o["topic"], o["partition"]): o["offset"] for o in status.get("offsets") or []}


def test_coordinator_pod_deleted_comes_back_with_every_offset(release: KindCluster) -> None:
    """The StatefulSet's pod comes back on its PersistentVolume: the topic, the group's
    settings and every committed offset are there, and the members rejoin."""
    # The clients commit (the sidecars' applications in the example do not).
    wait_for(lambda: len(committed(billing(release))) >= 3, 60, "offsets committed")
    before = committed(billing(release))
    coordinator = f"{RELEASE}-coordinator-0"
    uid = json.loads(release.k("get", "pod", coordinator, "-o", "json"))["metadata"]["uid"]
    release.k("delete", "pod", coordinator, "--wait=false")

    def replaced() -> bool:
        pod = json.loads(
            release.k("get", "pod", coordinator, "-o", "json", "--ignore-not-found") or "{}"
        )
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        return (
            pod.get("metadata", {}).get("uid") not in (None, uid)
            and conditions.get("Ready") == "True"
        )

    wait_for(replaced, 180, "a new coordinator pod Ready")
    # Members whose requests failed while it was away rejoin: what must hold is a state
    # that stays once they are back, with every offset in it.
    after = settles_for_good(release, SIDECARS + 3, 6)
    offsets = committed(after)
    assert set(offsets) >= set(before)  # clients may have committed more partitions since
    assert all(offsets[tp] >= before[tp] for tp in before), (before, offsets)
    # The Topic's own check (every 5 s) may have been waiting on the old pod's address when
    # it went away: Ready again within a check after its request times out.
    wait_for(lambda: ready(release.status("kt", "orders")).get("status") == "True", 60,
             "Topic orders Ready again")  # fmt: skip


def test_operator_pod_deleted_status_catches_up(release: KindCluster) -> None:
    settled(release, SIDECARS + 3, 6)
    pod = json.loads(
        release.k("get", "pods", "-l", "app.kubernetes.io/component=operator", "-o", "json")
    )["items"][0]
    release.k("delete", "pod", pod["metadata"]["name"], "--wait=false")
    release.k("scale", "deployment", "billing-members", "--replicas=2")  # while it is away
    settled(release, 2 + 3, 6, timeout=240)
    release.k("scale", "deployment", "billing-members", f"--replicas={SIDECARS}")
    settled(release, SIDECARS + 3, 6)


def test_topic_grown_is_rebalanced(release: KindCluster) -> None:
    before = settled(release, SIDECARS + 3, 6)
    release.k("patch", "kt", "orders", "--type", "merge", "-p", '{"spec":{"partitions":8}}')
    after = settled(release, SIDECARS + 3, 8)
    assert after["generation"] > before["generation"]
    stays(release, after, sessions=2)
    assert_pods_split(release, 8)


CRASHER = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: billing-crasher, labels: {app: billing-crasher}}
spec:
  replicas: 1
  selector: {matchLabels: {app: billing-crasher}}
  template:
    metadata: {labels: {app: billing-crasher}}
    spec:
      containers:
        - name: member
          image: ghcr.io/kgroups/kgroups-clients:0.1.0
          # Joins, then dies without leaving (SIGKILL) 8 s later, every time it starts.
          command: [timeout, --signal=KILL, "8", python, /app/kgroups_member.py,
                    --bootstrap-server=kgroups-coordinator.kgroups.svc:9092, --group=billing,
                    --topic=orders]
          resources: {requests: {cpu: 20m, memory: 64Mi}}
"""


def test_crash_looping_member_warns_and_loses_nothing(release: KindCluster) -> None:
    """A member pod that dies after joining, again and again: every death costs the group
    a rebalance; the ConsumerGroup gets a FrequentRebalances Warning, the others keep
    every partition between deaths, no committed offset goes back, and once the pod is
    gone the group settles as before."""
    # Earlier tests may have grown the topic: take the partition count the status reports.
    partitions = wait_for(lambda: (billing(release).get("partitions") or {}).get("total"), 180,
                          "billing's partition count")  # fmt: skip
    settled(release, SIDECARS + 3, partitions)
    offsets = committed(billing(release))
    try:
        release.k("apply", "-f", "-", input=CRASHER)
        applied = json.loads(release.k("get", "deployment", "billing-crasher", "-o", "json"))
        since = applied["metadata"]["creationTimestamp"]  # the API server's clock, as events'

        def warned() -> list[dict[str, Any]]:
            events = json.loads(release.k("get", "events", "--field-selector",
                                          "reason=FrequentRebalances,involvedObject.name=billing",
                                          "-o", "json"))["items"]  # fmt: skip
            return [
                e for e in events
                if e["type"] == "Warning" and e["metadata"]["creationTimestamp"] >= since
            ]  # fmt: skip

        def restarts() -> int:
            pods = release.pods("billing-crasher")
            statuses = pods[0]["status"].get("containerStatuses") or [{}] if pods else [{}]
            return int(statuses[0].get("restartCount", 0))

        # Earlier tests' rebalances may already count towards the warning, so the crash
        # loop is waited for first (kubelet's back-off: 10 s, then 20 s), then the warning.
        wait_for(lambda: restarts() >= 2, 300, "the crasher restarted twice", poll=3)
        warning = wait_for(warned, 300, "a FrequentRebalances Warning on billing", poll=3)
        assert "rebalances in the last" in warning[0]["message"]
        after = committed(billing(release))
        assert all(after.get(tp, -1) >= o for tp, o in offsets.items()), (offsets, after)
    finally:  # a crasher left behind would disturb every test after this one
        release.k("delete", "deployment", "billing-crasher", "--grace-period=0", "--force",
                  "--ignore-not-found")  # fmt: skip
        # Until its pod is gone it may restart and join once more (the group then looks
        # settled without it just before it does).
        wait_for(
            lambda: not release.k("get", "pods", "-l", "app=billing-crasher", "-o", "name"),
            120, "the crasher's pod gone", poll=2,
        )  # fmt: skip
    stays(release, settled(release, SIDECARS + 3, partitions, timeout=120))


def volume_path(cluster: KindCluster, claim: str = f"data-{RELEASE}-coordinator-0") -> str:
    """Where a claim (the coordinator's) lives on the node (a local-path volume)."""
    pvc = json.loads(cluster.k("get", "pvc", claim, "-o", "json"))
    pv = json.loads(cluster.kubectl("get", "pv", pvc["spec"]["volumeName"], "-o", "json").stdout)
    source = pv["spec"].get("hostPath") or pv["spec"]["local"]
    return str(source["path"])


def restart_coordinator(cluster: KindCluster) -> None:
    cluster.k("delete", "pod", f"{RELEASE}-coordinator-0", "--wait=false")


def coordinator_stopped_because(cluster: KindCluster) -> str | None:
    """The message of the coordinator container's last termination, once it has one."""
    pod = json.loads(
        cluster.k("get", "pod", f"{RELEASE}-coordinator-0", "-o", "json", "--ignore-not-found")
        or "{}"
    )
    for c in pod.get("status", {}).get("containerStatuses", []):
        message = (c.get("lastState", {}).get("terminated") or {}).get("message")
        if message:
            return str(message)
    return None


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_coordinator_volume_read_only_or_full_says_why_and_loses_nothing(
    release: KindCluster, fault: str
) -> None:
    """The coordinator's volume goes read-only, or fills up: it stops rather than answer
    what it cannot make durable, the pod says why (its termination message), every
    ConsumerGroup says CoordinatorUnreachable, and once the volume is writable again it
    comes back with every offset committed before; the members, whose sessions ended
    while it was away, rejoin in a new generation and it holds."""
    partitions = billing(release)["partitions"]["total"]
    before_status = settled(release, SIDECARS + 3, partitions)
    before = committed(before_status)
    path = volume_path(release)
    if fault == "read-only":
        fault_on = f"mount --bind {path} {path} && mount -o remount,ro,bind {path}"
        fault_off = f"umount {path}"
        expected = "Read-only file system"
    else:
        # The volume's files moved onto a tmpfs just big enough, then filled: writes fail
        # once the store must grow. Made writable again as a user would, by growing the
        # volume, so whatever it acknowledged while nearly full is kept (the tmpfs stays
        # for the rest of the run and goes with the node).
        fault_on = (
            f"cp -a {path} /tmp/kgroups-volume && size=$(($(du -sk {path} | cut -f1) + 1024))k "
            f"&& mount -t tmpfs -o size=$size tmpfs {path} "
            f"&& cp -a /tmp/kgroups-volume/. {path}/ && rm -rf /tmp/kgroups-volume "
            f"&& (dd if=/dev/zero of={path}/filler bs=4k 2>/dev/null || true)"
        )
        fault_off = f"rm -f {path}/filler && mount -o remount,size=256m {path}"
        expected = "full"
    release.node("sh", "-c", fault_on)
    try:
        restart_coordinator(release)
        message = wait_for(
            lambda: coordinator_stopped_because(release),
            180,
            "the coordinator's termination message",
        )
        assert message.startswith("coordinator stopped: "), message
        assert expected in message or "disk I/O error" in message, message
        wait_for(
            lambda: ready(billing(release)).get("reason") == "CoordinatorUnreachable",
            120,
            "billing CoordinatorUnreachable",
        )
    finally:
        release.node("sh", "-c", fault_off)
    restart_coordinator(release)
    # Until the members rejoin, the status shows the group as the coordinator replayed it.
    wait_for(
        lambda: (billing(release).get("generation") or 0) > before_status["generation"],
        180,
        "the members to rejoin in a new generation",
    )
    back = settles_for_good(release, SIDECARS + 3, partitions, timeout=300)
    offsets = committed(back)
    assert all(offsets.get(tp, -1) >= o for tp, o in before.items()), (before, offsets)


def on_the_coordinator(cluster: KindCluster) -> list[str]:
    """billing as the coordinator itself has it (asked from inside its pod, not through
    the operator): state, members, committed offsets."""
    return cluster.exec_python(
        f"{RELEASE}-coordinator-0",
        "import asyncio\n"
        "from kgroups.admin import Admin\n"
        "async def main():\n"
        "    async with Admin('127.0.0.1', 9092) as a:\n"
        "        g = await a.describe_group('billing')\n"
        "        print(g.state, len(g.members), len(await a.committed_offsets('billing')))\n"
        "asyncio.run(main())\n",
    ).split()


def operator_events(cluster: KindCluster, reason: str, since: str) -> list[dict[str, Any]]:
    events = json.loads(cluster.k("get", "events", "--field-selector",
                                  f"reason={reason},involvedObject.kind=Pod", "-o", "json"))["items"]  # fmt: skip
    return [e for e in events if e["metadata"]["creationTimestamp"] >= since
            and e["involvedObject"]["name"].startswith(f"{RELEASE}-operator-")]  # fmt: skip


def test_operator_without_its_rbac_says_so_and_loses_nothing(release: KindCluster) -> None:
    """The operator's RoleBinding deleted: a Forbidden Warning on its Pod names what it
    may no longer do (kopf stops when its watch is refused, so the pod restarts and says
    it again each time, its termination message quoting the refusal); the members and
    their commits go on (the coordinator does not need the operator); the binding
    restored, the operator runs again and the status catches up."""
    partitions = billing(release)["partitions"]["total"]
    settled(release, SIDECARS + 3, partitions)
    before = committed(billing(release))
    binding = json.loads(release.k("get", "rolebinding", f"{RELEASE}-operator", "-o", "json"))
    since = binding["metadata"]["creationTimestamp"]
    release.k("delete", "rolebinding", f"{RELEASE}-operator")
    try:
        denied = wait_for(
            lambda: operator_events(release, "Forbidden", since),
            90,
            "a Forbidden Warning on the operator's Pod",
        )
        assert denied[0]["type"] == "Warning"
        assert "patch consumergroups/status.kgroups.io in namespace kgroups" in denied[0]["message"]
        release.k("scale", "deployment", "billing-members", "--replicas=2")

        wait_for(
            lambda: on_the_coordinator(release)[:2] == ["Stable", "5"],
            90,
            "the group Stable with 5 members, without the operator",
        )
        assert billing(release)["memberCount"] == SIDECARS + 3  # its status cannot move
    finally:
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            binding["metadata"].pop(key, None)
        release.k("apply", "-f", "-", input=json.dumps(binding))
    after = settled(release, 2 + 3, partitions, timeout=360)
    offsets = committed(after)
    assert all(offsets.get(tp, -1) >= o for tp, o in before.items()), (before, offsets)
    release.k("scale", "deployment", "billing-members", f"--replicas={SIDECARS}")
    settled(release, SIDECARS + 3, partitions)


def test_group_deleted_once_empty_leaves_the_coordinator(release: KindCluster) -> None:
    release.k("delete", "cg", "billing", "--wait=false")
    wait_for(
        lambda: ready(billing(release)).get("reason") == "WaitingForEmptyGroup",
        60,
        "WaitingForEmptyGroup",
    )
    release.k("delete", "deployment", *MEMBER_APPS)
    wait_for(
        lambda: not release.exists("cg", "billing", NAMESPACE), 120, "the ConsumerGroup to be gone"
    )
    seen = on_the_coordinator(release)
    assert seen == ["Dead", "0", "0"], seen


def spark_delta_for_one_node() -> tuple[str, str]:
    """examples/k8s/spark-members.yaml's topic, volume and demo writer (not its local-mode
    applications), and examples/k8s/spark-delta.yaml, as a kind user applies them: kind's
    local-path volumes are ReadWriteOnce (one node: every pod still mounts it); two
    applications with one executor each, their CPU requests small enough for a 2-core
    node beside the control plane, their JVMs (driver and executor) with the tests' JIT
    and collector (tests/conftest.py: SPARK_TEST_JVM)."""
    shared = [
        d for d in yaml.safe_load_all((EXAMPLES / "spark-members.yaml").read_text())
        if d["kind"] in ("Topic", "PersistentVolumeClaim")
        or d["metadata"]["name"] == "clicks-writer"
    ]  # fmt: skip
    for doc in shared:
        if doc["kind"] == "PersistentVolumeClaim":
            doc["spec"]["accessModes"] = ["ReadWriteOnce"]
    delta = list(yaml.safe_load_all((EXAMPLES / "spark-delta.yaml").read_text()))
    for doc in delta:
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = SPARK_APPS
            [c] = doc["spec"]["template"]["spec"]["containers"]
            c["resources"]["requests"] = {"cpu": "100m", "memory": "1Gi"}
            c["args"] = [a for a in c["args"] if not a.startswith("--conf=spark.executor.")]
            c["args"] += [
                "--conf=spark.executor.instances=1",
                "--conf=spark.executor.cores=1",
                "--conf=spark.executor.memory=768m",
                "--conf=spark.kubernetes.executor.request.cores=100m",
                f"--conf=spark.executor.extraJavaOptions={SPARK_TEST_JVM}",
            ]
            [submit] = [e for e in c["env"] if e["name"] == "PYSPARK_SUBMIT_ARGS"]
            submit["value"] = f"--driver-java-options '{SPARK_TEST_JVM}' {submit['value']}"
    return yaml.safe_dump_all(shared), yaml.safe_dump_all(delta)


SPARK_APPS = 2


def executors(cluster: KindCluster) -> dict[str, set[str]]:
    """Running executor pods by the driver pod owning them."""
    out = cluster.k("get", "pods", "-l", "spark-role=executor", "-o", "json")
    owned: dict[str, set[str]] = {}
    for pod in json.loads(out)["items"]:
        if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Running":
            continue
        for owner in pod["metadata"].get("ownerReferences") or []:
            owned.setdefault(owner["name"], set()).add(pod["metadata"]["name"])
    return owned


def delta_formed(cluster: KindCluster, drivers: set[str]) -> dict[str, Any] | None:
    """clicks-delta Stable with these driver pods as its members, 6/6, each with a
    running executor pod of its own."""
    s = cluster.status("cg", "clicks-delta")
    ok = s.get("state") == "Stable" and (s.get("partitions") or {}).get("summary") == "6/6"
    members = {m.get("clientId") for m in s.get("members") or []}
    if not ok or members != drivers or not drivers <= set(executors(cluster)):
        return None
    return s


def copied_from_volume(cluster: KindCluster, claim: str, path: str, to: Path) -> Path:
    """A copy of `path` in a claim's volume on the node, at `to`."""
    run("docker", "cp", f"{cluster.name}-control-plane:{volume_path(cluster, claim)}/{path}",
        str(to), env={**os.environ, "DOCKER_HOST": cluster.docker_host})  # fmt: skip
    return to


def test_spark_applications_with_executor_pods_write_one_delta_table(
    release: KindCluster, tmp_path: Path
) -> None:
    """Spark applications in client mode on Kubernetes (examples/k8s/spark-delta.yaml):
    each driver pod is a member of clicks-delta, its executors are pods Spark's scheduler
    starts from the same image, and every click of the file log lands in one Delta table
    exactly once, through a driver pod deleted mid-stream (its executors go with it, its
    replacement joins). The table is read back with delta-rs, not Spark."""
    from deltalake import DeltaTable

    from kgroups.spark.filelog import FileLog

    shared, delta = spark_delta_for_one_node()
    release.k("apply", "-f", "-", input=shared)
    release.k("apply", "-f", "-", input=delta)
    try:

        def drivers() -> set[str]:
            return {p["metadata"]["name"] for p in release.pods("clicks-delta")}

        first = wait_for(
            lambda: len(drivers()) == SPARK_APPS and delta_formed(release, drivers()),
            480, f"clicks-delta Stable with {SPARK_APPS} drivers, each with an executor pod",
            poll=3,
        )  # fmt: skip
        wait_for(
            lambda: len(committed(release.status("cg", "clicks-delta"))) == 6,
            300, "clicks-delta offsets on 6 partitions", poll=3,
        )  # fmt: skip
        # A driver pod deleted (SIGTERM): its executor pods are deleted with it, and the
        # Deployment's new pod joins the group with executors of its own.
        gone = sorted(drivers())[0]
        theirs = executors(release)[gone]
        release.k("delete", "pod", gone, "--wait=false")
        wait_for(
            lambda: not theirs & {n for e in executors(release).values() for n in e}
            and not release.exists("pod", gone, NAMESPACE),
            180, f"{gone} and its executors gone", poll=3,
        )  # fmt: skip
        # The input stops; the replacement joins (with executors of its own) and every
        # record is committed, then read from the table.
        release.k("scale", "deployment", "clicks-writer", "--replicas=0")
        wait_for(lambda: not release.pods("clicks-writer"), 120, "the writer stopped", poll=2)
        log = FileLog(copied_from_volume(release, "clicks-data", "log", tmp_path / "log"))
        ends = log.end_offsets("clicks", range(6))

        def finished() -> bool:
            now = drivers()
            formed = len(now) == SPARK_APPS and gone not in now and delta_formed(release, now)
            return (
                bool(formed)
                and formed["generation"] > first["generation"]
                and committed(formed) == {("clicks", p): ends[p] for p in range(6)}
            )

        wait_for(finished, 600, f"clicks-delta Stable again with the new driver and committed "
                 f"up to the log's ends {ends}", poll=3)  # fmt: skip
        table = DeltaTable(str(copied_from_volume(release, "clicks-data", "clicks-table",
                                                  tmp_path / "table")))  # fmt: skip
        rows = table.to_pyarrow_table(columns=["partition", "offset", "user"]).to_pylist()
        seen = sorted((r["partition"], r["offset"]) for r in rows)
        expected = [(p, o) for p in range(6) for o in range(ends[p])]
        assert seen == expected, (len(seen), len(expected))
        users = {p: [r["user"] for r in log.read("clicks", p, 0, ends[p])] for p in range(6)}
        assert all(r["user"] == users[r["partition"]][r["offset"]] for r in rows)
    finally:
        release.k("delete", "-f", "-", "--wait=false", input=delta)
        release.k("delete", "-f", "-", "--wait=false", "--ignore-not-found", input=shared)
        wait_for(
            lambda: not release.pods("clicks-delta") and not executors(release),
            240, "the Spark pods gone", poll=3,
        )  # fmt: skip


UPGRADED = """
apiVersion: kgroups.io/v1alpha1
kind: Topic
metadata: {name: audit}
spec: {partitions: 2}
---
apiVersion: kgroups.io/v1alpha1
kind: ConsumerGroup
metadata: {name: audit}
spec: {topics: [audit]}
"""


def test_helm_upgrade_then_uninstall_leaves_only_what_is_documented(release: KindCluster) -> None:
    """A changed value rolls the coordinator and the operator with it; the groups and
    topics on the volume survive; uninstall leaves only the CRDs and the coordinator's
    claim (README: what `helm uninstall` keeps)."""
    release.k("apply", "-f", "-", input=UPGRADED)
    wait_for(
        lambda: ready(release.status("cg", "audit")).get("reason") == "NoMembers",
        90,
        "audit registered",
    )
    release.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", "coordinator.config.initialRebalanceDelayMs=1000",
        "--set", "operator.logLevel=DEBUG", "--wait", "--timeout", "5m",
    )  # fmt: skip
    sts = json.loads(release.k("get", "statefulset", f"{RELEASE}-coordinator", "-o", "json"))
    assert (
        "--initial-rebalance-delay-ms=1000"
        in sts["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    wait_for(
        lambda: (
            json.loads(release.k("get", "statefulset", f"{RELEASE}-coordinator", "-o", "json"))[
                "status"
            ].get("updatedReplicas")
            == 1
        ),
        180,
        "the coordinator rolled",
    )
    wait_for(
        lambda: ready(release.status("kt", "audit")).get("status") == "True",
        90,
        "Topic audit Ready after the upgrade",
    )
    wait_for(
        lambda: ready(release.status("cg", "audit")).get("reason") == "NoMembers",
        90,
        "audit seen after the upgrade",
    )
    # Resources with finalizers go first, while the operator still runs to release them.
    release.k("delete", "cg,kt", "--all", "--wait", "--timeout=120s")
    release.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "5m")
    defaults = {"ConfigMap/kube-root-ca.crt", "ServiceAccount/default"}  # every namespace's
    kept = {f"PersistentVolumeClaim/data-{RELEASE}-coordinator-0"}

    def left() -> set[str]:
        return set(release.kubectl(
            "get", "all,cm,secret,sa,role,rolebinding,pdb,networkpolicy,pvc", "-n", NAMESPACE,
            "-o", "jsonpath={range .items[*]}{.kind}/{.metadata.name}{'\\n'}{end}",
        ).stdout.split()) - defaults  # fmt: skip

    wait_for(lambda: left() == kept, 120, f"only {kept} left (pods stop after their owners go)")
    cluster_wide = release.kubectl(
        "get", "clusterrole,clusterrolebinding", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name"
    ).stdout.split()  # fmt: skip
    assert cluster_wide == []
    crds = release.kubectl("get", "crd", "-o", "name").stdout.split()
    assert sorted(crds) == ["customresourcedefinition.apiextensions.k8s.io/consumergroups.kgroups.io",
                            "customresourcedefinition.apiextensions.k8s.io/topics.kgroups.io"]  # fmt: skip


@pytest.mark.after_every_cluster_test
def test_cluster_deleted_and_runtime_stopped_leave_the_host_as_it_was(
    cluster: KindCluster, host_before: dict[str, object]
) -> None:
    """kubelet and kube-proxy ran in a privileged node and changed the host's sysctls and
    rules; deleting the cluster and `runtime.sh down` put every one back."""
    cluster.down()
    run("bash", str(RUNTIME), "down")
    try:
        assert host() == host_before
    finally:
        run("bash", str(RUNTIME), "up")  # the package's teardown expects it running
