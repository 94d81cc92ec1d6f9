"""Offset requests executed: the operator's side of `kubectl kgroups reset-offsets` and
`delete-offsets` (the request's shape and records are in `requests`).

`handle` runs for every watch event of a ConsumerGroup that carries the
kgroups.io/offset-request annotation. It is a kopf event handler rather than a change
handler because kopf keeps its own annotations under the same `kgroups.io/` prefix and
leaves that whole prefix out of the diffs its change handlers see: they would never hear
of a request. Events may be stale and may come again, so each step starts from the object
as the API server has it now, and the request's id in `status.offsetRequests` decides:

1. claim: record the request as Running, in a status patch conditional on the
   resourceVersion just read (no second writer can claim it too);
2. plan and execute it against the coordinator with the code `kgroups group
   reset-offsets` uses (`kgroups.api.reset`): refused while the group has members;
3. record the outcome, post an Event, and remove the annotation if it still holds this
   request.

A request found Running on entry was interrupted between 1 and 3 (kopf handles one
object's events one at a time, so it is not this process's): it may be partly written,
so it is recorded Failed, not run again; an interrupted dry run is planned again. Once
recorded, a request is never executed again, whatever happens to the annotation.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable
from typing import Any, cast

import aiohttp
import kopf
from kopf._cogs.clients import api as kopf_api  # kopf==1.45.2 pinned: its authenticated client
from kopf._cogs.clients import errors as kopf_errors

from kgroups.admin import TP, Admin, AdminError, Cluster, error_message
from kgroups.api import offset_requests as rq
from kgroups.api import reset
from kgroups.api.deleting import delete_offsets_report
from kgroups.api.models import (
    API_GROUP,
    API_VERSION,
    OffsetRequestAction,
    OffsetRequestResult,
)
from kgroups.protocol.errors import ErrorCode

Result = OffsetRequestResult
REFUSING = frozenset(
    {
        ErrorCode.unknown_member_id,
        ErrorCode.illegal_generation,
        ErrorCode.rebalance_in_progress,
        ErrorCode.non_empty_group,
        ErrorCode.group_subscribed_to_topic,
    }
)
"""The coordinator's answers that mean "the group has members" (a member joined after the
plan was made; an admin commit or offset deletion is refused then)."""
WRITE_ATTEMPTS = 5
EVENTS = {
    (OffsetRequestAction.RESET, Result.SUCCEEDED): ("Normal", "OffsetsReset"),
    (OffsetRequestAction.RESET, Result.DRY_RUN): ("Normal", "OffsetResetPlanned"),
    (OffsetRequestAction.RESET, Result.REFUSED): ("Warning", "OffsetResetRefused"),
    (OffsetRequestAction.RESET, Result.FAILED): ("Warning", "OffsetResetFailed"),
    (OffsetRequestAction.DELETE_OFFSETS, Result.SUCCEEDED): ("Normal", "OffsetsDeleted"),
    (OffsetRequestAction.DELETE_OFFSETS, Result.REFUSED): ("Warning", "OffsetDeleteRefused"),
    (OffsetRequestAction.DELETE_OFFSETS, Result.FAILED): ("Warning", "OffsetDeleteFailed"),
}
API_FAILURES = (kopf_errors.APIError, aiohttp.ClientError, TimeoutError, OSError)
"""What talking to the API server may raise; the next event of the object tries again."""


def _now() -> str:
    return rq.timestamp(datetime.datetime.now(datetime.UTC))


class _Object:
    """One ConsumerGroup's URLs, and the API calls the handler makes on it."""

    def __init__(
        self, namespace: str, name: str, settings: kopf.OperatorSettings, logger: kopf.Logger
    ) -> None:
        self.url = f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{namespace}/consumergroups/{name}"
        self.settings, self.logger = settings, logger

    async def get(self) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = await kopf_api.get(
                self.url, settings=self.settings, logger=self.logger
            )
        except kopf_errors.APINotFoundError:
            return None
        return body

    async def update_records(
        self, change: Callable[[dict[str, Any]], list[dict[str, Any]] | None]
    ) -> dict[str, Any] | None:
        """Write `change(object)` as status.offsetRequests, conditional on the object not
        having changed since it was read (read again on a conflict). None: `change` said
        there is nothing to write, or the object is gone."""
        for _ in range(WRITE_ATTEMPTS):
            body = await self.get()
            if body is None:
                return None
            records = change(body)
            if records is None:
                return None
            payload = {
                "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                "status": {"offsetRequests": records},
            }
            try:
                written: dict[str, Any] = await kopf_api.patch(
                    f"{self.url}/status",
                    headers={"Content-Type": "application/merge-patch+json"},
                    payload=payload,
                    settings=self.settings,
                    logger=self.logger,
                )
                return written
            except kopf_errors.APIConflictError:
                continue  # the status moved meanwhile (the poll): read it again
            except kopf_errors.APINotFoundError:
                return None
        raise kopf.TemporaryError("status.offsetRequests kept changing under the operator")

    async def remove_annotation(self, value: str) -> None:
        """Remove the request's annotation if it still holds `value` (a newer request
        written meanwhile stays), with its writer's, in one patch."""
        body = await self.get()
        annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
        path, by = _pointer(rq.ANNOTATION), _pointer(rq.REQUESTER)
        ops: list[dict[str, Any]] = [{"op": "test", "path": path, "value": value},
                                     {"op": "remove", "path": path}]  # fmt: skip
        if rq.REQUESTER in annotations:
            ops.append({"op": "remove", "path": by})
        # Changed or gone (422, 404): nothing of this request's is left to remove.
        with contextlib.suppress(
            kopf_errors.APIUnprocessableEntityError, kopf_errors.APINotFoundError
        ):
            await kopf_api.patch(
                self.url,
                headers={"Content-Type": "application/json-patch+json"},
                payload=ops,
                settings=self.settings,
                logger=self.logger,
            )


