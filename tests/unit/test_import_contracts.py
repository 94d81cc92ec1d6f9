"""Each import contract in .importlinter can fail: one forbidden import, added to a copy
of the source tree, breaks the contract that forbids it.

A contract that no import could break would pass whatever the code did; these runs
prove each one is watching the modules it names.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

VIOLATIONS = {
    # contract id: (module file under src/kgroups, the import that breaks it)
    "layers": ("protocol/frames.py", "import kgroups.coordinator.core"),
    "layers-metrics": ("coordinator/metrics.py", "import kgroups.coordinator.server"),
    "clients-over-the-wire": ("client/errors.py", "import kgroups.coordinator.core.states"),
    "clients-over-the-wire-admin": ("admin/cluster.py", "import kgroups.coordinator.core"),
    "admin-is-not-a-member": ("admin/single.py", "import kgroups.client.errors"),
    "sans-io-core": ("coordinator/core/states.py", "import time"),
    "client-layers": ("client/errors.py", "import kgroups.client.member"),
    "pure-assignors": ("client/assignors/spec.py", "import random"),
    "operator-on-top": ("protocol/frames.py", "import kopf"),
    "operator-over-the-wire": ("operator/status.py", "import kgroups.client.errors"),
    "sans-io-security": ("security/scram.py", "import asyncio"),
    "layers-edge": ("coordinator/tls.py", "import kgroups.coordinator.connection"),
    "layers-cycle": ("coordinator/connection.py", "import kgroups.coordinator.server"),
    "layers-gate": ("coordinator/gate.py", "import kgroups.coordinator.pipeline"),
    "operator-on-top-plugin": ("kubectl/views.py", "import kgroups.operator.status"),
    "operator-over-the-wire-cli": ("operator/status.py", "import kgroups.groupcli.describe"),
    "tools-over-the-wire": ("groupcli/describe.py", "import kgroups.coordinator.core"),
    "api-below-its-users": ("api/reset.py", "import kgroups.groupcli.options"),
    "security-below-its-users": ("security/acl.py", "import kgroups.admin"),
    "protocol-at-the-bottom": ("protocol/groups.py", "import kgroups.security.actions"),
    "leaf-utilities": ("tasks.py", "import kgroups.protocol.errors"),
    "commands-over-the-wire": ("cli/topics.py", "import kgroups.coordinator.store"),
}
VARIANTS = ("-admin", "-metrics", "-edge", "-plugin", "-cli", "-cycle", "-gate")


def contract_of(case: str) -> str:
    for variant in VARIANTS:
        if case.endswith(variant):
            return case[: -len(variant)]
    return case


def contract_names() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    prefix = "importlinter:contract:"
    return {s[len(prefix) :]: config[s]["name"] for s in config.sections() if s.startswith(prefix)}


def lint(tree: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    result = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(tree / ".importlinter"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return result.stdout + result.stderr


def test_every_contract_has_a_violation_below() -> None:
    covered = {contract_of(key) for key in VIOLATIONS}
    assert covered == set(contract_names())


def test_every_module_is_named_by_a_contract() -> None:
    """Each module under src/kgroups is (or is inside) a module some contract constrains
    or places in a layer: nothing new lands outside the map (docs/ARCHITECTURE.md)."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    named: set[str] = set()
    for section in config.sections():
        if not section.startswith("importlinter:contract:"):
            continue
        contract = config[section]
        containers = contract.get("containers", "").split() or [""]
        for key in ("source_modules", "layers", "modules"):
            for entry in contract.get(key, "").replace("|", " ").split():
                named.update(f"{c}.{entry}" if c else entry for c in containers)
    src = ROOT / "src"
    modules = {
        ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        for path in (src / "kgroups").rglob("*.py")
    } - {"kgroups"}

    def covered(module: str) -> bool:
        parts = module.split(".")
        return any(".".join(parts[:i]) in named for i in range(2, len(parts) + 1))

    assert sorted(m for m in modules if not covered(m)) == []


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_one_forbidden_import_breaks_its_contract(case: str, tmp_path: Path) -> None:
    module, line = VIOLATIONS[case]
    contract = contract_of(case)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    target = tmp_path / "src" / "kgroups" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    output = lint(tmp_path)
    # (An import may break more contracts than its own: the operator imports the admin
    # client, so what the admin client must not import, the operator must not either.)
    details = " ".join(output.split("Broken contracts", 1)[-1].split())
    assert " ".join(contract_names()[contract].split()) in details, output
