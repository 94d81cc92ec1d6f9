"""Kafka ACLs from a file, for coordinators outside Kubernetes (or beside RBAC's answer).

The file says what Kafka's `kafka-acls.sh` would have said, as YAML:

    superUsers: [User:admin]            # allowed everything
    allowEveryoneIfNoAclFound: false    # Kafka's allow.everyone.if.no.acl.found
    acls:
      - principal: User:billing         # or User:* for everyone
        operations: [READ]              # Kafka's operation names, or ALL
        resource: {type: GROUP, name: billing}
      - principal: User:billing
        operations: [READ, DESCRIBE]
        resource: {type: TOPIC, name: orders-, pattern: PREFIXED}
      - principal: User:*
        permission: DENY                # ALLOW unless said
        operations: [DELETE]
        resource: {type: TOPIC, name: "*"}
        host: 10.0.0.7                  # optional, "*" by default

Evaluation is Kafka's StandardAuthorizer's: a super user is allowed everything; a matching
DENY wins over any ALLOW; otherwise a matching ALLOW allows (READ, WRITE, DELETE and ALTER
also allow DESCRIBE; ALTER_CONFIGS allows DESCRIBE_CONFIGS); a resource that no rule
mentions at all is allowed only with allowEveryoneIfNoAclFound. Resource names match
literally, by prefix (PREFIXED), or any name ("*").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from kgroups.security.actions import Action, Operation, ResourceType, granting


class AclError(ValueError):
    """The ACL file cannot be used; the message names the rule and the field."""


@dataclass(frozen=True, slots=True)
class Rule:
    principal: str
    allow: bool
    operations: frozenset[Operation] | None
    """None: ALL."""
    resource_type: ResourceType
    name: str
    prefixed: bool = False
    host: str = "*"

    def matches_resource(self, action: Action) -> bool:
        if self.resource_type != action.resource_type:
            return False
        if self.name == "*":
            return True
        return action.name.startswith(self.name) if self.prefixed else action.name == self.name

    def matches_principal(self, principal: str, host: str) -> bool:
        who = self.principal in (principal, "User:*")
        return who and self.host in ("*", host)

    def covers(self, operation: Operation) -> bool:
        return self.operations is None or operation in self.operations


@dataclass(frozen=True, slots=True)
class Acls:
    rules: tuple[Rule, ...] = ()
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False

    def allows(self, principal: str, host: str, action: Action) -> bool:
        if principal in self.super_users:
            return True
        on_resource = [r for r in self.rules if r.matches_resource(action)]
        if not on_resource:
            return self.allow_if_no_acl
        mine = [r for r in on_resource if r.matches_principal(principal, host)]
        if any(not r.allow and r.covers(action.operation) for r in mine):
            return False
        return any(r.allow and any(r.covers(op) for op in granting(action.operation))
                   for r in mine)  # fmt: skip

    def denied(self, principal: str, host: str, actions: Iterable[Action]) -> frozenset[Action]:
        return frozenset(a for a in actions if not self.allows(principal, host, a))


def _enum(kind: type[Any], value: Any, where: str) -> Any:
    try:
        return kind[str(value).upper()]
    except KeyError:
        names = ", ".join(m.name for m in kind)
        raise AclError(f"{where}: {value!r} is not one of {names}") from None


def _rule(raw: Any, n: int) -> Rule:
    where = f"acls[{n}]"
    if not isinstance(raw, dict):
        raise AclError(f"{where}: a mapping with principal, operations and resource")
    unknown = set(raw) - {"principal", "permission", "operations", "resource", "host"}
    if unknown:
        raise AclError(f"{where}: unknown fields {', '.join(sorted(map(str, unknown)))}")
    principal = raw.get("principal")
    if not isinstance(principal, str) or ":" not in principal:
        raise AclError(f"{where}.principal: TYPE:NAME, e.g. User:alice or User:*")
    permission = str(raw.get("permission", "ALLOW")).upper()
    if permission not in ("ALLOW", "DENY"):
        raise AclError(f"{where}.permission: ALLOW or DENY")
    ops = raw.get("operations")
    if not isinstance(ops, list) or not ops:
        raise AclError(f"{where}.operations: a list of operations (or [ALL])")
    operations = None if any(str(o).upper() == "ALL" for o in ops) else frozenset(
        _enum(Operation, o, f"{where}.operations") for o in ops
    )  # fmt: skip
    resource = raw.get("resource")
    if not isinstance(resource, dict) or "type" not in resource or "name" not in resource:
        raise AclError(f"{where}.resource: {{type: GROUP|TOPIC|CLUSTER, name: ...}}")
    pattern = str(resource.get("pattern", "LITERAL")).upper()
    if pattern not in ("LITERAL", "PREFIXED"):
        raise AclError(f"{where}.resource.pattern: LITERAL or PREFIXED")
    kind = _enum(ResourceType, resource["type"], f"{where}.resource.type")
    return Rule(principal, permission == "ALLOW", operations, kind, str(resource["name"]),
                pattern == "PREFIXED", str(raw.get("host", "*")))  # fmt: skip


def load_acls(text: str) -> Acls:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise AclError(f"not YAML{where}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise AclError("the file is a mapping: superUsers, allowEveryoneIfNoAclFound, acls")
    unknown = set(raw) - {"superUsers", "allowEveryoneIfNoAclFound", "acls"}
    if unknown:
        raise AclError(f"unknown fields {', '.join(sorted(map(str, unknown)))}")
    supers = raw.get("superUsers") or []
    if not isinstance(supers, list) or not all(isinstance(s, str) for s in supers):
        raise AclError("superUsers: a list of principals, e.g. [User:admin]")
    rules = raw.get("acls") or []
    if not isinstance(rules, list):
        raise AclError("acls: a list of rules")
    return Acls(tuple(_rule(r, n) for n, r in enumerate(rules)), frozenset(supers),
                bool(raw.get("allowEveryoneIfNoAclFound", False)))  # fmt: skip
