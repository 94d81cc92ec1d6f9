"""Kafka ACLs from a file: Kafka's StandardAuthorizer decisions (DENY wins, implied
DESCRIBE, prefixed and wildcard names, super users, no-ACL default) and clear refusals of
bad files."""

from __future__ import annotations

import pytest

from kgroups.security.acl import AclError, load_acls
from kgroups.security.actions import Operation, cluster, group, topic

ACLS = load_acls("""
superUsers: [User:admin]
acls:
  - {principal: User:billing, operations: [READ], resource: {type: GROUP, name: billing}}
  - principal: User:billing
    operations: [READ]
    resource: {type: TOPIC, name: orders-, pattern: PREFIXED}
  - {principal: "User:*", operations: [DESCRIBE], resource: {type: TOPIC, name: "*"}}
  - principal: User:billing
    permission: DENY
    operations: [READ]
    resource: {type: TOPIC, name: orders-secret}
  - {principal: User:ops, operations: [ALL], resource: {type: GROUP, name: "*"}, host: 10.0.0.7}
""")


@pytest.mark.parametrize(
    ("principal", "action", "allowed"),
    [
        ("User:billing", group(Operation.READ, "billing"), True),
        ("User:billing", group(Operation.DESCRIBE, "billing"), True),  # implied by READ
        ("User:billing", group(Operation.DELETE, "billing"), False),
        ("User:billing", group(Operation.READ, "payroll"), False),  # no rule: not allowed
        ("User:billing", topic(Operation.READ, "orders-eu"), True),  # prefixed
        ("User:billing", topic(Operation.READ, "orders-secret"), False),  # DENY wins
        ("User:billing", topic(Operation.DESCRIBE, "orders-secret"), True),  # not READ's DENY
        ("User:someone", topic(Operation.DESCRIBE, "anything"), True),  # User:* and "*"
        ("User:someone", topic(Operation.READ, "orders-eu"), False),
        ("User:admin", cluster(Operation.ALTER_CONFIGS), True),  # super user
        ("User:ops", group(Operation.DELETE, "x"), False),  # wrong host
    ],
)
def test_decisions_are_kafkas(principal: str, action: object, allowed: bool) -> None:
    assert ACLS.allows(principal, "10.0.0.1", action) is allowed  # type: ignore[arg-type]


def test_a_rule_can_be_bound_to_a_host() -> None:
    assert ACLS.allows("User:ops", "10.0.0.7", group(Operation.DELETE, "x"))


def test_without_any_rule_on_a_resource_the_default_decides() -> None:
    open_ = load_acls("allowEveryoneIfNoAclFound: true\nacls: []\n")
    assert open_.allows("User:x", "h", group(Operation.READ, "g"))
    assert not load_acls("acls: []").allows("User:x", "h", group(Operation.READ, "g"))
    assert ACLS.denied("User:x", "h", [group(Operation.READ, "g"), topic(Operation.DESCRIBE, "t")]
                       ) == {group(Operation.READ, "g")}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("acls: [{principal: alice, operations: [READ], resource: {type: GROUP, name: g}}]",
         "acls\\[0\\].principal"),
        ("acls: [{principal: User:a, operations: [EAT], resource: {type: GROUP, name: g}}]",
         "acls\\[0\\].operations: 'EAT' is not one of"),
        ("acls: [{principal: User:a, operations: [READ], resource: {type: BROKER, name: g}}]",
         "resource.type"),
        ("acls: [{principal: User:a, operations: [READ]}]", "acls\\[0\\].resource"),
        ("acls: [{principal: User:a, operations: [READ], resource: {type: GROUP, name: g},"
         " permision: DENY}]", "unknown fields permision"),
        ("acls: [oops", "not YAML at line"),
        ("superUsers: admin", "superUsers"),
        ("acl: []", "unknown fields acl"),
    ],
)  # fmt: skip
def test_bad_files_are_refused_naming_the_rule_and_field(text: str, complaint: str) -> None:
    with pytest.raises(AclError, match=complaint):
        load_acls(text)
