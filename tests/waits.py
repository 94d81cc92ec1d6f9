"""How long a test waits for the state it means, on this machine: one factor for all.

A test on a real process waits for a state (a status, an event, a log line, a row) and
fails only if it never comes. Its bound says how long that state may take on this
project's 2-core machine during `make test`, with room; it is not how long the test
takes, since the wait ends as soon as the state is there. On a slower machine set
`KGROUPS_TEST_SLOWNESS` (a factor, default 1; `KGROUPS_TEST_SLOWNESS=3 make test`):
every such bound is multiplied by it, here, instead of each test widening its own.

Two things are not waits and are not scaled: a duration over which a state must *hold*
(`holds`: a group stays Stable for three session timeouts), and a bound on how *fast*
something happens, which belongs to a benchmark or to a latency phase that runs alone,
relative to a baseline measured there (docs/TESTING.md).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any


def _slowness() -> float:
    text = os.environ.get("KGROUPS_TEST_SLOWNESS", "").strip() or "1"
    try:
        factor = float(text)
    except ValueError:
        factor = 0.0
    if not factor >= 1:
        raise SystemExit(f"KGROUPS_TEST_SLOWNESS must be a number of at least 1 (e.g. 2), "
                         f"not {text!r}")  # fmt: skip
    return factor


SLOWNESS = _slowness()


def within(seconds: float) -> float:
    """The bound on a wait of `seconds` on this machine."""
    return seconds * SLOWNESS


class _Deadline:
    """A wait's bound on this machine, and the failure that names what never came."""

    def __init__(self, timeout: float, what: str) -> None:
        self.bound = within(timeout)
        self.at = time.monotonic() + self.bound
        self.what = what

    def passed(self, last: Any) -> None:
        if time.monotonic() > self.at:
            raise AssertionError(f"timed out after {self.bound:.0f} s waiting for "
                                 f"{self.what}; last seen: {last!r}")  # fmt: skip


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail naming
    `what` and the last value seen after `within(timeout)` seconds."""
    deadline = _Deadline(timeout, what)
    while not (value := predicate()):
        deadline.passed(value)
        time.sleep(poll)
    return value


async def await_until(
    predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.05
) -> Any:
    """`wait_until` inside a coroutine: the event loop runs while it polls."""
    deadline = _Deadline(timeout, what)
    while not (value := predicate()):
        deadline.passed(value)
        await asyncio.sleep(poll)
    return value


def holds(predicate: Callable[[], Any], seconds: float, what: str, poll: float = 0.05) -> int:
    """Assert `predicate()` is truthy at every look for `seconds` (not scaled: how long a
    state must hold is part of what the test asserts); returns how many looks."""
    deadline = time.monotonic() + seconds
    looks = 0
    while time.monotonic() < deadline:
        value = predicate()
        if not value:
            raise AssertionError(f"{what} stopped holding after {looks} looks: {value!r}")
        looks += 1
        time.sleep(poll)
    return looks
