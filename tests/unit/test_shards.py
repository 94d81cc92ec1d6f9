"""Groups land on the shard Kafka would give them: `Utils.abs(groupId.hashCode()) % shards`."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kgroups.coordinator.core.shards import java_string_hash, shard_of

# Printed by Java 17 (String.hashCode, Kafka's Utils.abs, % 50) on this machine.
JAVA = [
    ("", 0, 0),
    ("a", 97, 47),
    ("hello", 99162322, 22),
    ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Kafka's abs gives 0
    ("group-1", 293427299, 49),
    ("é✓𝄞", 18326580, 30),  # a character outside the BMP hashes as two UTF-16 units
    ("connect-cluster", 1440343063, 13),
]


def test_hashes_and_shards_match_java_and_kafka() -> None:
    for text, hashed, shard in JAVA:
        assert java_string_hash(text) == hashed, text
        assert shard_of(text, 50) == shard, text


@given(st.text(max_size=60), st.integers(min_value=1, max_value=1000))
def test_the_hash_is_javas_polynomial_and_the_shard_in_range(text: str, shards: int) -> None:
    units = text.encode("utf-16-be")
    codes = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    n = len(codes)
    exact = sum(c * 31 ** (n - 1 - i) for i, c in enumerate(codes)) % 2**32
    assert java_string_hash(text) == (exact - 2**32 if exact >= 2**31 else exact)
    assert 0 <= shard_of(text, shards) < shards
