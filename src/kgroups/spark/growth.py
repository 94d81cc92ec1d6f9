"""Keeps the group's topic on the coordinator as large as the source's.

The group's members are assigned the partitions the *coordinator* knows of, but the
records are in the source (a Kafka cluster, the file log). Kafka's consumers notice a
topic that grew when their metadata says so; here the source says so: every `interval`
seconds the pipeline asks the source how many partitions the topic has, and when the
coordinator has fewer (or no such topic), it grows (or creates) the coordinator's topic
with Kafka's CreatePartitions (CreateTopics) and asks its member to rejoin, so that the
new partitions are assigned now rather than at the leader's next metadata refresh. One
member of the group doing it is enough; the others then find the counts equal.

When it cannot (the pipeline's principal may not alter the topic, the coordinator is
away), it says why, once per state, and the group goes on with what the coordinator has.
A coordinator topic *larger* than the source's is reported the same way: the partitions
the source does not have are not read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)

INTERVAL_S = 30.0


class TopicAdmin(Protocol):
    """What growing needs of an admin client (kgroups.admin.Admin)."""

    async def topics(self, names: list[str] | None = None) -> dict[str, int]: ...
    async def create_topic(self, name: str, partitions: int) -> None: ...
    async def create_partitions(self, name: str, partitions: int) -> None: ...


AdminSession = Callable[[Callable[[TopicAdmin], Awaitable[None]]], Awaitable[None]]
"""Runs a function with a connected admin client (and closes it after)."""


class TopicGrowth:
    def __init__(self, topic: str, admin: AdminSession, *, interval: float = INTERVAL_S) -> None:
        self.topic = topic
        self.admin = admin
        self.interval = interval
        self.next_check = 0.0
        self.source_count: int | None = None
        """The source's partition count at the last check (None: not known)."""
        self._said: str | None = None

    def due(self, now: float) -> bool:
        return now >= self.next_check

    def _say(self, message: str, *, warn: bool = True) -> None:
        if message != self._said:
            (log.warning if warn else log.info)("%s", message)
            self._said = message

    async def check(self, source_count: int | None, now: float) -> bool:
        """Compare with the coordinator and grow it if needed; True when it grew (the
        member should rejoin)."""
        self.next_check = now + self.interval
        self.source_count = source_count
        if source_count is None:
            self._say(f"topic {self.topic!r} does not exist in the source: nothing to read")
            return False
        grew = False

        async def compare(admin: TopicAdmin) -> None:
            nonlocal grew
            have = (await admin.topics([self.topic])).get(self.topic)
            if have is None or have < source_count:
                try:
                    if have is None:
                        await admin.create_topic(self.topic, source_count)
                    else:
                        await admin.create_partitions(self.topic, source_count)
                except Exception:
                    # Another member of the group may have grown it a moment before.
                    now = (await admin.topics([self.topic])).get(self.topic)
                    if now is None or now < source_count:
                        raise
                    return
            elif have > source_count:
                self._say(f"topic {self.topic!r} has {have} partitions on the coordinator "
                          f"but {source_count} in the source: partitions {source_count} "
                          f"and above have nothing to read")  # fmt: skip
                return
            else:
                return
            grew = True
            self._say(f"topic {self.topic!r}: {source_count} partitions in the source, "
                      f"{have or 0} on the coordinator: grown", warn=False)  # fmt: skip

        try:
            await self.admin(compare)
        except Exception as exc:  # noqa: BLE001 - reported, and the group goes on
            self._say(f"topic {self.topic!r} has {source_count} partitions in the source; "
                      f"could not make the coordinator's as large: {exc}")  # fmt: skip
        return grew
