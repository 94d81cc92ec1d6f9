"""What `kgroups group describe`, `delete` and `delete-offsets` show, from plain answers:
Kafka's row order, its messages, and kgroups' generation and leader where a Kafka
broker sends neither."""

from __future__ import annotations

from kgroups.admin import Committed, GroupView, MemberView, Node, error_message
from kgroups.api.deleting import delete_groups_report, delete_offsets_report
from kgroups.groupcli import describe as desc
from kgroups.protocol.errors import ErrorCode

E = ErrorCode
NODE = Node(1, "broker-1", 9092)


def member(
    name: str, assignment: dict[str, tuple[int, ...]], instance: str | None = None
) -> MemberView:
    return MemberView(f"{name}-id", instance, name, "/10.0.0.1", assignment)


def group(*members: MemberView, state: str = "Stable", **kw: object) -> GroupView:
    return GroupView("g", state, "consumer", "range", members, **kw)  # type: ignore[arg-type]


def test_rows_follow_kafka_members_with_most_partitions_first_then_unowned_commits() -> None:
    small = member("small", {"t": (5,)})
    big = member("big", {"u": (0,), "t": (3, 1)})
    idle = member("idle", {})
    d = desc.Described(
        NODE,
        group(small, idle, big),
        {("t", 1): Committed(10, leader_epoch=4), ("z", 0): Committed(3), ("a", 2): Committed(1)},
        {("t", 1): 12, ("t", 3): 8, ("z", 0): 3},
    )
    rows = desc.partition_rows(d)
    assert [(r.topic, r.partition, r.member.client_id if r.member else None) for r in rows] == [
        ("t", 1, "big"), ("t", 3, "big"), ("u", 0, "big"), ("t", 5, "small"),
        ("a", 2, None), ("z", 0, None),
    ]  # fmt: skip
    by_tp = {(r.topic, r.partition): r for r in rows}
    assert (by_tp["t", 1].current, by_tp["t", 1].end, by_tp["t", 1].lag) == (10, 12, 2)
    assert by_tp["t", 1].leader_epoch == 4
    assert (by_tp["t", 3].current, by_tp["t", 3].lag) == (None, None)  # nothing committed
    assert (by_tp["a", 2].end, by_tp["a", 2].lag) == (None, None)  # end unknown
    verbose = desc.offsets_table(d, verbose=True)
    assert verbose is not None
    header, first, *_ = verbose.splitlines()
    assert header.split()[:4] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH"]
    assert first.split()[:9] == ["g", "t", "1", "4", "10", "12", "2", "big-id", "/10.0.0.1"]
    no_offsets = desc.Described(NODE, group(idle), {}, {})
    assert desc.offsets_table(no_offsets, verbose=False) is None


def test_kafkas_notices_for_missing_empty_and_rebalancing_groups() -> None:
    assert desc.notice(group(state="Dead")) == ("Error: Consumer group 'g' does not exist.", True)
    assert desc.notice(group(state="Empty")) == (
        "Consumer group 'g' has no active members.",
        False,
    )
    for state in ("PreparingRebalance", "CompletingRebalance"):
        assert desc.notice(group(state=state)) == (
            "Warning: Consumer group 'g' is rebalancing.",
            False,
        )
    assert desc.notice(group()) is None


