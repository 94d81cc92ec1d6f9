"""The embedded consumer protocol, byte for byte as Kafka's Java `ConsumerProtocol` writes it.

Members of one group read each other's subscriptions and the leader's assignments, so a
single wrong byte splits a mixed group. Checked against the byte layouts in reference
§3.2, against kafka-python's own encoder/decoder (a real peer), and for the sticky user
data against Java's layout (kafka-python writes a different one; we read both).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from kgroups.protocol.consumer import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
    subscription_topics,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# -- the reference's byte layouts -----------------------------------------------------------


def test_subscription_v0_bytes() -> None:
    raw = encode_subscription(Subscription(("foo",), version=0))
    assert raw == h("00 00 | 00 00 00 01 | 00 03 66 6f 6f | ff ff ff ff")


def test_subscription_v3_bytes_sort_topics_and_owned_partitions() -> None:
    sub = Subscription(("foo", "bar"), None, {"foo": (0,)}, generation=5, rack="r1")
    assert encode_subscription(sub) == h(
        "00 03 | 00 00 00 02 00 03 62 61 72 00 03 66 6f 6f | ff ff ff ff"
        "| 00 00 00 01 00 03 66 6f 6f 00 00 00 01 00 00 00 00 | 00 00 00 05 | 00 02 72 31"
    )
    # Owned partitions are written sorted by (topic, partition), whatever the input order.
    shuffled = Subscription(("foo",), None, {"z": (3, 1), "a": (2,)}, generation=1)
    decoded = decode_subscription(encode_subscription(shuffled))
    assert list(decoded.owned) == ["a", "z"] and decoded.owned["z"] == (1, 3)


def test_assignment_v0_bytes() -> None:
    raw = encode_assignment(Assignment({"foo": (0, 1)}, version=0))
    assert raw == h(
        "00 00 | 00 00 00 01 00 03 66 6f 6f 00 00 00 02 00 00 00 00 00 00 00 01 | ff ff ff ff"
    )


def test_cooperative_user_data_is_one_int32() -> None:
    assert encode_cooperative_user_data(5) == h("00 00 00 05")
    assert decode_cooperative_user_data(h("00 00 00 05")) == 5
    assert decode_cooperative_user_data(None) is None
    assert decode_cooperative_user_data(b"\x00") == -1  # unreadable: Java's -1


# -- every version, both ways ----------------------------------------------------------------

topics = st.lists(st.text("abcxyz._-", min_size=1, max_size=8), min_size=1, max_size=4, unique=True)
owned = st.dictionaries(
    st.text("abc", min_size=1, max_size=3),
    st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5, unique=True).map(
        lambda ps: tuple(sorted(ps))
    ),
    max_size=3,
)


@given(
    topics,
    st.none() | st.binary(max_size=16),
    owned,
    st.integers(-1, 2**31 - 1),
    st.none() | st.text("ab", min_size=1, max_size=3),
    st.integers(0, 3),
)
def test_subscription_round_trips_in_every_version(
    names: list[str],
    user_data: bytes | None,
    mine: dict[str, tuple[int, ...]],
    generation: int,
    rack: str | None,
    version: int,
) -> None:
    sub = Subscription(tuple(names), user_data, mine, generation, rack, version)
    back = decode_subscription(encode_subscription(sub))
    assert back.topics == tuple(sorted(names))
    assert back.user_data == user_data
    assert back.version == version
    assert back.owned == (dict(sorted(mine.items())) if version >= 1 else {})
    assert back.generation == (generation if version >= 2 else -1)
    assert back.rack == (rack if version >= 3 else None)
    # The coordinator reads only the v0 prefix; it must see the same topics.
    assert subscription_topics(encode_subscription(sub)) == sorted(names)


@given(owned, st.none() | st.binary(max_size=8), st.integers(0, 3))
def test_assignment_round_trips_in_every_version(
    parts: dict[str, tuple[int, ...]], user_data: bytes | None, version: int
) -> None:
    back = decode_assignment(encode_assignment(Assignment(parts, user_data, version)))
    assert back.partitions == parts and back.user_data == user_data


def test_a_newer_version_is_read_as_the_newest_we_know() -> None:
    """Kafka: new versions only append fields; a reader clamps to its highest version."""
    v3 = encode_subscription(Subscription(("t",), None, {"t": (0,)}, 7, "r"))
    v9 = b"\x00\x09" + v3[2:] + b"\x00\x00\x00\x2a"  # v9 with a field we do not know
    sub = decode_subscription(v9)
    assert (sub.topics, sub.owned, sub.generation, sub.rack) == (("t",), {"t": (0,)}, 7, "r")


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00", b"\x00\x00\x00\x00\x00\x05\x00", b"\xff\xff", h("00 00 00 00 00 01 00 09 61")],
)
def test_malformed_subscriptions_raise_a_clear_error(raw: bytes) -> None:
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(raw)


def test_empty_assignment_bytes_mean_nothing_assigned_but_garbage_is_an_error() -> None:
    assert decode_assignment(b"").partitions == {}
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(b"\x00\x00\x00\x00\x00\x09")


# -- kafka-python, a real peer -----------------------------------------------------------------


def test_kafka_python_reads_our_subscription_and_we_read_its() -> None:
    ours = encode_subscription(Subscription(("foo", "bar"), b"u", {"foo": (0, 2)}, 5, "r1"))
    theirs = KpSubscription.decode(ours)
    assert (theirs.topics, theirs.user_data, theirs.generation_id, theirs.rack_id) == (
        ["bar", "foo"], b"u", 5, "r1",
    )  # fmt: skip
    assert [(tp.topic, tp.partitions) for tp in theirs.owned_partitions] == [("foo", [0, 2])]

    kp = KpSubscription(
        version=3, topics=["foo", "bar"], user_data=None, generation_id=9, rack_id="r2",
        owned_partitions=[KpSubscription.TopicPartition(topic="foo", partitions=[0])],
    )  # fmt: skip
    back = decode_subscription(kp.encode())
    assert back == Subscription(("foo", "bar"), None, {"foo": (0,)}, 9, "r2", 3)


def test_kafka_python_reads_our_assignment_and_we_read_its() -> None:
    ours = encode_assignment(Assignment({"t": (3, 1), "u": (0,)}))
    theirs = KpAssignment.decode(ours)
    assert [(tp.topic, tp.partitions) for tp in theirs.assigned_partitions] == [
        ("t", [3, 1]), ("u", [0]),
    ]  # fmt: skip
    kp = KpAssignment(0, [("t", [0, 1])], b"x").encode()
    assert decode_assignment(kp) == Assignment({"t": (0, 1)}, b"x", 0)


# -- sticky user data: Java's layout, and kafka-python's read too -------------------------------


def test_sticky_user_data_is_javas_layout() -> None:
    raw = encode_sticky_user_data({"t": (0, 1)}, 3)
    # [topic "t", [0, 1]], generation 3: no version prefix (Java StickyAssignor V1).
    assert raw == h("00 00 00 01 | 00 01 74 | 00 00 00 02 00 00 00 00 00 00 00 01 | 00 00 00 03")
    assert decode_sticky_user_data(raw) == ({"t": (0, 1)}, 3)
    # V0 (Java before generations): no generation at the end.
    v0 = encode_sticky_user_data({"t": (0,)}, None)
    assert decode_sticky_user_data(v0) == ({"t": (0,)}, None)


def test_kafka_python_sticky_user_data_is_read_so_its_members_stay_sticky() -> None:
    raw = StickyAssignorUserData([("t", [0, 1]), ("u", [5])], 4).encode()
    assert raw[:2] == b"\x00\x01"  # kafka-python's int16 version prefix, which Java lacks
    assert decode_sticky_user_data(raw) == ({"t": (0, 1), "u": (5,)}, 4)


def test_unreadable_sticky_user_data_means_nothing_owned() -> None:
    assert decode_sticky_user_data(b"\x01\x02\x03") == ({}, -1)
    assert decode_sticky_user_data(None) == ({}, None)
