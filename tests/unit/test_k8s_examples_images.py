"""The images examples/k8s and the chart run are the ones e2e/cluster/images.sh builds and
lists (`images.sh names`, which a kind cluster loads), and members.yaml's consumer pods
run the example programs of the clients image as restricted pods.
(tests/integration/test_k8s_member_apps.py runs those programs against a coordinator;
e2e/cluster builds the images and runs them in containers.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "examples" / "k8s"
CLIENTS_DOCKERFILE = K8S / "Dockerfile.clients"


def deployments(path: Path, kinds: tuple[str, ...] = ("Deployment",)) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return {d["metadata"]["name"]: d for d in docs if d.get("kind") in kinds}  # or values


def chart_image() -> str:
    chart = yaml.safe_load((ROOT / "charts" / "kgroups" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts" / "kgroups" / "values.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def test_images_sh_names_every_image_the_chart_and_the_examples_run() -> None:
    names = subprocess.run(
        ["bash", str(ROOT / "e2e" / "cluster" / "images.sh"), "names"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    used = {chart_image()}
    for path in K8S.glob("*.yaml"):
        for deployment in deployments(path, ("Deployment", "StatefulSet")).values():
            used |= {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert sorted(names) == sorted(used)
    assert len(names) == len(set(names))


def consumers() -> dict[str, dict[str, Any]]:
    """members.yaml's Deployments that run the clients image."""
    return {
        name: d
        for name, d in deployments(K8S / "members.yaml").items()
        if "kgroups-clients" in d["spec"]["template"]["spec"]["containers"][0]["image"]
    }


def test_each_client_library_has_a_consumer_deployment_running_its_program() -> None:
    programs = {
        name: d["spec"]["template"]["spec"]["containers"][0]["command"]
        for name, d in consumers().items()
    }
    assert programs == {
        "billing-kafka-python": ["python", "/app/kafka_python_member.py"],
        "billing-confluent": ["python", "/app/confluent_member.py"],
        "billing-kgroups": ["python", "/app/kgroups_member.py"],
    }
    # /app is examples/k8s/apps in the image, with the libraries the programs import.
    dockerfile = CLIENTS_DOCKERFILE.read_text()
    assert "COPY examples/k8s/apps /app\n" in dockerfile
    for command in programs.values():
        assert (K8S / "apps" / Path(command[1]).name).is_file()
    install = re.search(r"RUN python3 -m pip install [^\n]*--no-index[^\n]*\\\n(.*)\n", dockerfile)
    assert install is not None
    assert set(install[1].split()) == {"kgroups", "kafka-python", "confluent-kafka"}
    assert "USER 65532:65532" in dockerfile


def test_the_consumers_join_the_sidecars_group_with_their_timeouts() -> None:
    sidecar = deployments(K8S / "members.yaml")["billing-members"]
    member = sidecar["spec"]["template"]["spec"]["containers"][0]
    assert member["args"][0] == "sidecar"
    # The same coordinator, group, topic and timeouts (the programs use range as well).
    expected = {
        a.replace("--topics=", "--topic=")
        for a in member["args"][1:]
        if not a.startswith(("--strategy=", "--http=", "--metrics="))
    }
    for name, deployment in consumers().items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert deployment["spec"]["replicas"] == 1, name
        assert set(container["args"]) == expected, name


def test_the_consumer_pods_are_restricted_and_small() -> None:
    for name, deployment in consumers().items():
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        (container,) = spec["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"]["drop"] == ["ALL"], name
        assert container["resources"]["requests"] == {"cpu": "20m", "memory": "64Mi"}, name
        # Nothing installs at start: the image has what the program needs.
        assert "pip" not in " ".join(container["command"] + container["args"]), name
