"""The README documents every metric kgroups exports, with its type and labels.

The vocabulary (tests/observability/vocabulary.py) is what the dashboards, the rules and
the exporters' tests hold each part to; the README's tables are what users read. They
must say the same thing.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.observability.vocabulary import METRICS

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(kgroups_[a-z_]+)` \| (counter|gauge|histogram) \| ([a-z_, -]+) \|", re.M)


def test_every_metric_is_documented_with_its_type_and_labels() -> None:
    documented = {
        name: (kind, frozenset(label.strip() for label in labels.split(",")) - {"-"})
        for name, kind, labels in ROW.findall((ROOT / "README.md").read_text())
    }
    expected = {m.name: (m.kind, frozenset(m.labels)) for m in METRICS}
    missing = sorted(set(expected) - set(documented))
    assert not missing, f"metrics the README does not document: {missing}"
    wrong = {n: (documented[n], expected[n]) for n in expected if documented[n] != expected[n]}
    assert not wrong, f"README type/labels differ from the vocabulary: {wrong}"
    unknown = sorted(set(documented) - set(expected))
    assert not unknown, f"the README documents metrics nobody exports: {unknown}"
