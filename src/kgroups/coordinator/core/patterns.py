"""Topic patterns of Kafka 4's consumer protocol: RE2 syntax, matched against whole names.

A consumer subscribing with a pattern (Java's `SubscriptionPattern`, librdkafka's `^...`
topics under `group.protocol=consumer`) sends it to the coordinator, which resolves it
against the topics it knows. Kafka compiles it with RE2/J and matches whole names
(`matcher(topic).matches()`): `metrics-.*` matches `metrics-a`, not `old-metrics-a`.

kgroups compiles with RE2 itself (google-re2): the same syntax, and a match costs time
linear in the name whatever the pattern, so no client can stall the coordinator (and
every other group's heartbeats) with a pattern that backtracks, as one could with
Python's `re`. RE2's own logging of a bad pattern is turned off: a refused request must
not write to the coordinator's log. Compiled patterns are kept in a small LRU cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import re2  # type: ignore[import-untyped]

MAX_PATTERN_BYTES = 4096
"""Longer patterns are refused (Kafka has no bound but its frame size; a topic name is
at most 249 characters, so a useful pattern is far shorter)."""
MAX_PROGRAM_BYTES = 1 << 20
"""RE2's memory budget for one compiled pattern (its default is 8 MiB)."""


class InvalidPattern(ValueError):
    """The pattern is not RE2 syntax, or is too large."""


def _options() -> object:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_PROGRAM_BYTES
    return options


_OPTIONS = _options()


@functools.lru_cache(maxsize=256)
def whole_name_matcher(pattern: str) -> Callable[[str], bool]:
    """A predicate: does a topic name match `pattern` as a whole (InvalidPattern if the
    pattern cannot be compiled)."""
    if len(pattern.encode()) > MAX_PATTERN_BYTES:
        raise InvalidPattern(f"longer than {MAX_PATTERN_BYTES} bytes")
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        message = exc.args[0] if exc.args else exc
        if isinstance(message, bytes):
            message = message.decode(errors="replace")
        raise InvalidPattern(str(message)) from None

    def matches(name: str) -> bool:
        return compiled.fullmatch(name) is not None

    return matches
