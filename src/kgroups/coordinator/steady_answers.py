"""Encoded answers to steady ConsumerGroupHeartbeats, made without encoding.

A steady heartbeat's answer names the member, its epoch and the interval until its next
heartbeat, nothing else. The interval is not always the group's: a member off its slot
of the interval is told the time to its slot (`consumer_heartbeat.phased`), a different
number each time. Under load a member's heartbeats come in bursts, and the first of each
burst is such a one: cached whole, one answer in sixteen at 16 in flight was encoded
again (6% of the server's time at 1,000 members). So the cache keeps, per member and
epoch, the encoded answer split around its 4-byte interval, and an answer is the two
halves with the interval's bytes between them.
"""

from __future__ import annotations

import dataclasses
import struct

from kgroups.coordinator.core.msg_consumer import ConsumerHeartbeatResponse, SteadyAnswer
from kgroups.coordinator.pipeline import HEAD
from kgroups.coordinator.wire import encode
from kgroups.protocol.apis import ApiKey
from kgroups.protocol.frames import encode_response

MAX_CACHED = 100_000
"""Members' templates kept (one per member, epoch and version): past this many (members
come and go) the cache starts again."""

INTERVAL = struct.Struct(">i")
PROBES = (0x11223344, 0x55667788)
"""Two intervals whose every byte differs: where their encodings differ is the field."""


class SteadyAnswers:
    """Frames answering steady ConsumerGroupHeartbeats, by correlation id."""

    def __init__(self) -> None:
        self._templates: dict[tuple[int, str, int], tuple[int, bytes, bytes]] = {}

    def __len__(self) -> int:
        return len(self._templates)

    def frame(self, version: int, answer: SteadyAnswer, correlation_id: int) -> bytes:
        """The whole response frame (size, correlation id, header, body) for `answer`."""
        key = (version, answer.member_id, answer.member_epoch)
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= MAX_CACHED:
                self._templates.clear()
            template = self._templates[key] = split(version, answer.response())
        size, before, after = template
        interval = INTERVAL.pack(answer.heartbeat_interval_ms)
        return b"".join((HEAD.pack(size, correlation_id), before, interval, after))


def split(version: int, answer: ConsumerHeartbeatResponse) -> tuple[int, bytes, bytes]:
    """(the frame's size field, the encoded answer before its interval, after it)."""
    one, two = (_payload(version, dataclasses.replace(answer, heartbeat_interval_ms=p))
                for p in PROBES)  # fmt: skip
    at = next(i for i, (a, b) in enumerate(zip(one, two, strict=True)) if a != b)
    if (one[at : at + 4], two[at : at + 4]) != tuple(INTERVAL.pack(p) for p in PROBES) or (
        one[:at] != two[:at] or one[at + 4 :] != two[at + 4 :]
    ):
        raise AssertionError("the heartbeat interval is not one int32 in the encoded answer")
    return len(one) + 4, one[:at], one[at + 4 :]


def _payload(version: int, answer: ConsumerHeartbeatResponse) -> bytes:
    """The encoded response after its size and correlation id."""
    body = encode(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, answer)
    return encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, 0, body)[8:]
