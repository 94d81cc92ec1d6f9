"""A steady ConsumerGroupHeartbeat's answer made from its member's template is, byte for
byte, the answer encoded from scratch: whatever the member id (its length moves the
interval), epoch, interval and correlation id, in both versions, and after the template
was made for another interval."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.coordinator.core.msg_consumer import SteadyAnswer
from kgroups.coordinator.steady_answers import SteadyAnswers
from kgroups.coordinator.wire import encode
from kgroups.protocol.apis import ApiKey
from kgroups.protocol.frames import encode_response

INT32 = st.integers(-(2**31), 2**31 - 1)


def from_scratch(version: int, answer: SteadyAnswer, correlation_id: int) -> bytes:
    body = encode(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, answer.response())
    return encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, correlation_id, body)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from([0, 1]),
    member_id=st.text(min_size=1, max_size=300),
    epoch=st.integers(1, 2**31 - 1),
    intervals=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4),
    correlation_ids=st.lists(INT32, min_size=4, max_size=4),
)
def test_every_answer_is_the_encoded_answer(
    version: int, member_id: str, epoch: int, intervals: list[int], correlation_ids: list[int]
) -> None:
    answers = SteadyAnswers()
    for interval, correlation_id in zip(intervals, correlation_ids, strict=False):
        answer = SteadyAnswer(member_id, epoch, interval)
        assert answers.frame(version, answer, correlation_id) == from_scratch(
            version, answer, correlation_id
        )
    assert len(answers) == 1  # one template for the member at its epoch


def test_another_epoch_or_member_is_another_template() -> None:
    answers = SteadyAnswers()
    for member_id, epoch in (("a", 1), ("a", 2), ("bb", 2)):
        answer = SteadyAnswer(member_id, epoch, 500)
        assert answers.frame(1, answer, 7) == from_scratch(1, answer, 7)
    assert len(answers) == 3
