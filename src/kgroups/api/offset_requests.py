"""Offset requests: what `kubectl kgroups reset-offsets` and `delete-offsets` ask of the
operator, and what the operator records of them.

A reset is not done from the user's machine: the plugin writes the request, as JSON, into
the ConsumerGroup's `kgroups.io/offset-request` annotation, and the operator executes it
against the coordinator and records the outcome in `status.offsetRequests` (the last
MAX_RECORDS). So a reset is an API call the API server authorizes (patch on the
ConsumerGroup) and audits, its outcome stays on the object for whoever may read it, and
nobody needs a route to the coordinator. This module is the contract between the two
sides, as pure functions: the annotation's shape (`OffsetRequest`), its translation into
the arguments of the planning code `kgroups group reset-offsets` uses, and the records.
Each request carries an id; a request whose id is recorded is never executed again.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_serializer,
    model_validator,
)

from kgroups.admin import TP
from kgroups.api import parse, reset
from kgroups.api.models import (
    API_GROUP,
    KAFKA_NAME,
    OffsetRequestAction,
    OffsetRequestResult,
)

ANNOTATION = f"{API_GROUP}/offset-request"
REQUESTER = f"{API_GROUP}/offset-request-by"
"""Who wrote the request, as the API server authenticated them: the chart's admission
policy refuses a request whose value is not the writer's own user name (and one whose
writer lacks the `reset` verb on the ConsumerGroup)."""
MAX_RECORDS = 10
MAX_PLAN = 500
"""Partitions listed per record: ten records of this many stay far below etcd's object
size limit next to the rest of the status; `partitions` counts them all."""
MAX_LISTED = 50
"""Warnings and --topic arguments kept per record (one warning per clamped partition)."""
MAX_MESSAGE = 4096
SCENARIOS = tuple(s.value for s in reset.Spec if s is not reset.Spec.FROM_FILE)
"""kafka-consumer-groups' reset scenarios, by option name (--from-file has no place in a
request: its plan is the file)."""
NUMBER_SCENARIOS = (reset.Spec.TO_OFFSET.value, reset.Spec.SHIFT_BY.value)
TEXT_SCENARIOS = (reset.Spec.TO_DATETIME.value, reset.Spec.BY_DURATION.value)
_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


def timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with milliseconds: `2026-01-01T00:00:00.123Z`."""
    utc = moment.astimezone(datetime.UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TopicScope(BaseModel):
    """One --topic argument: a topic, and its partitions (absent: all of them)."""

    model_config = ConfigDict(extra="forbid")

    topic: StrictStr = Field(pattern=KAFKA_NAME)
    partitions: list[Annotated[StrictInt, Field(ge=0)]] | None = None

    def arg(self) -> str:
        """As kafka-consumer-groups takes it: `orders` or `orders:0,2`."""
        if self.partitions is None:
            return self.topic
        return f"{self.topic}:{','.join(map(str, self.partitions))}"


class OffsetRequest(BaseModel):
    """The JSON in the kgroups.io/offset-request annotation.

    `{"id": "3f0c...", "action": "reset", "scenario": "shift-by", "argument": -10,
    "topics": [{"topic": "orders", "partitions": [0, 1]}], "dryRun": false,
    "requestedBy": "alice", "requestedAt": "2026-01-01T12:00:00.000Z"}`

    `argument` is what the scenario's option took: an offset (to-offset), a shift
    (shift-by), a date-time (to-datetime) or a java.time duration (by-duration, counted
    back from requestedAt, so the request means the same whenever it is executed)."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(pattern=_ID)
    action: OffsetRequestAction
    scenario: StrictStr | None = None
    argument: StrictInt | StrictStr | None = None
    topics: list[TopicScope] = Field(default_factory=list)
    allTopics: StrictBool = False  # noqa: N815 (the annotation's JSON names)
    dryRun: StrictBool = False  # noqa: N815 (the annotation's JSON names)
    requestedBy: StrictStr = Field(default="unknown", min_length=1, max_length=256)  # noqa: N815
    requestedAt: datetime.datetime  # noqa: N815 (the annotation's JSON names)

    @field_serializer("requestedAt")
    def _serialize_time(self, value: datetime.datetime) -> str:
        return timestamp(value)

    @model_validator(mode="after")
    def _consistent(self) -> OffsetRequest:
        if self.requestedAt.tzinfo is None:
            raise ValueError("requestedAt needs a time zone (e.g. Z)")
        if self.action is OffsetRequestAction.DELETE_OFFSETS:
            if self.scenario is not None or self.argument is not None:
                raise ValueError("delete-offsets takes no scenario or argument")
            if self.allTopics or not self.topics:
                raise ValueError("delete-offsets needs topics (and not allTopics)")
            if self.dryRun:
                raise ValueError("delete-offsets has no dry run")
            return self
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}")
        if bool(self.topics) == self.allTopics:
            raise ValueError("give topics or allTopics (One of the reset scopes)")
        self._check_argument()
        return self

    def _check_argument(self) -> None:
        scenario, argument = self.scenario, self.argument
        if scenario in NUMBER_SCENARIOS:
            if not isinstance(argument, int):
                raise ValueError(f"{scenario} needs a whole number as its argument")
        elif scenario in TEXT_SCENARIOS:
            if not isinstance(argument, str):
                raise ValueError(f"{scenario} needs a text argument")
            try:
                if scenario == reset.Spec.TO_DATETIME.value:
                    parse.parse_datetime(argument)
                else:
                    parse.parse_duration(argument)
            except parse.UsageError as exc:
                raise ValueError(str(exc)) from exc
        elif argument is not None:
            raise ValueError(f"{scenario} takes no argument")

    def encode(self) -> str:
        """The annotation's value."""
        return json.dumps(self.model_dump(mode="json", exclude_none=True), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Invalid:
    """An annotation that is not a request: recorded Failed with why, never executed."""

    id: str
    message: str
    requested_by: str = "unknown"


def text_id(text: str) -> str:
    """The id of an annotation that carries none of its own (stable for one text)."""
    return f"invalid-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def _errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def parse_request(text: str) -> OffsetRequest | Invalid:
    """The annotation's value read, or why it cannot be."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return Invalid(text_id(text), f"{ANNOTATION} is not JSON: {exc}")
    if not isinstance(data, dict):
        return Invalid(text_id(text), f"{ANNOTATION} is not a JSON object")
    given = data.get("id")
    request_id = given if isinstance(given, str) and re.fullmatch(_ID, given) else text_id(text)
    by = data.get("requestedBy")
    requested_by = by[:256] if isinstance(by, str) and by else "unknown"
    try:
        return OffsetRequest.model_validate(data)
    except ValidationError as exc:
        return Invalid(request_id, f"invalid {ANNOTATION}: {_errors(exc)}", requested_by)


def to_reset(request: OffsetRequest) -> tuple[reset.Reset, reset.Scope]:
    """The planning code's arguments for a reset request (validated, so they parse)."""
    spec = reset.Spec(request.scenario)
    scope = reset.Scope(
        request.allTopics,
        tuple(
            (t.topic, None if t.partitions is None else tuple(dict.fromkeys(t.partitions)))
            for t in request.topics
        ),
    )
    argument = request.argument
    if spec is reset.Spec.TO_DATETIME and isinstance(argument, str):
        return reset.Reset(spec, parse.parse_datetime(argument)), scope
    if spec is reset.Spec.BY_DURATION and isinstance(argument, str):
        moment = request.requestedAt - parse.parse_duration(argument)
        return reset.Reset(spec, int(moment.timestamp() * 1000)), scope
    if isinstance(argument, int):
        return reset.Reset(spec, argument), scope
    return reset.Reset(spec), scope


# --- records --------------------------------------------------------------------------------


def _request_part(request: OffsetRequest) -> dict[str, Any]:
    record: dict[str, Any] = {"id": request.id, "action": request.action.value}
    if request.scenario is not None:
        record["scenario"] = request.scenario
    if request.argument is not None:
        record["argument"] = str(request.argument)
    if request.topics:
        record["topics"] = _capped([t.arg() for t in request.topics])
    if request.allTopics:
        record["allTopics"] = True
    if request.action is OffsetRequestAction.RESET:
        record["dryRun"] = request.dryRun
    record["requestedBy"] = request.requestedBy
    record["requestedAt"] = timestamp(request.requestedAt)
    return record


def _capped(items: list[str]) -> list[str]:
    if len(items) <= MAX_LISTED:
        return items
    return [*items[: MAX_LISTED - 1], f"... and {len(items) - MAX_LISTED + 1} more"]


def running(request: OffsetRequest) -> dict[str, Any]:
    """The record that claims a request before anything is asked of the coordinator."""
    return {**_request_part(request), "result": OffsetRequestResult.RUNNING.value}


@dataclass(frozen=True, slots=True)
class Done:
    """What executing a request came to."""

    result: OffsetRequestResult
    message: str
    plan: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()


def finished(request: OffsetRequest, done: Done, *, now: str) -> dict[str, Any]:
    """The final record of a request."""
    record = {
        **_request_part(request),
        "completedAt": now,
        "result": done.result.value,
        "message": _short(done.message),
    }
    if done.warnings:
        record["warnings"] = _capped(list(done.warnings))
    record["partitions"] = len(done.plan)
    if done.plan:
        record["plan"] = list(done.plan[:MAX_PLAN])
    return record


def _short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def invalid(request: Invalid, *, now: str) -> dict[str, Any]:
    return {
        "id": request.id,
        "requestedBy": request.requested_by,
        "completedAt": now,
        "result": OffsetRequestResult.FAILED.value,
        "message": _short(request.message),
    }


def interrupted(record: Mapping[str, Any], *, now: str) -> dict[str, Any]:
    """A request found Running that nobody is executing: the operator stopped while it
    ran. It may be partly written, so it is not run again."""
    return {
        **record,
        "completedAt": now,
        "result": OffsetRequestResult.FAILED.value,
        "message": "interrupted: the operator stopped while executing this request, so "
        "some offsets may have been written; check them (kubectl kgroups describe) and "
        "request again if needed",
    }


def find(records: Iterable[Mapping[str, Any]], request_id: str) -> dict[str, Any] | None:
    return next((dict(r) for r in records if r.get("id") == request_id), None)


def push(records: Iterable[Mapping[str, Any]], record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`records` with `record` replacing the one of its id, or appended; the last
    MAX_RECORDS, oldest first."""
    out = [dict(r) for r in records]
    for i, old in enumerate(out):
        if old.get("id") == record["id"]:
            out[i] = dict(record)
            break
    else:
        out.append(dict(record))
    return out[-MAX_RECORDS:]


def planned(
    new: Mapping[TP, int],
    previous: Mapping[TP, int],
    errors: Mapping[TP, str] | None = None,
) -> tuple[dict[str, Any], ...]:
    """Plan entries, by topic and partition: the offset before, the new one (left out
    where the partition was not changed, with why)."""
    errors = errors or {}
    entries = []
    for tp in sorted({*new, *errors}):
        entry: dict[str, Any] = {"topic": tp[0], "partition": tp[1]}
        if tp in previous:
            entry["previousOffset"] = previous[tp]
        if tp in errors:
            entry["error"] = errors[tp]
        elif tp in new:
            entry["newOffset"] = new[tp]
        entries.append(entry)
    return tuple(entries)
