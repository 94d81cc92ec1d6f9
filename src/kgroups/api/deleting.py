"""What `kgroups group delete` and `delete-offsets` report, in Kafka's words.

Pure: the commands hand over the error codes the coordinator answered, and get back
the lines for stdout and stderr, the JSON, and whether anything failed (exit code 1;
Kafka's tool exits 0 after printing the same errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kgroups.admin import TP, error_message, error_text
from kgroups.api.table import MISSING, Column, render
from kgroups.protocol.errors import ErrorCode

GROUP_LEVEL = {
    ErrorCode.invalid_group_id,
    ErrorCode.group_id_not_found,
    ErrorCode.group_authorization_failed,
    ErrorCode.non_empty_group,
}
PARTITION_LEVEL = {
    ErrorCode.group_subscribed_to_topic,
    ErrorCode.topic_authorization_failed,
    ErrorCode.unknown_topic_or_partition,
}
"""OffsetDelete's errors as Kafka's tool sorts them (ConsumerGroupCommand.deleteOffsets)."""


@dataclass
class Report:
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    json: Any = None
    failed: bool = False


def _quoted(groups: list[str]) -> str:
    return ", ".join(f"'{g}'" for g in groups)


def delete_groups_report(codes: Mapping[str, ErrorCode]) -> Report:
    deleted = [g for g, code in codes.items() if code is ErrorCode.none]
    failed = {g: code for g, code in codes.items() if code is not ErrorCode.none}
    report = Report(
        json=[
            {"group": g, "deleted": code is ErrorCode.none,
             "error": None if code is ErrorCode.none else error_message(code)}
            for g, code in codes.items()
        ],
        failed=bool(failed),
    )  # fmt: skip
    if not failed:
        report.out.append(
            f"Deletion of requested consumer groups ({_quoted(deleted)}) was successful."
        )
        return report
    report.err.append("Error: Deletion of some consumer groups failed:")
    report.err += [
        f"* Group '{g}' could not be deleted due to: {error_message(code)}"
        for g, code in failed.items()
    ]
    if deleted:
        report.out.append(f"These consumer groups were deleted successfully: {_quoted(deleted)}")
    return report


def delete_offsets_report(
    group: str,
    top: ErrorCode | None,
    codes: Mapping[TP, ErrorCode],
    missing_topics: Mapping[str, ErrorCode],
) -> Report:
    """`top` is OffsetDelete's group-level code (None: nothing was asked, every topic
    named was missing), `codes` each partition's; `missing_topics` the topics named
    without partitions that the cluster does not have."""
    first = next((c for _, c in sorted(codes.items()) if c is not ErrorCode.none), None)
    overall = top if top not in (None, ErrorCode.none) else first
    report = Report()
    if overall is None:
        report.out.append(f"Request succeeded for deleting offsets from group {group}.")
    elif overall in GROUP_LEVEL:
        report.err.append(f"Error: {error_text(overall)}")
    elif overall in PARTITION_LEVEL:
        report.err.append(
            "Error: Encountered some partition-level error, see the follow-up details."
        )
    else:
        report.err.append(f"Error: Encountered some unknown error: {overall.name.upper()}")
    rows: list[tuple[str, int | None, ErrorCode]] = [
        *((t, p, code) for (t, p), code in codes.items()),
        *((t, None, code) for t, code in missing_topics.items()),
    ]
    rows.sort(key=lambda r: (r[0], -1 if r[1] is None else r[1]))

    def status(code: ErrorCode) -> str:
        return "Successful" if code is ErrorCode.none else f"Error: {error_message(code)}"

    report.failed = overall is not None or bool(missing_topics)
    report.out += [
        "",
        render(
            [Column("TOPIC"), Column("PARTITION", 10), Column("STATUS")],
            [[t, MISSING if p is None else p, status(code)] for t, p, code in rows],
        ),
    ]
    report.json = {
        "group": group,
        "error": None if overall is None else error_message(overall),
        "partitions": [
            {"topic": t, "partition": p, "error": None if c is ErrorCode.none else error_message(c)}
            for t, p, c in rows
        ],
    }
    return report
