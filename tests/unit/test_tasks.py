"""`kgroups.tasks`: every background task named, kept until done, its crash handed to the
policy its owner chose (and a cancellation never mistaken for a crash)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from kgroups.tasks import Tasks, wait_set


async def test_a_task_is_named_after_its_owner_and_kept_until_done() -> None:
    tasks = Tasks("owner")
    gate = asyncio.Event()

    async def wait() -> int:
        await gate.wait()
        return 7

    task = tasks.spawn("waiting", wait())
    del task
    gc.collect()  # asyncio alone holds a weak reference: ours keeps it alive
    assert tasks.names == ["owner:waiting"] and len(tasks) == 1
    gate.set()
    await asyncio.sleep(0.01)
    assert tasks.names == [] and len(tasks) == 0


async def test_a_crash_goes_to_the_policy_given_at_spawn_or_else_the_owners() -> None:
    crashes: list[tuple[str, str]] = []
    tasks = Tasks("owner", on_crash=lambda name, exc: crashes.append(("owner", f"{name} {exc}")))

    async def fail(why: str) -> None:
        raise RuntimeError(why)

    tasks.spawn("a", fail("bug a"))
    tasks.spawn(
        "b", fail("bug b"), on_crash=lambda name, exc: crashes.append(("b", f"{name} {exc}"))
    )
    await asyncio.sleep(0.01)
    assert sorted(crashes) == [("b", "owner:b bug b"), ("owner", "owner:a bug a")]
    assert len(tasks) == 0


async def test_a_policy_that_fails_is_logged_and_the_task_still_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(name: str, exc: BaseException) -> None:
        raise ValueError("the policy itself")

    tasks = Tasks("owner", on_crash=broken)

    async def fail() -> None:
        raise RuntimeError("bug")

    tasks.spawn("a", fail())
    await asyncio.sleep(0.01)
    assert "the crash policy of owner:a failed" in caplog.text
    assert len(tasks) == 0


async def test_cancelling_is_not_a_crash_and_close_waits_for_every_task() -> None:
    crashes: list[str] = []
    tasks = Tasks("owner", on_crash=lambda name, exc: crashes.append(name))
    finished: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            finished.append(name)

    for name in ("a", "b", "c"):
        tasks.spawn(name, forever(name))
    await asyncio.sleep(0)
    await tasks.close()
    assert sorted(finished) == ["a", "b", "c"]
    assert crashes == [] and len(tasks) == 0


async def test_cancel_can_keep_one_task() -> None:
    tasks = Tasks("owner")
    kept = tasks.spawn("kept", asyncio.sleep(0.05))
    other = tasks.spawn("other", asyncio.sleep(3600))
    tasks.cancel(keep=kept)
    await asyncio.sleep(0.1)
    assert other.cancelled() and kept.done() and not kept.cancelled()


async def test_wait_set_says_whether_the_event_came_in_time() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, 0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 5)


async def test_a_pause_stopped_as_its_event_is_set_is_stopped() -> None:
    """A loop pausing on an event, cancelled at the moment the event is set, must see the
    cancellation (asyncio.wait_for on 3.11 returns instead, and the loop runs forever)."""
    event = asyncio.Event()
    turns = 0

    async def loop() -> None:
        nonlocal turns
        while True:
            turns += 1
            await wait_set(event, 10)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # paused
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), 1)
    assert task.cancelled() and turns == 1
