"""`kgroups group`'s arguments, read as kafka-consumer-groups reads them, and its tables
laid out as Kafka's tool lays them out (lines captured from kafka-consumer-groups 4.3.1).
"""

from __future__ import annotations

import datetime

import pytest

from kgroups.admin import GroupView, MemberView, Node
from kgroups.api.deleting import delete_offsets_report
from kgroups.api.parse import (
    UsageError,
    parse_datetime,
    parse_duration,
    parse_plan,
    plan_csv,
    states_arg,
    topic_arg,
)
from kgroups.api.reset import clamp
from kgroups.api.table import Column, render
from kgroups.groupcli import describe as desc
from kgroups.protocol.errors import ErrorCode

# --- --topic, --state ---------------------------------------------------------------------


def test_topic_args_name_a_topic_or_some_of_its_partitions() -> None:
    assert topic_arg("orders") == ("orders", None)
    assert topic_arg("orders:0") == ("orders", (0,))
    assert topic_arg("orders:2,0,2") == ("orders", (2, 0))


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("orders:", "Invalid topic arg 'orders:', expected topic name and partitions"),
        (":1", "Invalid topic arg ':1', expected topic name and partitions"),
        ("a:1:2", "Invalid topic arg 'a:1:2', expected topic name and partitions"),
        ("orders:1,x", "Invalid partition 'x' specified in topic arg 'orders:1,x'"),
        ("orders:-1", "Invalid partition '-1' specified in topic arg 'orders:-1'"),
    ],
)
def test_bad_topic_args_are_refused_in_kafkas_words(arg: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        topic_arg(arg)
    assert str(refused.value) == message


def test_states_are_kafkas_names_matched_without_case() -> None:
    assert states_arg("stable,EMPTY, preparingrebalance") == (
        "Stable",
        "Empty",
        "PreparingRebalance",
    )
    with pytest.raises(UsageError) as refused:
        states_arg("stable,bogus")
    assert str(refused.value).startswith(
        "Invalid state list 'stable,bogus'. Valid states are: PreparingRebalance, "
    )


# --- --by-duration, --to-datetime ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT0S", datetime.timedelta(0)),
        ("P2D", datetime.timedelta(days=2)),
        ("PT30M", datetime.timedelta(minutes=30)),
        ("P1DT2H3M4.5S", datetime.timedelta(days=1, hours=2, minutes=3, seconds=4.5)),
        ("pt1h", datetime.timedelta(hours=1)),
        ("-PT1H", -datetime.timedelta(hours=1)),
        ("PT-0.5S", -datetime.timedelta(seconds=0.5)),
        ("PT1H-30M", datetime.timedelta(minutes=30)),
    ],
)
def test_durations_are_java_time_durations(text: str, expected: datetime.timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "P1W", "P1Y", "PT1.5H", "P1DT", "PT1S2M"])
def test_what_java_time_refuses_is_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


def test_datetimes_without_a_zone_are_utc_as_in_kafka() -> None:
    assert parse_datetime("2020-01-01T00:00:00.000") == 1_577_836_800_000
    assert parse_datetime("2020-01-01T00:00:00.250Z") == 1_577_836_800_250
    assert parse_datetime("2020-01-01T02:00:00.000+02:00") == 1_577_836_800_000
    with pytest.raises(UsageError, match="does not contain a 'T'"):
        parse_datetime("2020-01-01")
    with pytest.raises(UsageError, match="Error parsing timestamp"):
        parse_datetime("2020-13-01T00:00:00")


# --- --export and --from-file -------------------------------------------------------------


def test_an_exported_plan_reads_back_for_one_group_and_for_many() -> None:
    one = {"g": {("t", 1): 7, ("t", 0): 5, ("u", 0): 0}}
    text = plan_csv(one, with_group=False)
    assert text == "t,0,5\nt,1,7\nu,0,0\n"  # what kafka-consumer-groups --export writes
    assert parse_plan(text, ["g"]) == one
    many = {"a": {("t", 0): 1}, "b": {("t", 0): 2, ("t", 3): 9}}
    text = plan_csv(many, with_group=True)
    assert text == "a,t,0,1\nb,t,0,2\nb,t,3,9\n"
    assert parse_plan(text, []) == many
    assert parse_plan(text + "\n\n", ["a", "b"]) == many  # blank lines are nothing


def test_a_plan_without_groups_needs_exactly_one_group() -> None:
    with pytest.raises(UsageError, match="exactly one --group"):
        parse_plan("t,0,5\n", ["a", "b"])
    with pytest.raises(UsageError, match="line 2: expected"):
        parse_plan("t,0,5\nt,1\n", ["a"])
    with pytest.raises(UsageError, match="must be numbers"):
        parse_plan("t,x,5\n", ["a"])