def test_generation_and_leader_read_dash_from_a_kafka_broker() -> None:
    """A Kafka broker sends no kgroups tags: generation -1, leader empty."""
    a, b = member("a", {"t": (0,)}), member("b", {"t": (1,)}, instance="pod-b")
    from_kafka = desc.Described(NODE, group(a, b), {}, {})
    state = desc.state_table(from_kafka, verbose=False).splitlines()[1].split()
    assert state[-3:] == ["2", "-", "-"]  # #MEMBERS, GENERATION, LEADER
    members = desc.members_table(from_kafka, verbose=False).splitlines()
    assert members[0].split() == [
        "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
        "LEADER", "ASSIGNMENT",
    ]  # fmt: skip
    assert members[1].split() == ["g", "a-id", "-", "/10.0.0.1", "a", "1", "-", "t(0)"]
    assert members[2].split() == ["g", "b-id", "pod-b", "/10.0.0.1", "b", "1", "-", "t(1)"]
    js = desc.to_json(from_kafka)
    assert (js["generation"], js["leader"], js["members"][0]["leader"]) == (None, None, None)

    from_kgroups = desc.Described(NODE, group(a, b, generation=7, leader="b-id"), {}, {})
    js = desc.to_json(from_kgroups)
    assert (js["generation"], js["leader"]) == (7, "b-id")
    assert [m["leader"] for m in js["members"]] == [False, True]
    assert js["coordinator"] == {"id": 1, "host": "broker-1", "port": 9092}


def test_assignments_in_kafkas_form_and_kgroups() -> None:
    m = member("m", {"u": (0,), "t": (3, 1), "empty": ()})
    assert desc.kafka_assignment(m) == "t:1,3;u:0"
    assert desc.assignment(m) == "t(1,3),u(0)"
    assert desc.kafka_assignment(member("n", {})) == desc.assignment(member("n", {})) == "-"


def test_delete_reports_each_failure_in_kafkas_words() -> None:
    ok = delete_groups_report({"a": E.none, "b": E.none})
    assert ok.out == ["Deletion of requested consumer groups ('a', 'b') was successful."]
    assert not ok.failed and not ok.err
    mixed = delete_groups_report(
        {"a": E.none, "live": E.non_empty_group, "x": E.group_id_not_found}
    )
    assert mixed.failed
    assert mixed.err == [
        "Error: Deletion of some consumer groups failed:",
        "* Group 'live' could not be deleted due to: NON_EMPTY_GROUP: The group is not empty.",
        "* Group 'x' could not be deleted due to: GROUP_ID_NOT_FOUND: The group id does not exist.",
    ]
    assert mixed.out == ["These consumer groups were deleted successfully: 'a'"]
    assert [r["deleted"] for r in mixed.json] == [True, False, False]


def test_delete_offsets_reports_group_and_partition_errors_as_kafka_sorts_them() -> None:
    gone = delete_offsets_report("g", E.group_id_not_found, {("t", 0): E.group_id_not_found}, {})
    assert gone.err == ["Error: The group id does not exist."] and gone.failed
    assert gone.out[-1].splitlines()[1].split(maxsplit=2) == [
        "t", "0", "Error: GROUP_ID_NOT_FOUND: The group id does not exist.",
    ]  # fmt: skip
    busy = delete_offsets_report(
        "g",
        E.none,
        {("t", 1): E.group_subscribed_to_topic, ("t", 0): E.none},
        {"zz": E.unknown_topic_or_partition},
    )
    assert busy.err == ["Error: Encountered some partition-level error, see the follow-up details."]
    rows = [line.split(maxsplit=2) for line in busy.out[-1].splitlines()[1:]]
    assert rows == [
        ["t", "0", "Successful"],
        ["t", "1", f"Error: {error_message(E.group_subscribed_to_topic)}"],
        ["zz", "-", f"Error: {error_message(E.unknown_topic_or_partition)}"],
    ]
    assert error_message(E.group_subscribed_to_topic) == (
        "GROUP_SUBSCRIBED_TO_TOPIC: Deleting offsets of a topic is forbidden while the "
        "consumer group is actively subscribed to it."
    )
    odd = delete_offsets_report(
        "g", E.rebalance_in_progress, {("t", 0): E.rebalance_in_progress}, {}
    )
    assert odd.err == ["Error: Encountered some unknown error: REBALANCE_IN_PROGRESS"]
    only_missing = delete_offsets_report("g", None, {}, {"zz": E.unknown_topic_or_partition})
    assert only_missing.failed
    assert only_missing.json["partitions"] == [
        {"topic": "zz", "partition": None, "error": error_message(E.unknown_topic_or_partition)}
    ]
