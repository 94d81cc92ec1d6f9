"""Generate the CustomResourceDefinitions from the pydantic models.

Pydantic's JSON Schema is close to a Kubernetes structural schema but not equal: it uses
`$ref`/`$defs`, spells optional as `anyOf [X, null]`, adds titles, and says nothing of
printer columns or subresources. `structural()` inlines and cleans it; `crds()` wraps it.
`python -m kgroups.operator.crdgen DIR...` (what `make crds` runs) writes one YAML file per
CRD into each DIR; `tests/unit/test_crds.py` fails when the checked-in files drift.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from kgroups.api.models import API_GROUP, API_VERSION, ConsumerGroup, Topic

_DROP = {"title"}


def structural(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema as a Kubernetes structural schema (refs inlined, no nulls)."""
    schema = model.model_json_schema(mode="serialization", by_alias=True)
    defs = schema.pop("$defs", {})
    cleaned: dict[str, Any] = _clean(schema, defs)
    return cleaned


def _clean(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
        target.update({k: v for k, v in node.items() if k != "$ref"})
        return _clean(target, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        merged = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
        merged = {**options[0], **merged}
        if node.get("default") is not None:
            merged["default"] = node["default"]
        return _clean(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: _clean(prop, defs) for name, prop in value.items()}
        else:
            out[key] = _clean(value, defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "array" and out.get("default") == []:
        del out["default"]  # an empty list default only adds noise to every object
    if out.get("type") == "object" and out.get("default") == {}:
        del out["default"]
    return out


def _printer(name: str, type_: str, path: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "jsonPath": path, "description": description, **extra}


_READY = '.status.conditions[?(@.type=="Ready")]'


def _crd(
    model: type[BaseModel],
    *,
    kind: str,
    plural: str,
    short: str,
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    schema = structural(model)
    schema["description"] = (model.__doc__ or "").strip()
    schema["properties"] = {
        "apiVersion": {"type": "string", "description": "The API version (kgroups.io/v1alpha1)."},
        "kind": {"type": "string", "description": f"Always {kind}."},
        "metadata": {"type": "object"},
        **schema["properties"],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["kgroups"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        *columns,
                        _printer("Ready", "string", f"{_READY}.status", "Ready condition."),
                        _printer("Reason", "string", f"{_READY}.reason", "Why.", priority=1),
                        _printer(
                            "Age", "date", ".metadata.creationTimestamp", "Age of the resource."
                        ),
                    ],
                }
            ],
        },
    }


def crds() -> dict[str, dict[str, Any]]:
    """Every CRD, by file name."""
    return {
        "kgroups.io_topics.yaml": _crd(
            Topic,
            kind="Topic",
            plural="topics",
            short="kt",
            columns=[
                _printer("Partitions", "integer", ".spec.partitions", "Desired partitions."),
            ],
        ),
        "kgroups.io_consumergroups.yaml": _crd(
            ConsumerGroup,
            kind="ConsumerGroup",
            plural="consumergroups",
            short="cg",
            columns=[
                _printer("State", "string", ".status.state", "Group state."),
                _printer("Generation", "integer", ".status.generation", "Group generation."),
                _printer("Members", "integer", ".status.memberCount", "Members in the group."),
                _printer(
                    "Assigned", "string", ".status.partitions.summary", "Assigned/total partitions."
                ),
                _printer("Protocol", "string", ".status.protocol", "Assignor.", priority=1),
            ],
        ),
    }


HEADER = "# Generated by `make crds` from src/kgroups/api/models.py. Do not edit.\n"


def render(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=100)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m kgroups.operator.crdgen DIR [DIR...]", file=sys.stderr)
        return 2
    for directory in map(Path, argv):
        directory.mkdir(parents=True, exist_ok=True)
        for name, crd in crds().items():
            (directory / name).write_text(render(crd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
