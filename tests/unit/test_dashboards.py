"""The Grafana dashboards (dashboards/*.json): Grafana's classic JSON model as provisioned
dashboards need it, every query on the metric vocabulary, and every query valid PromQL
that returns data, checked by a real Prometheus (tools/prometheus/fetch.sh) scraping an
exporter of the whole vocabulary (tests/observability/exporter.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.observability.exporter import GROUPS, scraped_vocabulary
from tests.observability.prom import Prometheus, PromQLError
from tests.observability.vocabulary import SERIES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
DS = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"row", "timeseries", "stat", "table", "bargauge", "state-timeline"}
# What Grafana substitutes, for a Prometheus scraping every second: All for the query
# variables (their allValue), a rate window of a few scrapes, a short dashboard range.
SUBSTITUTIONS = {"namespace": ".*", "group": ".*", "__rate_interval": "4s", "__range": "10s",
                 "__interval": "1s"}  # fmt: skip
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every Prometheus annotation."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"{panel['title']!r} {target['refId']}", target["expr"]
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield f"annotation {annotation['name']!r}", annotation["expr"]


def substitute(expr: str) -> str:
    return VARIABLE.sub(lambda m: SUBSTITUTIONS[m.group(1) or m.group(2)], expr)


def all_queries() -> list[tuple[str, str]]:
    return [(f"{p.stem}: {where}", expr) for p in DASHBOARDS for where, expr in queries(load(p))]


@pytest.fixture(params=DASHBOARDS, ids=lambda p: p.stem)
def dashboard(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


def test_the_dashboards_are_the_fleet_and_the_group() -> None:
    assert [p.name for p in DASHBOARDS] == ["kgroups-fleet.json", "kgroups-group.json"]
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert uids == ["kgroups-fleet", "kgroups-group"]


def test_classic_model_with_fixed_identity(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] == 39
    assert dashboard["uid"] and dashboard["title"] and "kgroups" in dashboard["tags"]
    assert "__inputs" not in dashboard and "id" not in dashboard  # not an export for sharing
    assert dashboard.get("editable") is True


def test_a_datasource_variable_and_query_variables_that_work_without_namespaces(
    dashboard: dict[str, Any],
) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "group"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["namespace"]["query"] == "label_values(kgroups_groups, namespace)"
    assert variables["group"]["query"] == (
        'label_values(kgroups_group_generation{namespace=~"$namespace"}, group)'
    )
    for name in ("namespace", "group"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == DS
        # `namespace` comes from Kubernetes scraping: All must match series without it.
        assert v["includeAll"] is True and v["multi"] is True and v["allValue"] == ".*"
        assert v["current"]["value"] == ["$__all"]
    for where, expr in queries(dashboard):
        assert not re.search(r'(namespace|group)(=|!=)"\$', expr), f"{where}: use =~"


def test_coordinator_series_follow_the_namespace_and_member_series_the_group_only(
    dashboard: dict[str, Any],
) -> None:
    """`namespace` is the coordinator's (the variable lists kgroups_groups' namespaces);
    members run, and are scraped, in their own namespaces."""
    for where, expr in queries(dashboard):
        for name, matchers in re.findall(r"\b(kgroups_\w+)\{([^}]*)\}", expr):
            if SERIES[name].source in ("member", "spark"):
                assert "namespace" not in matchers, f"{where}: {name}{{{matchers}}}"
                assert 'group=~"$group"' in matchers, f"{where}: {name}{{{matchers}}}"
            else:
                assert 'namespace=~"$namespace"' in matchers, f"{where}: {name}{{{matchers}}}"


def test_panel_ids_are_unique_and_the_grid_has_no_overlaps(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        assert panel["type"] in PANEL_TYPES, panel["type"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & taken, f"{panel['title']!r} overlaps another panel"
        taken |= cells


def test_every_panel_and_target_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DS, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DS, panel["title"]
        assert panel.get("description"), f"{panel['title']!r} explains nothing"
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            assert annotation["datasource"] == DS


def test_rates_use_the_rate_interval(dashboard: dict[str, Any]) -> None:
    """rate/increase windows follow the scrape interval ($__rate_interval); an increase over
    the whole time range ($__range) is the one other window."""
    for where, expr in queries(dashboard):
        for func, window in re.findall(r"\b(rate|irate|increase)\(.*?\[([^\]]*)\]", expr):
            allowed = ["$__rate_interval"] + (["$__range"] if func == "increase" else [])
            assert window in allowed, f"{where}: {func}(...[{window}])"


def test_every_metric_is_in_the_vocabulary(dashboard: dict[str, Any]) -> None:
    texts = [expr for _, expr in queries(dashboard)]
    texts += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for text in texts for name in re.findall(r"\bkgroups_\w+", text)}
    assert used, "no kgroups metric queried"
    assert used <= set(SERIES), used - set(SERIES)


def test_the_chart_ships_the_dashboards_unchanged() -> None:
    shipped = ROOT / "charts" / "kgroups" / "dashboards"
    assert sorted(p.name for p in shipped.glob("*.json")) == [p.name for p in DASHBOARDS]
    for path in DASHBOARDS:
        assert (shipped / path.name).read_text() == path.read_text(), "run `make crds`"


# -- a real Prometheus ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    with scraped_vocabulary(tmp_path_factory.mktemp("prometheus")) as prom:
        yield prom


@pytest.mark.slow
def test_every_query_is_valid_promql_and_returns_data(prometheus: Prometheus) -> None:
    problems = []
    for where, expr in all_queries():
        try:
            result = prometheus.query(substitute(expr))
        except PromQLError as e:
            problems.append(f"{where}: {e}\n    {expr}")
            continue
        # A generation change is an event; the exporter's generations never change.
        if not result and not where.endswith("annotation 'New generation'"):
            problems.append(f"{where}: no data\n    {expr}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_invalid_promql_is_caught(prometheus: Prometheus) -> None:
    """The check above would see a broken expression (Grafana's variables left in, a typo)."""
    for bad in ("rate(kgroups_requests_total[$__rate_interval])", "sum by (group (kgroups_groups)"):
        with pytest.raises(PromQLError) as caught:
            prometheus.query(bad)
        assert caught.value.error_type == "bad_data"


@pytest.mark.slow
def test_the_group_variable_lists_the_groups(prometheus: Prometheus) -> None:
    """label_values(kgroups_group_generation{namespace=~"$namespace"}, group) with All."""
    series = prometheus.series(substitute('kgroups_group_generation{namespace=~"$namespace"}'))
    assert {s["group"] for s in series} == set(GROUPS)
