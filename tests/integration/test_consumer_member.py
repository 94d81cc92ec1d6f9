"""kgroups' own member of Kafka 4's consumer protocol (`ConsumerProtocolMember`), in
process against a real coordinator: what an application relies on.

* A partition moves to another member only after this member's revocation callback has
  finished (it reports the release in the heartbeat it sends once the callback returns).
* A revocation callback longer than the session does not cost the member its place (it
  heartbeats meanwhile), and an assignment sent while it runs is reconciled after it.
* A member cut off from its coordinator (the coordinator's process SIGSTOPped) gives its
  partitions up as lost within its session, before the coordinator could hand them on,
  and comes back once the coordinator answers again.
* Commits carry the member epoch; one at an epoch the member is not at fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgroups.client import CommitFailedError, ConsumerProtocolMember, TopicPartition
from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, create_topic
from tests.waits import within

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class Recorder:
    """A listener that notes when each callback began and ended, and may be slow."""

    def __init__(self, name: str, revoke_s: float = 0.0) -> None:
        self.name = name
        self.revoke_s = revoke_s
        self.events: list[tuple[str, float, frozenset[TopicPartition]]] = []

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("revoking", time.monotonic(), partitions))
        await asyncio.sleep(self.revoke_s)
        self.events.append(("revoked", time.monotonic(), partitions))

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("assigned", time.monotonic(), partitions))

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("lost", time.monotonic(), partitions))


@pytest.fixture
def coord(tmp_path: Path) -> Iterator[Coordinator]:
    c = Coordinator(tmp_path / "data", *FAST)
    c.start()
    create_topic(c, "t", 4)
    yield c
    with_signal(c, signal.SIGCONT)
    c.kill()


def with_signal(c: Coordinator, sig: signal.Signals) -> None:
    assert c.proc is not None
    os.kill(c.proc.pid, sig)


async def until(check: object, seconds: float, what: str) -> None:
    deadline = time.monotonic() + within(seconds)
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


ALL = frozenset(TopicPartition("t", p) for p in range(4))


def test_a_partition_moves_only_after_its_revocation_callback_finished(
    coord: Coordinator,
) -> None:
    async def go() -> None:
        slow, other = Recorder("slow", revoke_s=1.5), Recorder("other")
        a = ConsumerProtocolMember(coord.bootstrap, "g", ["t"], listener=slow,
                                   session_timeout_ms=6000)  # fmt: skip
        await a.start(timeout=20)
        await until(lambda: a.assignment == ALL, 20, "a to own everything")
        b = ConsumerProtocolMember(coord.bootstrap, "g", ["t"], listener=other,
                                   session_timeout_ms=6000)  # fmt: skip
        await b.start(timeout=20)
        await until(lambda: a.assignment and b.assignment and
                    a.assignment | b.assignment == ALL, 30, "both to share")  # fmt: skip
        assert not a.assignment & b.assignment
        revoked = next(e for e in slow.events if e[0] == "revoked")
        got = [e for e in other.events if e[0] == "assigned" and e[2] & revoked[2]]
        assert got and all(e[1] >= revoked[1] for e in got), (slow.events, other.events)
        # Commits carry the epoch: at the member's own, accepted.
        await b.commit(dict.fromkeys(b.assignment, 5))
        assert set((await a.committed(sorted(b.assignment))).values()) == {(5, "")}
        with pytest.raises(CommitFailedError):  # an epoch it never had: STALE_MEMBER_EPOCH
            await b.commit(dict.fromkeys(b.assignment, 6), generation=b.generation + 1)
        await b.close()
        await until(lambda: a.assignment == ALL, 20, "a to take everything back")
        await a.close()

    asyncio.run(go())


def test_a_revocation_longer_than_the_session_keeps_the_member_and_the_next_one_follows(
    coord: Coordinator,
) -> None:
    create_topic(coord, "six", 6)
    six = frozenset(TopicPartition("six", p) for p in range(6))

    async def go() -> None:
        slow = Recorder("slow", revoke_s=7.0)  # the session is 6 s
        a = ConsumerProtocolMember(coord.bootstrap, "six", ["six"], listener=slow,
                                   session_timeout_ms=6000)  # fmt: skip
        await a.start(timeout=20)
        await until(lambda: a.assignment == six, 20, "a to own everything")
        b = ConsumerProtocolMember(coord.bootstrap, "six", ["six"], listener=Recorder("b"),
                                   session_timeout_ms=6000)  # fmt: skip
        await b.start(timeout=20)
        await until(lambda: a.revoking, 10, "a to start revoking b's share")
        first = a.revoking
        c = ConsumerProtocolMember(coord.bootstrap, "six", ["six"], listener=Recorder("c"),
                                   session_timeout_ms=6000)  # fmt: skip
        await c.start(timeout=20)  # a newer target for a, while its callback runs
        members = (a, b, c)

        def shared() -> bool:
            held = [m.assignment for m in members]
            return all(held) and sum(map(len, held)) == 6 and frozenset().union(*held) == six

        await until(shared, 40, "the three to share")
        assert not [e for e in slow.events if e[0] == "lost"], slow.events
        steps = [(e[0], e[2]) for e in slow.events if e[0] in ("revoking", "revoked")]
        assert steps[:2] == [("revoking", first), ("revoked", first)]
        # 3 of 6 for b, then 1 of the 3 left for c: the next target's, after the first.
        assert [len(p) for _, p in steps] == [3, 3, 1, 1] and steps[2][0] == "revoking"
        assert a.state == "stable" and a.generation > 0
        for m in members:
            await m.close()

    asyncio.run(go())


def test_a_member_cut_off_gives_its_partitions_up_within_its_session(
    coord: Coordinator,
) -> None:
    async def go() -> None:
        notes = Recorder("m")
        m = ConsumerProtocolMember(coord.bootstrap, "g", ["t"], listener=notes,
                                   session_timeout_ms=3000, request_timeout=2.0)  # fmt: skip
        await m.start(timeout=20)
        await until(lambda: m.assignment == ALL, 20, "the member to own everything")
        with_signal(coord, signal.SIGSTOP)
        stopped = time.monotonic()
        await until(lambda: any(e[0] == "lost" for e in notes.events), 10, "the partitions lost")
        lost = next(e for e in notes.events if e[0] == "lost")
        # Within the coordinator's session (6 s here): before it could fence the member and
        # hand its partitions on (the member's own deadline is 80% of its 3 s, from its
        # last heartbeat's sending).
        assert lost[2] == ALL and lost[1] - stopped < 6.0
        assert m.assignment == frozenset()
        with_signal(coord, signal.SIGCONT)
        await until(lambda: m.assignment == ALL, 30, "the member back with everything")
        await m.close()

    asyncio.run(go())