def _pointer(annotation: str) -> str:
    """The JSON pointer of an annotation (RFC 6901 escapes)."""
    return "/metadata/annotations/" + annotation.replace("~", "~0").replace("/", "~1")


def _event(body: dict[str, Any], *, type: str, reason: str, message: str) -> None:
    kopf.event(kopf.Body(cast("kopf.RawBody", body)), type=type, reason=reason, message=message)


def _records(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list((body.get("status") or {}).get("offsetRequests") or [])


def _annotation(body: dict[str, Any]) -> str | None:
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(rq.ANNOTATION)
    return value if isinstance(value, str) else None


async def handle(
    admin: Admin,
    namespace: str,
    name: str,
    *,
    settings: kopf.OperatorSettings,
    logger: kopf.Logger,
    refusal: Callable[[dict[str, Any]], str | None] = lambda body: None,
) -> None:
    """Execute the ConsumerGroup's pending offset request, once, and record it.
    `refusal(body)` says why a request on this object must not run at all (another,
    older ConsumerGroup owns its group id): it is then recorded Refused, untried."""
    obj = _Object(namespace, name, settings, logger)
    body = await obj.get()
    text = None if body is None else _annotation(body)
    if body is None or text is None or body["metadata"].get("deletionTimestamp"):
        return  # a stale event: the request is already gone
    request = rq.parse_request(text)
    writer = ((body.get("metadata") or {}).get("annotations") or {}).get(rq.REQUESTER)
    if not isinstance(request, rq.Invalid) and writer and writer != request.requestedBy:
        # The admission policy stamps who wrote the request: a request claiming to be
        # someone else's is not run.
        request = rq.Invalid(
            request.id,
            f"requestedBy {request.requestedBy!r} is not who wrote the request ({writer!r})",
            request.requestedBy,
        )
    if isinstance(request, rq.Invalid):
        record = rq.invalid(request, now=_now())
        if rq.find(_records(body), request.id) is None:
            await obj.update_records(lambda b: rq.push(_records(b), record))
            logger.warning("offset request %s: %s", request.id, request.message)
            _event(body, type="Warning", reason="OffsetRequestInvalid", message=record["message"])
        await obj.remove_annotation(text)
        return
    seen = rq.find(_records(body), request.id)
    if seen is not None and seen.get("result") != Result.RUNNING.value:
        await obj.remove_annotation(text)  # done before: never again
        return
    if seen is not None and not request.dryRun:
        gone = rq.interrupted(seen, now=_now())
        await obj.update_records(lambda b: rq.push(_records(b), gone))
        logger.warning("offset request %s was interrupted; recorded Failed", request.id)
        _event(
            body,
            type="Warning",
            reason="OffsetRequestInterrupted",
            message=gone["message"],
        )
        await obj.remove_annotation(text)
        return

    def claim(fresh: dict[str, Any]) -> list[dict[str, Any]] | None:
        found = rq.find(_records(fresh), request.id)
        if _annotation(fresh) != text or (found is not None and found != seen):
            return None  # removed, replaced or claimed meanwhile
        return rq.push(_records(fresh), rq.running(request))

    if await obj.update_records(claim) is None:
        return
    group_id = (body.get("spec") or {}).get("groupId") or name
    refused = refusal(body)
    done = rq.Done(Result.REFUSED, refused) if refused else await execute(admin, group_id, request)
    record = rq.finished(request, done, now=_now())
    await obj.update_records(lambda b: rq.push(_records(b), record))
    logger.info("offset request %s by %s: %s", request.id, request.requestedBy, done.result.value)
    type_, reason = EVENTS.get((request.action, done.result), ("Normal", "OffsetRequestDone"))
    _event(body, type=type_, reason=reason, message=f"{_summary(request)}: {done.message}")
    await obj.remove_annotation(text)


def _summary(request: rq.OffsetRequest) -> str:
    what = request.action.value
    if request.scenario:
        what += f" --{request.scenario}" + (
            f" {request.argument}" if request.argument is not None else ""
        )
    if request.dryRun:
        what += " (dry run)"
    return f"{what} requested by {request.requestedBy} ({request.id})"


async def execute(admin: Admin, group_id: str, request: rq.OffsetRequest) -> rq.Done:
    """Plan (and unless a dry run, write) the request at the coordinator `admin` reaches;
    whatever goes wrong on the way is a Failed outcome with Kafka's words."""
    try:
        async with Cluster(admin.host, admin.port, bootstrap=admin,
                           security=admin.security) as cluster:  # fmt: skip
            if request.action is OffsetRequestAction.DELETE_OFFSETS:
                return await _delete_offsets(cluster, group_id, request)
            return await _reset(cluster, group_id, request)
    except reset.ResetError as exc:
        return rq.Done(Result.FAILED, str(exc))
    except AdminError as exc:
        return rq.Done(Result.FAILED, f"the coordinator answered {exc}")
    except OSError as exc:  # CoordinatorUnavailable included
        return rq.Done(Result.FAILED, f"cannot reach the coordinator: {exc}")


def _kafka_lines(lines: list[str]) -> str:
    return "\n".join(line.removeprefix("Error: ") for line in lines)


async def _reset(cluster: Cluster, group_id: str, request: rq.OffsetRequest) -> rq.Done:
    scenario, scope = rq.to_reset(request)
    out = await reset.plan(cluster, [group_id], scope, scenario)
    if out.errors:  # the group has members: Kafka refuses
        return rq.Done(Result.REFUSED, _kafka_lines(out.errors), warnings=tuple(out.warnings))
    new = dict(out.plans.get(group_id, {}))
    previous = out.committed.get(group_id, {})
    count = f"{len(new)} partition{'s' if len(new) != 1 else ''} of group '{group_id}'"
    if request.dryRun:
        return rq.Done(
            Result.DRY_RUN,
            f"planned new offsets for {count}; nothing written",
            rq.planned(new, previous),
            tuple(out.warnings),
        )
    refused = (await reset.execute(cluster, out)).get(group_id, {})
    plan = rq.planned(new, previous, {tp: error_message(code) for tp, code in refused.items()})
    if not refused:
        return rq.Done(Result.SUCCEEDED, f"committed new offsets for {count}", plan,
                       tuple(out.warnings))  # fmt: skip
    result = Result.REFUSED if set(refused.values()) <= REFUSING else Result.FAILED
    return rq.Done(result, _kafka_lines(out.errors), plan, tuple(out.warnings))


async def _delete_offsets(cluster: Cluster, group_id: str, request: rq.OffsetRequest) -> rq.Done:
    """Kafka's delete-offsets: OffsetDelete for the partitions named (all of a topic's
    when none are), which the coordinator refuses for topics the group's members are
    subscribed to."""
    topology = await cluster.topology({t.topic for t in request.topics if t.partitions is None})
    partitions: list[TP] = []
    for scope in request.topics:
        listed = scope.partitions
        known = sorted(topology.leaders.get(scope.topic, {})) if listed is None else listed
        partitions.extend((scope.topic, p) for p in known)
    partitions = list(dict.fromkeys(partitions))
    missing = dict(topology.missing)
    top: ErrorCode | None = None
    codes: dict[TP, ErrorCode] = {}
    previous: dict[TP, int] = {}
    if partitions:
        _, admin = await cluster.group_admin(group_id)
        previous = await admin.committed_offsets(group_id)
        top, by_partition = await admin.delete_offsets(group_id, partitions)
        codes = {tp: by_partition.get(tp, top) for tp in partitions}
    report = delete_offsets_report(group_id, top, codes, missing)
    errors = {tp: error_message(code) for tp, code in codes.items() if code is not ErrorCode.none}
    plan = rq.planned(dict.fromkeys(codes, 0), previous, errors)
    plan = tuple({k: v for k, v in e.items() if k != "newOffset"} for e in plan)
    plan += tuple({"topic": t, "error": error_message(code)} for t, code in sorted(missing.items()))
    if not report.failed:
        return rq.Done(Result.SUCCEEDED, report.out[0], plan)
    every = {*codes.values(), *([top] if top is not None else [])} - {ErrorCode.none}
    refused = bool(every) and every <= REFUSING and not missing
    unknown = [f"Topic '{t}': {error_message(code)}" for t, code in sorted(missing.items())]
    message = _kafka_lines(report.err) or "\n".join(unknown)
    return rq.Done(Result.REFUSED if refused else Result.FAILED, message, plan)
