"""The CRDs under crds/ are what the models generate, and every field is documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kgroups.operator.crdgen import crds, render

ROOT = Path(__file__).resolve().parents[2]
DIRS = [ROOT / "crds", ROOT / "charts" / "kgroups" / "crds"]


@pytest.mark.parametrize("directory", DIRS, ids=lambda d: str(d.relative_to(ROOT)))
def test_checked_in_crds_match_the_models(directory: Path) -> None:
    for name, crd in crds().items():
        path = directory / name
        assert path.exists(), f"{path} missing: run `make crds`"
        assert path.read_text() == render(crd), f"{path} is stale: run `make crds`"


def _walk(schema: dict[str, Any], path: str) -> list[str]:
    missing = [] if "description" in schema or path.endswith(".metadata") else [path]
    for name, prop in schema.get("properties", {}).items():
        missing += _walk(prop, f"{path}.{name}")
    if "items" in schema and schema["items"].get("type") == "object":
        missing += _walk(schema["items"], f"{path}[]")
    return missing


@pytest.mark.parametrize("name", sorted(crds()))
def test_every_field_has_a_description(name: str) -> None:
    schema = crds()[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema, "") == []


@pytest.mark.parametrize("name", sorted(crds()))
def test_schemas_are_structural(name: str) -> None:
    """No $ref, anyOf or nulls (the API server refuses non-structural schemas)."""
    text = yaml.safe_dump(crds()[name])
    for word in ("$ref", "anyOf", "type: 'null'", "additionalProperties: false", "title:"):
        assert word not in text, word


def test_the_rules_users_rely_on_are_in_the_schema() -> None:
    text = "".join(render(c) for c in crds().values())
    assert "self.partitions >= oldSelf.partitions" in text
    assert "groupId is immutable" in text
    assert "x-kubernetes-list-map-keys" in text
