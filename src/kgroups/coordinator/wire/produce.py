"""Produce, answered at the edge: kgroups stores no records, so every write is refused.

Produce is listed in ApiVersions all the same, because clients read that table as a
description of a broker: librdkafka turns off its v2 message format when Produce is
missing and then fails every Fetch inside the client, in a loop that spins a core;
franz-go takes a listed Produce as the sign that it has the broker's table at all.

The refusal is the one a Kafka broker gives a principal without Write permission on a
topic (authorization comes before existence there too): TOPIC_AUTHORIZATION_FAILED for
every partition, not retriable, with a message saying why. With acks=0 there is no
response to carry it, so, as Kafka does when such a write fails, the connection is
closed instead (`refused_produce` returns None).
"""

from __future__ import annotations

from typing import Any

from kgroups.protocol.apis import ApiKey, response_class
from kgroups.protocol.build import build
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.frames import encode_response

REFUSAL = "kgroups coordinates consumer groups and stores no records: produce to a Kafka cluster"


def refused_produce(version: int, correlation_id: int, body: Any) -> bytes | None:
    """The response frame refusing every partition of `body`; None when acks=0."""
    if body.acks == 0:
        return None
    refused = {
        "error_code": ErrorCode.topic_authorization_failed, "base_offset": -1,
        "log_start_offset": -1, "error_message": REFUSAL,  # no append time: -1 (None)
    }  # fmt: skip
    topics = [
        {
            "name": getattr(t, "name", ""),
            "topic_id": getattr(t, "topic_id", None),
            "partition_responses": [{"index": p.index, **refused} for p in t.partition_data],
        }
        for t in body.topic_data
    ]
    response: object = build(response_class(ApiKey.PRODUCE, version), {"responses": topics})
    return encode_response(ApiKey.PRODUCE, version, correlation_id, response)
