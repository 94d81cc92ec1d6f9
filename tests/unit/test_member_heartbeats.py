"""A heartbeat answer that arrives after the member moved on must not be acted upon.

The race this pins down was seen in CI: a member's heartbeat for generation N was in flight
when a rejoin began; its REBALANCE_IN_PROGRESS/ILLEGAL_GENERATION answer, handled after
generation N+1 formed, forced one more rebalance (or reset the new generation). Java guards
every heartbeat error with `generationUnchanged()`; so must we.

The coordinator connection is replaced by a stand-in that lets the test change the
member's generation while the heartbeat is "in flight": the real coordinator cannot be
paused at that exact point.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

import pytest

from kgroups.client import GroupMember, MemberState
from kgroups.protocol.errors import ErrorCode


class InFlight:
    """Answers the first heartbeat with `code`, after running `meanwhile` (what happened
    while the request was on the wire); later heartbeats never get an answer."""

    def __init__(self, code: ErrorCode, meanwhile: Any) -> None:
        self.code = code
        self.meanwhile = meanwhile
        self.sent: list[Any] = []
        self.answered = asyncio.Event()

    async def heartbeat(self, body: Any, answer: Any, *, timeout: float | None = None) -> Any:
        self.sent.append(body)
        if len(self.sent) > 1:
            await asyncio.Event().wait()
        self.meanwhile()
        self.answered.set()
        return SimpleNamespace(error_code=self.code)

    async def reset(self) -> None:
        pass


def stable_member() -> GroupMember:
    member = GroupMember("127.0.0.1:1", "g", ["t"], heartbeat_interval_ms=1)
    member.state = MemberState.STABLE
    member.generation, member.member_id = 3, "m-1"
    member._rejoin_needed.clear()
    return member


async def beat_once(member: GroupMember, link: InFlight) -> None:
    member._link = link  # type: ignore[assignment]
    task = asyncio.create_task(member._heartbeat_loop())
    await asyncio.wait_for(link.answered.wait(), 5)
    await asyncio.sleep(0.01)  # the answer is handled
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.parametrize(
    "code",
    [ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id],
    ids=lambda code: code.name,
)
async def test_an_answer_for_a_generation_the_member_left_is_ignored(code: ErrorCode) -> None:
    member = stable_member()

    def new_generation_formed() -> None:
        member.generation, member.member_id = 4, "m-1"

    link = InFlight(code, new_generation_formed)
    await beat_once(member, link)
    assert link.sent[0].generation_id == 3
    assert (member.generation, member.member_id) == (4, "m-1")
    assert member.state == MemberState.STABLE
    assert not member._rejoin_needed.is_set()


@pytest.mark.parametrize(
    ("code", "generation", "member_id"),
    [
        (ErrorCode.illegal_generation, -1, "m-1"),
        (ErrorCode.unknown_member_id, -1, ""),
        (ErrorCode.rebalance_in_progress, 3, "m-1"),
    ],
    ids=["illegal_generation", "unknown_member_id", "rebalance_in_progress"],
)
async def test_an_answer_for_the_current_generation_is_acted_upon(
    code: ErrorCode, generation: int, member_id: str
) -> None:
    """The control: the same answers, nothing moved meanwhile, get Java's reactions."""
    member = stable_member()
    await beat_once(member, InFlight(code, lambda: None))
    assert (member.generation, member.member_id) == (generation, member_id)
    assert member._rejoin_needed.is_set()
