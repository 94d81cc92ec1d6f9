"""An offset request written on a ConsumerGroup, and the wait for the operator's record.

The request goes into the kgroups.io/offset-request annotation with `kubectl annotate`,
conditional on the object as just read and never over a pending request (the operator
executes one at a time per group, and a replaced request would be lost unrecorded). The
operator patches the status often (lag every few seconds), so a write refused as a
Conflict is retried on a fresh read, a bounded number of times. Then
the ConsumerGroup is read until its status.offsetRequests holds a final record of the
request's id, for a bounded time: an operator that is down or slow leaves the request
pending on the object, and the user is told so rather than left waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kgroups.api import offset_requests as rq
from kgroups.api.models import OffsetRequestResult
from kgroups.kubectl.kube import Kubectl, KubectlError
from kgroups.kubectl.views import group_id

POLL_S = 0.3
CONFLICT_RETRIES = 10


class RequestError(Exception):
    """The request could not be made, or got no answer in time (Kafka-style message)."""


def check_writable(obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    if obj["metadata"].get("deletionTimestamp"):
        raise RequestError(f"Error: consumergroup '{name}' is being deleted")
    pending = (obj["metadata"].get("annotations") or {}).get(rq.ANNOTATION)
    if pending:
        raise RequestError(
            f"Error: consumergroup '{name}' has an offset request the operator has not "
            f"recorded yet ({pending}); wait for it, or remove the {rq.ANNOTATION} "
            "annotation to cancel it"
        )


def submit(
    kube: Kubectl, name: str, make: Callable[[str], rq.OffsetRequest], timeout: float
) -> tuple[str, dict[str, Any]]:
    """Write the request `make(requested_by)` on the ConsumerGroup and wait (bounded) for
    the operator's record of it; (the group id, the record). KubectlError or
    RequestError when either cannot be had."""
    request: rq.OffsetRequest | None = None
    for attempt in range(CONFLICT_RETRIES):
        obj = kube.get(name)
        check_writable(obj)
        request = request or make(kube.whoami())
        # The request, and who writes it (what the chart's admission policy checks against
        # the user the API server authenticated).
        annotations = {rq.ANNOTATION: request.encode(), rq.REQUESTER: request.requestedBy}
        try:
            kube.annotate(name, annotations, obj["metadata"]["resourceVersion"])
            break
        except KubectlError as exc:
            if not is_conflict(exc) or attempt == CONFLICT_RETRIES - 1:
                raise
    assert request is not None
    return group_id(obj), wait_for(kube, name, request, timeout)


def is_conflict(exc: KubectlError) -> bool:
    """The API server refused a write on an older resourceVersion (HTTP 409)."""
    return "(Conflict)" in str(exc)


def wait_for(kube: Kubectl, name: str, request: rq.OffsetRequest, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    gone_once = False
    while True:
        obj = kube.get(name)
        record = rq.find((obj.get("status") or {}).get("offsetRequests") or [], request.id)
        if record is not None and record.get("result") != OffsetRequestResult.RUNNING.value:
            return record
        annotation = (obj["metadata"].get("annotations") or {}).get(rq.ANNOTATION)
        if record is None and annotation != request.encode():
            if gone_once:  # the operator records before it removes: someone else removed it
                raise RequestError(
                    f"Error: the request {request.id} was removed from consumergroup "
                    f"'{name}' before the operator recorded it"
                )
            gone_once = True
        if time.monotonic() >= deadline:
            what = "is running" if record is not None else "is still pending"
            raise RequestError(
                f"Error: no answer from the operator within {timeout:g}s: request "
                f"{request.id} {what} on consumergroup '{name}' (is the operator running?). "
                f"It stays there and is executed when the operator gets to it; remove the "
                f"{rq.ANNOTATION} annotation to cancel it."
            )
        time.sleep(POLL_S)
