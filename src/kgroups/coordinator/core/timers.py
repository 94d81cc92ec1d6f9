"""Keyed timers on integer-millisecond time that the caller passes in.

The coordinator keeps many deadlines (one session timer per member, one join and one
pending-sync timer per group, the offset-expiry sweep) but exposes one: the earliest.
Scheduling under a key that already exists replaces the old deadline, exactly like Kafka's
`CoordinatorTimer`, so "reset the session timer" is simply "schedule it again".

Cancelled and replaced entries stay in the heap and are skipped when they surface; each
entry carries a sequence number, so a stale heap entry is recognised in O(1). A deadline
moved later is updated in its entry alone and its heap entry pushed again when it
surfaces, so a heartbeat costs no heap operation.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

TimerAction = Callable[[int], None]
"""What runs when a timer fires; it receives the firing time in milliseconds."""


@dataclass(slots=True)
class _Entry:
    deadline_ms: int
    seq: int
    key: str
    action: TimerAction = field(compare=False)


class KeyedTimers:
    """A set of named deadlines; the owner asks which are due and runs them."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str]] = []
        self._entries: dict[str, _Entry] = {}
        self._seq = 0

    def schedule(self, key: str, deadline_ms: int, action: TimerAction) -> None:
        """Arm `key` to run `action` at `deadline_ms`, replacing any earlier arming.

        Moving an armed key later (a heartbeat pushing its session timer back, thousands
        of times a second) changes its entry in place: its heap entry, now early, is
        pushed again at the new deadline only when it surfaces."""
        entry = self._entries.get(key)
        if entry is not None and deadline_ms >= entry.deadline_ms:
            entry.deadline_ms = deadline_ms
            entry.action = action
            return
        self._seq += 1
        self._entries[key] = _Entry(deadline_ms, self._seq, key, action)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))

    def extend(self, key: str, deadline_ms: int) -> int | None:
        """Move an armed `key` to `deadline_ms`, no earlier than it was, keeping its
        action (a steady heartbeat pushing its session back): the deadline it had, or
        None (and nothing changed) when `key` is not armed or would fire earlier."""
        entry = self._entries.get(key)
        if entry is None or deadline_ms < entry.deadline_ms:
            return None
        before = entry.deadline_ms
        entry.deadline_ms = deadline_ms
        return before

    def cancel(self, key: str) -> None:
        """Disarm `key`; cancelling an unknown key is a no-op."""
        self._entries.pop(key, None)

    def deadline(self, key: str) -> int | None:
        """When `key` fires, or None if it is not armed."""
        entry = self._entries.get(key)
        return None if entry is None else entry.deadline_ms

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        """The armed keys (for tests and introspection)."""
        return list(self._entries)

    def next_deadline(self) -> int | None:
        """The earliest armed deadline, or None when nothing is armed."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> _Entry | None:
        """Remove and return the earliest entry due at `now_ms`, if any.

        The caller runs one action at a time, so an action that arms another already-due
        timer is seen by the next call.
        """
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        return self._entries.pop(key)

    def _drop_stale(self) -> None:
        """Bring the heap's top to a live entry at its current deadline: drop entries
        cancelled or replaced, and push again those whose deadline moved later."""
        heap = self._heap
        while heap:
            deadline_ms, seq, key = heap[0]
            entry = self._entries.get(key)
            if entry is None or entry.seq != seq:
                heapq.heappop(heap)
            elif entry.deadline_ms != deadline_ms:
                heapq.heapreplace(heap, (entry.deadline_ms, seq, key))
            else:
                return
