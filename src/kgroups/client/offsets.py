"""OffsetCommit and OffsetFetch as a member sends them: requests in, plain results out.

The member decides what an error *means* for it (reset, rejoin, fail); this module only
builds the requests (OffsetCommit v8 carries the generation and member id that fence the
commit, and the source's log end where known; v9, the same for a consumer-protocol member's
epoch; OffsetFetch v7) and reads the responses into
per-partition results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kio.schema.offset_fetch.v7 import request as of

from kgroups.client.errors import MemberError, OffsetAndMetadata, TopicPartition
from kgroups.client.link import COORDINATOR_MOVED, CoordinatorUnavailable
from kgroups.protocol.build import build
from kgroups.protocol.consumer import partitions_by_topic
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.extensions import OffsetCommitRequestV8, OffsetCommitRequestV9

Offsets = (
    Mapping[TopicPartition, int | OffsetAndMetadata]
    | Mapping[tuple[str, int], int | OffsetAndMetadata]
)


def commit_request(
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    offsets: Offsets,
    log_ends: Mapping[TopicPartition, int] | None = None,
    *,
    version: int = 8,
) -> Any:
    """v8, or v9 for a member of the consumer protocol (`generation` is its epoch)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, value in offsets.items():
        om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        by_topic.setdefault(tp[0], []).append(
            {
                "partition_index": tp[1],
                "committed_offset": om.offset,
                "committed_metadata": om.metadata,
                "log_end_offset": (log_ends or {}).get(TopicPartition(tp[0], tp[1]), -1),
            }
        )
    return build(
        OffsetCommitRequestV9 if version == 9 else OffsetCommitRequestV8,
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
    )


def commit_errors(response: Any) -> dict[TopicPartition, ErrorCode]:
    """The partitions whose commit failed, with their error codes."""
    return {
        TopicPartition(topic.name, p.partition_index): p.error_code
        for topic in response.topics
        for p in topic.partitions
        if p.error_code is not ErrorCode.none
    }


def fetch_request(group_id: str, partitions: Sequence[TopicPartition]) -> Any:
    grouped = partitions_by_topic(partitions)
    return build(
        of.OffsetFetchRequest,
        {
            "group_id": group_id,
            "topics": [{"name": t, "partition_indexes": list(ps)} for t, ps in grouped.items()],
            "require_stable": False,
        },
    )


def fetch_result(
    response: Any, wanted: Sequence[TopicPartition]
) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """Committed offsets (None where nothing is committed); errors raise."""
    code = response.error_code
    if code is not ErrorCode.none:
        if code in COORDINATOR_MOVED:
            raise CoordinatorUnavailable(f"offset fetch: {code.name}")
        raise MemberError(f"offset fetch failed: {code.name}", code)
    out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.error_code is not ErrorCode.none:
                raise MemberError(f"offset fetch for {tp}: {p.error_code.name}", p.error_code)
            if p.committed_offset >= 0:
                out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "")
    return out
