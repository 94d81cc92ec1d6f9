"""tools/render_dashboard.py draws the dashboards from a real Prometheus (fed by an
exporter of the whole metric vocabulary) into a PNG with data in every drawn panel."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.observability.exporter import scraped_vocabulary
from tests.observability.prom import Prometheus

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import render_dashboard as rd  # noqa: E402

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with scraped_vocabulary(tmp_path_factory.mktemp("prometheus"), samples=3) as prom:
        yield prom


def test_grafanas_variables_are_substituted_as_grafana_does() -> None:
    w = rd.Window(1000.0, 4600.0, 15.0, variables={"group": rd.regex_of(["a.b", "c"])})
    assert (w.step, w.variables["__interval"]) == (15.0, "15s")  # an hour over 250 points
    assert w.variables["__rate_interval"] == "60s"  # 4 x the scrape interval
    assert w.variables["__range"] == "3600s"
    expr = 'rate(x{group=~"$group", namespace=~"${namespace}"}[$__rate_interval])'
    with pytest.raises(KeyError, match="namespace"):
        w.substitute(expr)
    w.variables["namespace"] = rd.regex_of([])
    assert w.substitute(expr) == r'rate(x{group=~"(a\\.b|c)", namespace=~".*"}[60s])'
    assert rd.Window(0, 86400, 15).variables["__rate_interval"] == "361s"
    assert rd.seconds("1m30s") == 90 and rd.when("now-2h", 10_000) == 2800


@pytest.mark.slow
@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_drawn_panel_has_data(
    prometheus: Prometheus, path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from matplotlib.image import imread

    out = tmp_path / f"{path.stem}.png"
    code = rd.main([str(path), "--prometheus", prometheus.url, "--from", "now-20s",
                    "--scrape-interval", "1s", "--group", "billing", "--out", str(out),
                    "--require-data"])  # fmt: skip
    report = capsys.readouterr().out
    assert code == 0, report
    drawn = [line for line in report.splitlines() if line.startswith("ok ")]
    assert len(drawn) >= 15, report
    pixels = imread(out)
    assert pixels.shape[0] > 1000 and pixels.std() > 0.05, pixels.shape  # tall, not blank
