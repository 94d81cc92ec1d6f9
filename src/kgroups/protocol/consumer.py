"""The part of the embedded consumer protocol the coordinator itself reads.

The coordinator treats member metadata as opaque bytes, except for one thing Kafka also
does: it reads the subscribed topics from the version-0 prefix that every
ConsumerProtocolSubscription version starts with (int16 version, then an array of
strings), to know which topics' offsets must not expire while the group is Stable.
The full codec (all versions, assignments, user data) lives with the member library.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics listed in a ConsumerProtocolSubscription; ValueError if it does not parse."""
    view = memoryview(metadata)
    try:
        (version,) = _I16.unpack_from(view, 0)
        if version < 0:
            raise ValueError(f"negative consumer protocol version {version}")
        (count,) = _I32.unpack_from(view, 2)
        if count < 0 or count > len(view):
            raise ValueError(f"bad topic count {count}")
        offset = 6
        topics: list[str] = []
        for _ in range(count):
            (length,) = _I16.unpack_from(view, offset)
            offset += 2
            if length < 0 or offset + length > len(view):
                raise ValueError("truncated topic name")
            topics.append(bytes(view[offset : offset + length]).decode("utf-8"))
            offset += length
    except struct.error as exc:
        raise ValueError(f"truncated consumer protocol subscription: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"topic name is not UTF-8: {exc}") from exc
    return topics
