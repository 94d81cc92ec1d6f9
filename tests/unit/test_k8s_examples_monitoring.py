"""The example PodMonitor scrapes what the example members serve.

No Prometheus Operator runs here (its CRDs cannot be fetched), so the PodMonitor is
checked against the Deployment it is for: it selects that Deployment's pods, and the port
it names is one the sidecar container exposes and passes to `kgroups sidecar --metrics`.
tests/cluster/test_kind.py scrapes that port on the running pods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"


def test_the_podmonitor_selects_the_sidecar_pods_and_their_metrics_port() -> None:
    (monitor,) = yaml.safe_load_all((EXAMPLES / "podmonitor.yaml").read_text())
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    deployments = [d for d in yaml.safe_load_all((EXAMPLES / "members.yaml").read_text()) if d]
    selected = [
        d
        for d in deployments
        if monitor["spec"]["selector"]["matchLabels"].items()
        <= d["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert [d["metadata"]["name"] for d in selected] == ["billing-members"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    sidecar: dict[str, Any] = next(
        c for c in selected[0]["spec"]["template"]["spec"]["containers"] if "sidecar" in c["args"]
    )
    port = next(p for p in sidecar["ports"] if p["name"] == endpoint["port"])
    assert f"--metrics=0.0.0.0:{port['containerPort']}" in sidecar["args"]
    assert "--http=127.0.0.1:8080" in sidecar["args"]  # the commit API stays in the pod
