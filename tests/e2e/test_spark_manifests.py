"""examples/k8s/spark-members.yaml is accepted by a real API server (a server-side dry run
into a test namespace: schemas, the kgroups CRDs, defaulting and validation of every
object). Running the Spark pods needs nodes and the image; tests/unit/test_k8s_examples_spark.py
checks their command line against clickcount.py itself."""

from __future__ import annotations

from tests.e2e.kube import ControlPlane
from tests.integration.harness import ROOT

EXAMPLE = ROOT / "examples" / "k8s" / "spark-members.yaml"


def test_the_spark_members_example_passes_a_server_side_dry_run(
    controlplane: ControlPlane, namespace: str
) -> None:
    result = controlplane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(EXAMPLE))
    for created in (
        "topic.kgroups.io/clicks",
        "consumergroup.kgroups.io/clicks",
        "persistentvolumeclaim/clicks-data",
        "deployment.apps/clicks-spark",
        "deployment.apps/clicks-writer",
    ):
        assert f"{created} created (server dry run)" in result.stdout, result.stdout
    # A dry run leaves nothing behind.
    assert not controlplane.exists("deployment", "clicks-spark", namespace=namespace)


def test_the_delta_example_passes_a_server_side_dry_run(
    controlplane: ControlPlane, namespace: str
) -> None:
    result = controlplane.kubectl(
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        str(ROOT / "examples/k8s/spark-delta.yaml"),
    )
    for created in ("consumergroup.kgroups.io/clicks-delta", "deployment.apps/clicks-delta"):
        assert f"{created} created (server dry run)" in result.stdout, result.stdout
