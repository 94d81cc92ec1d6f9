"""The alerting rules (dashboards/alerts.yaml): valid for Prometheus, and each one pinned by
`promtool test rules` cases (tests/unit/alerts_test.yaml) that fire and that must not,
at the minute its `for` ends. promtool is Prometheus' own, from tools/prometheus/fetch.sh.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.observability.prom import promtool
from tests.observability.vocabulary import SERIES

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "alerts.yaml"
TESTS = Path(__file__).with_name("alerts_test.yaml")
SHIPPED = ROOT / "charts" / "kgroups" / "dashboards" / "alerts.yaml"


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


ALERTS = [r["alert"] for r in rules()]


def test_promtool_accepts_the_rules() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_every_rule_passes_its_unit_tests() -> None:
    done = promtool("test", "rules", str(TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_cases_that_fire_and_cases_that_do_not() -> None:
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t["alert_rule_test"]]
    for alert in ALERTS:
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in mine), f"{alert}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{alert}: no case where it must not"


def test_every_rule_is_labelled_and_explained() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        assert re.fullmatch(r"\d+m", rule["for"]), rule["alert"]
        if rule["alert"] != "KGroupsCoordinatorDown":
            assert "$labels.group" in rule["annotations"]["summary"], rule["alert"]
            assert "by (namespace, group)" in rule["expr"], rule["alert"]


def test_the_rules_query_only_the_vocabulary() -> None:
    for rule in rules():
        used = set(re.findall(r"\bkgroups_\w+", rule["expr"]))
        assert used <= set(SERIES), (rule["alert"], used - set(SERIES))


def test_the_chart_ships_the_rules_unchanged() -> None:
    assert SHIPPED.read_text() == RULES.read_text(), "run `make crds`"


@pytest.mark.parametrize("alert", ALERTS)
@pytest.mark.parametrize("shift", [-1, +1], ids=["sooner", "later"])
def test_the_cases_pin_each_rules_for_duration(alert: str, shift: int, tmp_path: Path) -> None:
    """A rule that fires one evaluation sooner or later than it does fails its cases."""
    source = yaml.safe_load(RULES.read_text())
    for group in source["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == alert:
                rule["for"] = f"{int(rule['for'].removesuffix('m')) + shift}m"
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(source))
    cases = yaml.safe_load(TESTS.read_text())
    cases["rule_files"] = ["alerts.yaml"]
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(cases))
    done = promtool("test", "rules", str(tmp_path / "alerts_test.yaml"))
    assert done.returncode != 0, f"{alert} with `for` {shift:+}m still passes"
    assert f"alertname: {alert}" in done.stdout + done.stderr
