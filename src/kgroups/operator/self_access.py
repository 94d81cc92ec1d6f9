"""The operator asks the API server what it may do, and says when that changes.

Every `access.CHECK_INTERVAL_S` the operator sends one SelfSubjectAccessReview per
permission it needs (`access.NEEDED`) in each watched namespace. A permission lost or
regained is logged and posted as an Event on the operator's own Pod (posted at once, not
through kopf's queue, which a refused watch may stop before it flushes), and the
`missingPermissions` probe lists what is missing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import aiohttp
import kopf
from kopf._cogs.clients import api as kopf_api  # kopf==1.45.2 pinned: its authenticated client
from kopf._cogs.clients import errors as kopf_errors

from kgroups.operator import access
from kgroups.operator.reporting import now

SSAR_URL = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_API_FAILURES = (kopf_errors.APIError, aiohttp.ClientError, TimeoutError, OSError)


def own_pod() -> dict[str, Any] | None:
    """The operator's own Pod, to post Events about itself on (the chart passes its name,
    namespace and uid through the downward API); None outside a pod."""
    name, namespace, uid = (os.environ.get(k) for k in ("POD_NAME", "POD_NAMESPACE", "POD_UID"))
    if not (name and namespace and uid):
        return None
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}}


async def missing_access(
    settings: kopf.OperatorSettings, namespaces: list[str], logger: kopf.Logger
) -> list[str]:
    """Every permission in access.NEEDED the API server says this identity lacks."""
    asked = [(p, ns) for ns in namespaces or [""] for p in access.NEEDED]
    answers = await asyncio.gather(
        *(
            kopf_api.post(SSAR_URL, payload=access.review(p, ns), settings=settings, logger=logger)
            for p, ns in asked
        )
    )
    return [p.describe(ns) for (p, ns), answer in zip(asked, answers, strict=True)
            if not access.allowed(answer)]  # fmt: skip


async def post_event(
    settings: kopf.OperatorSettings,
    logger: kopf.Logger,
    own: dict[str, Any],
    said: tuple[str, str, str],
) -> None:
    """Post an Event on the operator's own Pod now."""
    type_, reason, message = said
    meta = own["metadata"]
    stamp = now()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", **meta},
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": "kgroups-operator"},
        "reportingComponent": "kgroups.io/operator",
        "reportingInstance": meta["name"],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        await kopf_api.post(
            f"/api/v1/namespaces/{meta['namespace']}/events",
            payload=event, settings=settings, logger=logger,
        )  # fmt: skip
    except _API_FAILURES as exc:
        logger.warning("cannot post the %s event on the operator's pod: %s", reason, exc)


async def check_access(
    settings: kopf.OperatorSettings,
    namespaces: list[str],
    watch: access.AccessWatch,
    logger: kopf.Logger,
) -> None:
    """Ask once what the operator may do; say a change in its log and on its own Pod."""
    try:
        said = watch.seen(await missing_access(settings, namespaces, logger))
    except _API_FAILURES as exc:
        # The API server away, or refusing even this: kopf's own watches say so too.
        logger.warning("cannot ask the API server what the operator may do: %s", exc)
        return
    if said is None:
        return
    type_, reason, message = said
    logger.log(logging.ERROR if type_ == "Warning" else logging.INFO, "%s: %s", reason, message)
    own = own_pod()
    if own is not None:
        await post_event(settings, logger, own, said)


async def watch_access(
    settings: kopf.OperatorSettings,
    namespaces: list[str],
    watch: access.AccessWatch,
    logger: kopf.Logger,
) -> None:
    """Check forever, every access.CHECK_INTERVAL_S."""
    while True:
        await check_access(settings, namespaces, watch, logger)
        await asyncio.sleep(access.CHECK_INTERVAL_S)
