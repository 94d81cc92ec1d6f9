"""examples/k8s/spark-members.yaml, read as Kubernetes would run it: the member pods'
command line is one examples/spark/clickcount.py accepts, reading and writing where the
pod mounts its volumes, in the image examples/k8s/Dockerfile.spark builds; the demo
writer fills the file log the members read. (tests/e2e/test_spark_manifests.py has a
real API server accept the file.)"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from kgroups.spark import app
from kgroups.spark.filelog import FileLog

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "k8s" / "spark-members.yaml"
DOCKERFILE = ROOT / "examples" / "k8s" / "Dockerfile.spark"


DELTA = ROOT / "examples" / "k8s" / "spark-delta.yaml"


def documents(example: Path = EXAMPLE) -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def pod(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = documents()[("Deployment", name)]["spec"]["template"]["spec"]
    return spec


FIELDS = {"metadata.namespace": "kgroups", "status.podIP": "10.244.0.17"}


def expand(args: list[str], env: list[dict[str, Any]], pod_name: str) -> list[str]:
    """$(VAR) in args as the kubelet expands them (fieldRef: the pod's name, its
    namespace, its IP)."""
    values: dict[str, str] = {}
    fields = {**FIELDS, "metadata.name": pod_name}
    for var in env:
        if "value" in var:
            values[var["name"]] = expand_one(var["value"], values)
        elif path := var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath"):
            values[var["name"]] = fields[path]
    return [expand_one(a, values) for a in args]


def expand_one(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1], m[0]), text)


def clickcount(script: str = "clickcount.py") -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"{script.removesuffix('.py')}_example", ROOT / "examples" / "spark" / script
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Accepted(Exception):
    """clickcount.main got as far as building its Spark session."""


def parse(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
          script: str = "clickcount.py") -> Any:  # fmt: skip
    """The example's own parsing and checks of `argv` under `env`; stops before Spark."""
    import pyspark.sql

    parsed: list[argparse.Namespace] = []
    real = argparse.ArgumentParser.parse_args

    def spy(self: argparse.ArgumentParser, *a: Any, **kw: Any) -> Any:
        parsed.append(real(self, *a, **kw))
        return parsed[-1]

    class Builder:
        def __getattr__(self, name: str) -> Any:
            raise Accepted

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", Builder())
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
    for name in ("SPARK_MASTER", "SPARK_LOCAL_IP", "PYSPARK_PYTHON", "KGROUPS_SPARK_JARS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Accepted):
        clickcount(script).main(argv)
    return parsed[-1]


def member_command(monkeypatch: pytest.MonkeyPatch, source: str | None = None) -> Any:
    spec = pod("clicks-spark")
    container = spec["containers"][0]
    assert container["command"][:2] == ["python", "examples/spark/clickcount.py"]
    args = expand(container["args"], container["env"], "clicks-spark-7d9f-abcde")
    if source is not None:
        args = [f"--source={source}" if a.startswith("--source=") else a for a in args]
    env = {v["name"]: v["value"] for v in container["env"] if "value" in v}
    return parse(args, env, monkeypatch)


def test_the_member_pods_command_line_is_accepted_by_clickcount(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = member_command(monkeypatch)
    docs = documents()
    assert args.group == docs[("ConsumerGroup", "clicks")]["metadata"]["name"]
    assert [args.topic] == docs[("ConsumerGroup", "clicks")]["spec"]["topics"]
    assert args.topic == docs[("Topic", "clicks")]["metadata"]["name"]
    assert args.bootstrap == "kgroups-coordinator.kgroups.svc:9092"  # as members.yaml
    assert args.name == "clicks-spark-7d9f-abcde"  # each pod its own client id, not a pid
    assert args.master == "local[2]"
    assert args.source == "files:/data/log"
    assert args.output == "/data/out"
    assert args.max_records == 10_000


def test_the_commented_kafka_source_is_accepted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    line = next(x for x in EXAMPLE.read_text().splitlines() if "# - --source=kafka:" in x)
    source = line.split("--source=", 1)[1].strip()
    assert member_command(monkeypatch, source).source == source


def test_the_member_pod_is_sized_and_mounted_for_local_spark() -> None:
    deployment = documents()[("Deployment", "clicks-spark")]
    assert deployment["spec"]["replicas"] == 3
    spec = pod("clicks-spark")
    container = spec["containers"][0]
    env = {v["name"]: v.get("value") for v in container["env"]}
    threads = int(re.fullmatch(r"local\[(\d+)\]", env["SPARK_MASTER"])[1])  # type: ignore[index]
    resources = container["resources"]
    assert int(resources["requests"]["cpu"]) == threads
    assert "cpu" not in resources.get("limits", {})
    heap = re.search(r"--driver-memory (\d+)g", env["PYSPARK_SUBMIT_ARGS"])
    assert heap is not None
    assert env["PYSPARK_SUBMIT_ARGS"].endswith("pyspark-shell")
    gib = {k: int(v.removesuffix("Gi")) for k, v in resources["limits"].items()}
    assert gib["memory"] > int(heap[1]) + 1  # the heap, the JVM's own, the Python workers
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    # SIGTERM finishes a batch, commits, publishes and leaves: not the default 30 s.
    assert spec["terminationGracePeriodSeconds"] >= 60
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == "clicks-data"
    assert "emptyDir" in volumes[mounts["/tmp"]]  # Spark's only writable place
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    claim = documents()[("PersistentVolumeClaim", "clicks-data")]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"]


def test_the_image_is_the_one_dockerfile_spark_builds() -> None:
    dockerfile = DOCKERFILE.read_text()
    tag = re.search(r"docker build -f examples/k8s/Dockerfile.spark -t (\S+) \.", dockerfile)
    assert tag is not None
    for name in ("clicks-spark", "clicks-writer"):
        assert {c["image"] for c in pod(name)["containers"]} == {tag[1]}
    # The command runs from the image's WORKDIR, where the example is copied.
    assert "WORKDIR /app\nCOPY examples/spark ./examples/spark\n" in dockerfile
    assert (ROOT / pod("clicks-spark")["containers"][0]["command"][1]).is_file()
    # Its user is the pods' (the volume's group), Java and the spark extra are in it.
    assert "USER 65532:65532" in dockerfile
    assert "openjdk-17-jre-headless" in dockerfile
    assert "'kgroups[spark]'" in dockerfile
    assert "KGROUPS_SPARK_JARS=/opt/spark-jars" in dockerfile
    # The jars tools/spark/pom.xml names, fetched on the host (no Maven inside a build).
    assert "COPY jars /opt/spark-jars\n" in dockerfile
    assert '"$(bash tools/spark/fetch.sh)" jars' in dockerfile


def test_the_demo_writer_fills_the_file_log_the_members_read(tmp_path: Path) -> None:
    writer = pod("clicks-writer")["containers"][0]
    script = writer["args"][0].replace('"/data/log"', repr(str(tmp_path)))
    assert script != writer["args"][0]
    partitions = documents()[("Topic", "clicks")]["spec"]["partitions"]
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        log = FileLog(tmp_path)
        deadline = time.monotonic() + 30
        while min(log.end_offsets("clicks", range(partitions)).values()) < 100:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the writer wrote nothing"
            time.sleep(0.1)
    finally:
        proc.terminate()  # its SIGTERM handler exits at once (it is PID 1 in the pod)
        assert proc.wait(timeout=10) == 0
    assert sorted(p.name for p in (tmp_path / "clicks").iterdir()) == [
        f"{p}.jsonl" for p in range(partitions)
    ]
    assert all(isinstance(r["user"], str) for r in log.read("clicks", 0, 0, 100))


def test_the_delta_pods_command_line_is_accepted_by_clicks_to_delta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docs, shared = documents(DELTA), documents()
    spec = docs[("Deployment", "clicks-delta")]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["command"] == ["python", "examples/spark/clicks_to_delta.py"]
    args = parse(expand(container["args"], container["env"], "clicks-delta-5c4b-xyz12"),
                 {v["name"]: v["value"] for v in container["env"] if "value" in v},
                 monkeypatch, "clicks_to_delta.py")  # fmt: skip
    assert (
        args.group == "clicks-delta" == docs[("ConsumerGroup", "clicks-delta")]["metadata"]["name"]
    )
    assert [args.topic] == docs[("ConsumerGroup", "clicks-delta")]["spec"]["topics"]
    assert ("Topic", args.topic) in shared  # spark-members.yaml's
    assert (args.table, args.format, args.source) == (
        "/data/clicks-table",
        "delta",
        "files:/data/log",
    )
    assert args.name == "clicks-delta-5c4b-xyz12"
    assert not args.assignor  # cooperative-sticky, the pipelines' default
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    claim = volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"]
    assert ("PersistentVolumeClaim", claim) in shared
    assert container["image"] == pod("clicks-spark")["containers"][0]["image"]


def test_the_delta_pods_run_their_executors_as_pods_that_can_reach_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark's client mode on Kubernetes as the example sets it up: the executors are pods
    of the same image, mounting the driver's volume (they read the log and write the
    table's files), owned by the driver's pod, reaching the driver at its pod IP; the
    driver's ServiceAccount may manage exactly those pods and their ConfigMap."""
    docs = documents(DELTA)
    spec = docs[("Deployment", "clicks-delta")]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    env = expand([f"{v['name']}=$({v['name']})" for v in container["env"]], container["env"],
                 "clicks-delta-5c4b-xyz12")  # fmt: skip
    args = parse(expand(container["args"], container["env"], "clicks-delta-5c4b-xyz12"),
                 dict(e.split("=", 1) for e in env), monkeypatch, "clicks_to_delta.py")  # fmt: skip
    conf = dict(app.spark_conf(args))
    assert args.master == "k8s://https://kubernetes.default.svc"
    assert conf["spark.kubernetes.namespace"] == FIELDS["metadata.namespace"]
    assert conf["spark.kubernetes.driver.pod.name"] == "clicks-delta-5c4b-xyz12"
    assert (
        conf["spark.driver.host"]
        == FIELDS["status.podIP"]
        == dict(e.split("=", 1) for e in env)["SPARK_LOCAL_IP"]
    )
    assert conf["spark.kubernetes.container.image"] == container["image"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claim = {v["name"]: v for v in spec["volumes"]}[mounts["/data"]]["persistentVolumeClaim"]
    volume = "spark.kubernetes.executor.volumes.persistentVolumeClaim.data"
    assert conf[f"{volume}.options.claimName"] == claim["claimName"]
    assert conf[f"{volume}.mount.path"] == "/data"
    secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert conf["spark.kubernetes.authenticate.oauthTokenFile"] == f"{secrets}/token"
    account = spec["serviceAccountName"]
    assert ("ServiceAccount", account) in docs
    [binding] = [d for (kind, _), d in docs.items() if kind == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    role = docs[("Role", binding["roleRef"]["name"])]
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    for resource in ("pods", "configmaps"):
        for verb in ("create", "get", "list", "watch", "delete"):
            assert (resource, verb) in granted
    # The image's entrypoint starts an executor when Spark asks it to.
    assert 'ENTRYPOINT ["python", "-m", "kgroups.spark.executor"]' in DOCKERFILE.read_text()