# --- clamping -----------------------------------------------------------------------------


def test_offsets_are_clamped_into_the_log_with_kafkas_warning() -> None:
    t0, t1, t2, t3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)
    clamped, warnings = clamp(
        {t0: 100, t1: -5, t2: 7, t3: 100},
        earliest={t0: 0, t1: 3, t2: 0},
        latest={t0: 42, t1: 42, t2: 42},  # t3's bounds are unknown: left as asked
    )
    assert clamped == {t0: 42, t1: 3, t2: 7, t3: 100}
    assert warnings == [
        "New offset (100) is higher than latest offset for topic partition t-0. "
        "Value will be set to 42",
        "New offset (-5) is lower than earliest offset for topic partition t-1. "
        "Value will be set to 3",
    ]


# --- Kafka's layout -----------------------------------------------------------------------

M0 = "m0-070fb2cd-bf96-4790-9b80-6786c959c634"
M1 = "m1-dd4c2efb-fe71-448c-95bf-00d4ba4dcee5"
LIVE = GroupView(
    "live",
    "Stable",
    "consumer",
    "range",
    (
        MemberView(M0, None, "m0", "/127.0.0.1", {"t": (0, 1)}),
        MemberView(M1, None, "m1", "/127.0.0.1", {"t": (2, 3)}),
    ),
    generation=3,
    leader=M1,
)
KGROUPS = Node(0, "127.0.0.1", 34761)


def described(group: GroupView = LIVE) -> desc.Described:
    committed = {("t", p): desc.Committed(42) for p in range(4)}
    return desc.Described(KGROUPS, group, committed, {("t", p): 42 for p in range(4)})


def kafka(text: str) -> list[str]:
    """Lines kafka-consumer-groups printed, without their trailing blanks."""
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def test_the_offsets_view_is_kafkas_to_the_character() -> None:
    assert desc.offsets_table(described(), verbose=False) == "\n".join(
        kafka(
            f"""
GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID                             HOST            CLIENT-ID
live            t               0          42              42              0               {M0} /127.0.0.1      m0
live            t               1          42              42              0               {M0} /127.0.0.1      m0
live            t               2          42              42              0               {M1} /127.0.0.1      m1
live            t               3          42              42              0               {M1} /127.0.0.1      m1
"""
        )
    )


def test_the_members_and_state_views_are_kafkas_then_kgroups_columns() -> None:
    members = desc.members_table(described(), verbose=True).splitlines()
    expected = kafka(
        f"""
GROUP           CONSUMER-ID                             HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT
live            {M0} /127.0.0.1      m0              2               -               t:0,1                -               -
live            {M1} /127.0.0.1      m1              2               -               t:2,3                -               -
"""
    )
    for ours, theirs in zip(members, expected, strict=True):
        assert ours.startswith(theirs)
    assert [line.split()[-1] for line in members] == ["LEADER", "no", "yes"]
    plain = desc.members_table(described(), verbose=False).splitlines()
    assert [line.split()[-2:] for line in plain] == [
        ["LEADER", "ASSIGNMENT"],
        ["no", "t(0,1)"],
        ["yes", "t(2,3)"],
    ]

    state = desc.state_table(described(), verbose=False).splitlines()
    expected = kafka(
        """
GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS
live            127.0.0.1:34761  (0)      range                Stable               2
"""
    )
    for ours, theirs in zip(state, expected, strict=True):
        assert ours.startswith(theirs)
    assert state[0].split()[-2:] == ["GENERATION", "LEADER"]
    assert state[1].split()[-2:] == ["3", M1]


def test_the_reset_and_delete_offsets_tables_are_kafkas() -> None:
    plan = render(
        [Column("GROUP"), Column("TOPIC"), Column("PARTITION", 10), Column("NEW-OFFSET")],
        [["anchor", "t", 0, 42], ["anchor", "t", 1, 42]],
    )
    assert plan.splitlines() == kafka(
        """
GROUP           TOPIC           PARTITION  NEW-OFFSET
anchor          t               0          42
anchor          t               1          42
"""
    )
    report = delete_offsets_report(
        "anchor", ErrorCode.none, {("t", 0): ErrorCode.none, ("u", 0): ErrorCode.none}, {}
    )
    assert report.out == [
        "Request succeeded for deleting offsets from group anchor.",
        "",
        "\n".join(
            kafka(
                """
TOPIC           PARTITION  STATUS
t               0          Successful
u               0          Successful
"""
            )
        ),
    ]
    assert not report.failed and not report.err
