"""The limits' bookkeeping (kgroups.coordinator.limits), with time passed in."""

from __future__ import annotations

import pytest

from kgroups.coordinator.limits import ConnectionCounts, Limits, RateLimiter


def test_connections_are_capped_in_total_and_per_address() -> None:
    counts = ConnectionCounts(Limits(max_connections=3, max_connections_per_address=2))
    assert counts.admit("a") is None and counts.admit("a") is None
    assert counts.admit("a") == "per_address"
    assert counts.admit("b") is None
    assert counts.admit("c") == "total"
    counts.release("a")
    assert counts.admit("c") is None
    assert (counts.total, dict(counts.by_address)) == (3, {"a": 1, "b": 1, "c": 1})
    for address in ("a", "b", "c"):
        counts.release(address)
    assert counts.total == 0 and not counts.by_address


def test_a_rate_lets_a_burst_through_then_spaces_requests_out() -> None:
    limiter = RateLimiter(rate=10, burst=3)
    assert [limiter.delay("p", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [limiter.delay("p", 0.0) for _ in range(3)]
    assert waits == pytest.approx([0.1, 0.2, 0.3])  # queued behind each other
    assert limiter.delay("other", 0.0) == 0.0  # another principal is untouched
    assert limiter.delay("p", 10.0) == 0.0  # refilled (up to the burst)


def test_no_rate_means_no_wait() -> None:
    limiter = RateLimiter(rate=0)
    assert all(limiter.delay("p", 0.0) == 0.0 for _ in range(1000))


@pytest.mark.parametrize(
    "limits",
    [Limits(max_connections=0), Limits(max_buffered_bytes=0), Limits(join_rate=-1)],
)
def test_nonsense_limits_are_refused(limits: Limits) -> None:
    with pytest.raises(ValueError, match="must be"):
        limits.validate()
