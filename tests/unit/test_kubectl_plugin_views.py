"""What `kubectl kgroups` prints: kubectl's layout for list, Kafka's for the rest, from
ConsumerGroup objects as the API server returns them."""

from __future__ import annotations

from typing import Any

from kgroups.kubectl import views


def _cg(name: str = "billing", namespace: str = "team", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"topics": ["orders"]},
        **({"status": status} if status else {}),
    }


STATUS: dict[str, Any] = {
    "groupId": "billing",
    "state": "Stable",
    "generation": 4,
    "protocolType": "consumer",
    "protocol": "range",
    "leader": "m-1",
    "memberCount": 2,
    "members": [
        {"memberId": "m-1", "clientId": "c1", "host": "/10.0.0.1",
         "assignment": [{"topic": "orders", "partitions": [0, 1]}]},
        {"memberId": "m-2", "clientId": "c2", "host": "/10.0.0.2",
         "assignment": [{"topic": "orders", "partitions": [2]}]},
    ],
    "partitions": {"assigned": 3, "total": 3, "summary": "3/3"},
    "offsets": [
        {"topic": "orders", "partition": 0, "offset": 5, "logEndOffset": 9, "lag": 4},
        {"topic": "orders", "partition": 1, "offset": 7},
    ],
    "lag": 4,
    "coordinator": "kgroups-coordinator.kgroups.svc:9092",
    "conditions": [{"type": "Ready", "status": "True", "reason": "Stable", "message": "ok",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
}  # fmt: skip


def test_list_is_laid_out_as_kubectl_get() -> None:
    text = views.list_table([_cg(**STATUS)], all_namespaces=False, wide=False)
    assert text.splitlines() == [
        "NAME      GROUP-ID   STATE    GENERATION   MEMBERS   ASSIGNED   LAG   READY",
        "billing   billing    Stable   4            2         3/3        4     True",
    ]


def test_all_namespaces_adds_the_namespace_and_sorts_wide_adds_the_details() -> None:
    items = [_cg("b", "z"), _cg("a", "z", **STATUS), _cg("c", "a")]
    rows = [line.split() for line in
            views.list_table(items, all_namespaces=True, wide=True).splitlines()]  # fmt: skip
    assert rows[0] == ["NAMESPACE", "NAME", "GROUP-ID", "STATE", "GENERATION", "MEMBERS",
                       "ASSIGNED", "LAG", "READY", "PROTOCOL", "LEADER", "COORDINATOR", "REASON"]  # fmt: skip
    assert [r[:2] for r in rows[1:]] == [["a", "c"], ["z", "a"], ["z", "b"]]
    assert rows[2][9:] == ["range", "m-1", "kgroups-coordinator.kgroups.svc:9092", "Stable"]
    assert rows[1][2:] == ["c", *["-"] * 10]  # not seen by the operator yet


def test_summary_is_what_json_and_yaml_print() -> None:
    assert views.summary(_cg(**STATUS)) == {
        "namespace": "team", "name": "billing", "groupId": "billing", "state": "Stable",
        "generation": 4, "members": 2, "assigned": "3/3", "lag": 4, "ready": "True",
        "reason": "Stable", "protocol": "range", "leader": "m-1",
        "coordinator": "kgroups-coordinator.kgroups.svc:9092",
    }  # fmt: skip
    spec_id = {**_cg(), "spec": {"groupId": "legacy-billing"}}
    assert views.summary(spec_id)["groupId"] == "legacy-billing"


def test_describe_rebuilds_the_coordinators_view_from_status() -> None:
    d = views.described(_cg(**STATUS))
    assert d is not None
    assert (d.group.state, d.generation, d.leader) == ("Stable", 4, "m-1")
    assert (d.coordinator.host, d.coordinator.port, d.coordinator.node_id) == (
        "kgroups-coordinator.kgroups.svc", 9092, 0)  # fmt: skip
    assert d.group.members[0].assignment == {"orders": (0, 1)}
    assert {tp: c.offset for tp, c in d.committed.items()} == {("orders", 0): 5, ("orders", 1): 7}
    assert d.ends == {("orders", 0): 9}
    assert views.described(_cg()) is None


def test_describe_of_a_consumer_protocol_group_shows_epochs_and_targets() -> None:
    from kgroups.groupcli.describe import members_table, state_table

    status = {
        **STATUS, "state": "Reconciling", "generation": 9, "groupType": "consumer",
        "groupEpoch": 9, "assignmentEpoch": 9, "protocol": "uniform", "leader": None,
        "members": [
            {"memberId": "m-1", "clientId": "c1", "host": "/10.0.0.1", "memberEpoch": 8,
             "assignment": [{"topic": "orders", "partitions": [0, 1]}],
             "targetAssignment": [{"topic": "orders", "partitions": [0]}]},
        ],
    }  # fmt: skip
    d = views.described(_cg(**status))
    assert d is not None
    assert (d.group.group_type, d.group.assignment_epoch) == ("consumer", 9)
    row = members_table(d, verbose=True).splitlines()[1].split()
    assert row[5:9] == ["8", "orders:0,1", "9", "orders:0"], row
    state = state_table(d, verbose=True).splitlines()[1].split()
    assert state[3:7] == ["uniform", "Reconciling", "9", "9"], state


def test_describe_json_carries_the_resource_and_its_requests() -> None:
    obj = _cg(**STATUS, offsetRequests=[{"id": "r1", "result": "Succeeded"}])
    obj["metadata"]["annotations"] = {views.ANNOTATION: '{"id": "r2"}'}
    out = views.describe_json(obj, views.described(obj))
    assert (out["namespace"], out["name"], out["group"], out["generation"]) == (
        "team", "billing", "billing", 4)  # fmt: skip
    assert out["ready"] == {"status": "True", "reason": "Stable", "message": "ok"}
    assert out["offsetRequests"] == [{"id": "r1", "result": "Succeeded"}]
    assert out["pendingOffsetRequest"] == '{"id": "r2"}'
    lagging = {(o["topic"], o["partition"]): o["lag"] for o in out["offsets"]}
    assert lagging == {("orders", 0): 4, ("orders", 1): None, ("orders", 2): None}


def test_notes_say_the_status_is_as_last_seen() -> None:
    stale = dict(STATUS, membersTruncated=True, memberCount=500)
    stale["conditions"] = [{"type": "Ready", "status": "False", "reason": "CoordinatorUnreachable",
                            "message": "connection refused"}]  # fmt: skip
    assert views.describe_notes(_cg(**stale)) == [
        "Warning: the status of 'billing' is as last seen: connection refused",
        "Warning: the status lists 2 of 500 members",
    ]


RECORD = {
    "id": "r1", "action": "reset", "scenario": "shift-by", "argument": "-2",
    "topics": ["orders:0,1"], "dryRun": False, "requestedBy": "alice",
    "requestedAt": "2026-01-01T00:00:00.000Z", "completedAt": "2026-01-01T00:00:01.000Z",
    "result": "Failed", "partitions": 3,
    "message": "Failed to commit offset for partition orders-1 of group 'billing': X\nsecond",
    "plan": [
        {"topic": "orders", "partition": 0, "previousOffset": 5, "newOffset": 3},
        {"topic": "orders", "partition": 1, "previousOffset": 5, "error": "X"},
    ],
}  # fmt: skip


def test_reset_prints_kafkas_table_of_what_was_written() -> None:
    assert views.reset_table("billing", RECORD, wide=False) == (
        "GROUP           TOPIC           PARTITION  NEW-OFFSET\n"
        "billing         orders          0          3"
    )
    wide = views.reset_table("billing", RECORD, wide=True)
    assert wide is not None and wide.splitlines()[1].split() == ["billing", "orders", "0", "3", "5"]
    assert views.reset_table("billing", {"plan": []}, wide=False) is None
    assert views.error_lines(RECORD) == [
        "Error: Failed to commit offset for partition orders-1 of group 'billing': X",
        "Error: second",
    ]
    assert views.truncated_note(RECORD) == "Note: the record lists 2 of 3 partitions"


def test_delete_offsets_prints_kafkas_status_table() -> None:
    record = {"plan": [{"topic": "orders", "partition": 2, "previousOffset": 5},
                       {"topic": "orders", "partition": 3, "error": "GROUP_SUBSCRIBED_TO_TOPIC"},
                       {"topic": "gone", "error": "UNKNOWN_TOPIC_OR_PARTITION"}]}  # fmt: skip
    assert views.delete_offsets_table(record).splitlines() == [
        "TOPIC           PARTITION  STATUS",
        "orders          2          Successful",
        "orders          3          Error: GROUP_SUBSCRIBED_TO_TOPIC",
        "gone            -          Error: UNKNOWN_TOPIC_OR_PARTITION",
    ]


def test_the_requests_view_lists_newest_first() -> None:
    older = {"id": "r0", "action": "delete-offsets", "topics": ["orders:2"],
             "requestedBy": "bob", "result": "Succeeded", "message": "done"}  # fmt: skip
    invalid = {"id": "invalid-abc", "requestedBy": "unknown", "result": "Failed",
               "message": "invalid kgroups.io/offset-request: not JSON"}  # fmt: skip
    text = views.requests_table([older, RECORD, invalid])
    assert text is not None
    rows = [line.split()[:7] for line in text.splitlines()]
    assert rows == [
        ["ID", "ACTION", "SCENARIO", "SCOPE", "DRY-RUN", "RESULT", "REQUESTED-BY"],
        ["invalid-abc", "-", "-", "-", "-", "Failed", "unknown"],
        ["r1", "reset", "shift-by=-2", "orders:0,1", "no", "Failed", "alice"],
        ["r0", "delete-offsets", "-", "orders:2", "-", "Succeeded", "bob"],
    ]
    assert text.splitlines()[2].endswith("of group 'billing': X")  # the first line only
    assert views.requests_table([]) is None


def test_kubectl_tables_pad_like_kubectls_tabwriter() -> None:
    assert views.kubectl_table(["A", "LONGER"], [["x", None]]).splitlines() == [
        "A     LONGER",
        "x     -",
    ]
