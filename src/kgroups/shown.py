"""Names from the wire, shortened for log lines and error messages.

A group id, member id, client id or user name is whatever a client sent, up to Kafka's
32,767-byte string limit (and a SASL user name up to the pre-authentication frame
limit). Logged whole, a client refused a few thousand times could write gigabytes of
log; kept whole as a key, it could hold as much memory. Every such name a log line or a
bounded bookkeeping key carries goes through `shown`.
"""

from __future__ import annotations

SHOWN_CHARS = 120
"""The longest name a log line carries whole."""


def shown(name: object, limit: int = SHOWN_CHARS) -> str:
    """`name` as text of at most about `limit` characters, with control characters
    escaped (a name must not forge log lines) and the full length said when cut."""
    text = name if isinstance(name, str) else str(name)
    cut = len(text) > limit
    if cut:
        text = text[:limit]
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")[:limit]
    if cut:
        return f"{text}...({len(name) if isinstance(name, str) else '?'} chars)"
    return text


class LogBudget:
    """At most `burst` log lines per key per `interval_s`, remembering at most `max_keys`
    keys.

    What a client can make us log (a refused authentication, a malformed frame, a
    refused authorization) is logged at most `burst` times per key (its address, its
    principal) per interval; the first line after that says how many were not logged.
    Past `max_keys` keys everything is forgotten at once: a flood of keys costs at most a
    line each, never memory."""

    def __init__(self, interval_s: float, burst: int = 1, max_keys: int = 1_000) -> None:
        self.interval_s = interval_s
        self.burst = burst
        self.max_keys = max_keys
        self._windows: dict[object, list[float]] = {}
        """key -> [window start, lines logged in it, lines not logged in it]."""

    def take(self, key: object, now: float) -> int | None:
        """None: do not log now. Else log, and say how many lines were not logged."""
        window = self._windows.get(key)
        if window is None or window[0] + self.interval_s <= now:
            if window is None and len(self._windows) >= self.max_keys:
                self._windows.clear()
            skipped = int(window[2]) if window is not None else 0
            self._windows[key] = [now, 1, 0]
            return skipped
        if window[1] < self.burst:
            window[1] += 1
            return 0
        window[2] += 1
        return None


def suppressed(count: int) -> str:
    """The suffix of a log line after `count` lines were not logged."""
    return f" ({count} more like it not logged)" if count else ""
