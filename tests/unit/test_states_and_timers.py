"""The transition table (Kafka's ClassicGroupState) and the keyed timers."""

from __future__ import annotations

import pytest

from kgroups.coordinator.core.states import (
    VALID_PREVIOUS,
    GroupState,
    IllegalTransition,
    check_transition,
)
from kgroups.coordinator.core.timers import KeyedTimers

S = GroupState
LEGAL = {
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    *((s, S.DEAD) for s in S),
}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_transition_legality_matches_kafka(source: GroupState, target: GroupState) -> None:
    if (source, target) in LEGAL:
        check_transition("g", source, target)
    else:
        with pytest.raises(IllegalTransition, match=target.value):
            check_transition("g", source, target)


def test_wire_names_are_kafkas() -> None:
    assert [s.value for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    assert S.PREPARING_REBALANCE.lower == "preparingrebalance"
    assert VALID_PREVIOUS[S.PREPARING_REBALANCE] == {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}


def test_scheduling_a_key_again_replaces_the_deadline() -> None:
    timers = KeyedTimers()
    fired: list[str] = []
    timers.schedule("a", 100, lambda now: fired.append("first"))
    timers.schedule("a", 50, lambda now: fired.append("second"))
    assert timers.deadline("a") == 50
    assert len(timers) == 1
    entry = timers.pop_due(1000)
    assert entry is not None
    entry.action(1000)
    assert fired == ["second"]
    assert timers.pop_due(1000) is None


def test_cancelled_timers_never_fire_and_do_not_hide_later_ones() -> None:
    timers = KeyedTimers()
    timers.schedule("a", 10, lambda now: None)
    timers.schedule("b", 20, lambda now: None)
    timers.cancel("a")
    timers.cancel("missing")
    assert timers.next_deadline() == 20
    assert timers.pop_due(15) is None
    entry = timers.pop_due(20)
    assert entry is not None and entry.key == "b"
    assert timers.next_deadline() is None


def test_due_timers_come_out_by_deadline_then_by_scheduling_order() -> None:
    timers = KeyedTimers()
    for key, deadline in [("c", 30), ("a", 10), ("b", 10), ("d", 40)]:
        timers.schedule(key, deadline, lambda now: None)
    order = []
    while (entry := timers.pop_due(35)) is not None:
        order.append(entry.key)
    assert order == ["a", "b", "c"]
    assert timers.keys() == ["d"]
