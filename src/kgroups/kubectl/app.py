"""The `kubectl kgroups` commands: `kgroups group`'s verbs on ConsumerGroup resources.

`list` and `describe` read the ConsumerGroups' status (what the operator mirrors from the
coordinator). `reset-offsets` and `delete-offsets` take kafka-consumer-groups' flags and
print its tables, but write a request on the ConsumerGroup (`kgroups.api.offset_requests`)
and wait for the operator to record what became of it: the operator executes it (refused
while the group has members, as Kafka refuses), so the API server authorizes and audits
every reset and the outcome stays on the object. `delete` deletes the resource; its
deletionPolicy decides what happens on the coordinator. Usage errors exit 2, failures 1.
"""

from __future__ import annotations

import datetime
import enum
import json
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NoReturn

import typer
import yaml
from pydantic import ValidationError

from kgroups.api import offset_requests as rq
from kgroups.api import parse, reset
from kgroups.api.models import OffsetRequestAction, OffsetRequestResult
from kgroups.groupcli import describe as desc
from kgroups.groupcli import options
from kgroups.kubectl import views
from kgroups.kubectl.kube import RESOURCE, Kubectl, KubectlError, Target, parse_duration
from kgroups.kubectl.submit import POLL_S, RequestError, submit

app = typer.Typer(
    rich_markup_mode="markdown",  # docstrings read as paragraphs
    name="kubectl kgroups",
    no_args_is_help=True,
    add_completion=False,
    help="Consumer groups as Kubernetes resources: list, describe, reset the offsets of and "
    "delete ConsumerGroups (kafka-consumer-groups' verbs). Offset changes are requests the "
    "kgroups operator executes and records in the ConsumerGroup's status.offsetRequests.",
)


class Output(enum.StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", help="Path to the kubeconfig file to use.")
]
Context = Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use.")]
Namespace = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="The namespace (default: the context's)."),
]
OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (the default), wide, json or yaml.")
]
Timeout = Annotated[
    str,
    typer.Option("--timeout", help="How long to wait for the operator's answer (30s, 2m)."),
]
Topics = Annotated[
    list[str] | None, typer.Option("--topic", help="TOPIC or TOPIC:P,P,... (repeatable).")
]
DEFAULT_TIMEOUT = "60s"
WITH_VALUE = ("-n", "--namespace", "--context", "--kubeconfig", "-o", "--output")
FLAGS = ("-A", "--all-namespaces")


def usage(message: str) -> NoReturn:
    raise typer.BadParameter(message)


def fail(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(1)


def kubectl(kubeconfig: str | None, context: str | None, namespace: str | None,
            all_namespaces: bool = False) -> Kubectl:  # fmt: skip
    return Kubectl(Target(kubeconfig, context, namespace, all_namespaces))


def emit(value: object, output: Output) -> None:
    if output is Output.YAML:
        typer.echo(yaml.safe_dump(value, sort_keys=False), nl=False)
    else:
        typer.echo(json.dumps(value, indent=2))


def timeout_s(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        usage(str(exc))


def hoist(args: Sequence[str]) -> list[str]:
    """kubectl's global flags given before the verb (`kubectl kgroups -n team list`) moved
    after it, where the commands take them."""
    moved: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in FLAGS:
            moved.append(arg)
            i += 1
        elif arg in WITH_VALUE and i + 1 < len(args):
            moved += args[i : i + 2]
            i += 2
        elif arg.startswith(tuple(f"{f}=" for f in WITH_VALUE if f.startswith("--"))) or (
            arg[:2] in ("-n", "-o") and len(arg) > 2
        ):
            moved.append(arg)
            i += 1
        else:
            break
    if not moved or i >= len(args):
        return list(args)
    return [args[i], *moved, *args[i + 1 :]]


def main(argv: Sequence[str] | None = None) -> None:
    """The `kubectl-kgroups` console script."""
    args = hoist(sys.argv[1:] if argv is None else argv)
    app(args, prog_name="kubectl kgroups")


# --- list, describe -------------------------------------------------------------------------


@app.command("list")
def list_(
    namespace: Namespace = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="ConsumerGroups in every namespace.")
    ] = False,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """List ConsumerGroups: state, generation, members, assigned partitions, lag, Ready.

    -o wide adds protocol, leader, coordinator and the Ready reason; -o json|yaml prints
    each group's summary."""
    kube = kubectl(kubeconfig, context, namespace, all_namespaces)
    try:
        items = kube.list()
    except KubectlError as exc:
        fail(str(exc))
    if output in (Output.JSON, Output.YAML):
        emit([views.summary(i) for i in items], output)
    elif not items:
        where = "any namespace" if all_namespaces else f"{namespace or 'the current'} namespace"
        typer.echo(f"No ConsumerGroups found in {where}.", err=True)
    else:
        wide = output is Output.WIDE
        typer.echo(views.list_table(items, all_namespaces=all_namespaces, wide=wide))


@app.command()
def describe(
    names: Annotated[list[str], typer.Argument(help="ConsumerGroups to describe.")],
    members: Annotated[bool, typer.Option("--members", help="Members view.")] = False,
    state: Annotated[bool, typer.Option("--state", help="State view.")] = False,
    offsets: Annotated[
        bool, typer.Option("--offsets", help="Offsets and lag per partition (the default).")
    ] = False,
    requests: Annotated[
        bool, typer.Option("--requests", help="The recorded offset requests, newest first.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Kafka's extra columns.")] = False,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Describe ConsumerGroups as `kgroups group describe` does, from their status.

    Offsets and lag per partition (the default), --members or --state; --requests shows
    the offset requests recorded on them."""
    if members + state + offsets + requests > 1:
        usage("give at most one of --members, --offsets, --state and --requests")
    kube = kubectl(kubeconfig, context, namespace)
    failed = False
    documents = []
    for name in dict.fromkeys(names):
        try:
            obj = kube.get(name)
        except KubectlError as exc:
            typer.echo(str(exc), err=True)
            failed = True
            continue
        d = views.described(obj)
        if output in (Output.JSON, Output.YAML):
            documents.append(views.describe_json(obj, d))
            continue
        for note in views.describe_notes(obj):
            typer.echo(note, err=True)
        if requests:
            table = views.requests_table((obj.get("status") or {}).get("offsetRequests") or [])
            if table is None:
                typer.echo(f"No offset requests recorded on '{name}'.", err=True)
        elif d is None:
            typer.echo(f"Error: '{name}' has no status yet: is the operator running?", err=True)
            failed = True
            continue
        else:
            notice = desc.notice(d.group)
            if notice is not None:
                typer.echo(notice[0], err=True)
                failed = failed or notice[1]
            if not d.group.exists:
                continue
            table = desc.view_table(d, members=members, state=state, verbose=verbose)
        if table is not None:
            typer.echo("")
            typer.echo(table)
    if documents:
        emit(documents, output)
    if failed:
        raise typer.Exit(1)


# --- offset requests ------------------------------------------------------------------------


def _scopes(topics: Sequence[str]) -> list[rq.TopicScope]:
    try:
        parsed = [parse.topic_arg(t) for t in topics]
        return [rq.TopicScope(topic=t, partitions=None if ps is None else list(ps))
                for t, ps in parsed]  # fmt: skip
    except parse.UsageError as exc:
        usage(str(exc))
    except ValidationError as exc:
        usage(f"invalid topic name in {', '.join(topics)}: {exc.errors()[0]['msg']}")


def _submit(
    kube: Kubectl, name: str, make: Callable[[str], rq.OffsetRequest], timeout: float
) -> tuple[str, dict[str, Any]]:
    try:
        return submit(kube, name, make, timeout)
    except (KubectlError, RequestError) as exc:
        fail(str(exc))


def _scenario(
    to_earliest: bool,
    to_latest: bool,
    to_current: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: str | None,
    by_duration: str | None,
) -> tuple[str, int | str | None]:
    given = options.scenarios(
        to_earliest, to_latest, to_current, to_offset, shift_by, to_datetime, by_duration
    )
    try:
        spec, argument = options.chosen(given)
        if spec is reset.Spec.TO_DATETIME and isinstance(argument, str):
            parse.parse_datetime(argument)
        if spec is reset.Spec.BY_DURATION and isinstance(argument, str):
            parse.parse_duration(argument)
    except parse.UsageError as exc:
        usage(str(exc))
    return spec.value, argument


@app.command("reset-offsets")
def reset_offsets(
    name: Annotated[str, typer.Argument(help="The ConsumerGroup.")],
    topic: Topics = None,
    all_topics: options.AllTopics = False,
    to_earliest: options.ToEarliest = False,
    to_latest: options.ToLatest = False,
    to_current: options.ToCurrent = False,
    to_offset: options.ToOffset = None,
    shift_by: options.ShiftBy = None,
    to_datetime: options.ToDatetime = None,
    by_duration: options.ByDuration = None,
    dry_run: options.DryRun = False,
    execute: options.Execute = False,
    timeout: Timeout = DEFAULT_TIMEOUT,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Reset the offsets of a ConsumerGroup without members (--dry-run by default).

    The operator plans (and with --execute commits) the new offsets as `kgroups group
    reset-offsets` does, refuses while the group has members, and records the request,
    who asked and the offsets before and after in status.offsetRequests."""
    scenario, argument = _scenario(to_earliest, to_latest, to_current, to_offset, shift_by,
                                   to_datetime, by_duration)  # fmt: skip
    if dry_run and execute:
        usage("give --dry-run or --execute, not both")
    if topic and all_topics:
        usage("give --topic or --all-topics, not both")
    if not topic and not all_topics:
        usage("One of the reset scopes should be defined: --all-topics, --topic.")
    scopes = _scopes(topic or [])
    wait = timeout_s(timeout)
    if not execute and not dry_run:
        typer.echo(options.DRY_RUN_WARNING, err=True)

    def make(requested_by: str) -> rq.OffsetRequest:
        return rq.OffsetRequest(
            id=str(uuid.uuid4()), action=OffsetRequestAction.RESET, scenario=scenario,
            argument=argument, topics=scopes, allTopics=all_topics, dryRun=not execute,
            requestedBy=requested_by, requestedAt=datetime.datetime.now(datetime.UTC),
        )  # fmt: skip

    group, record = _submit(kubectl(kubeconfig, context, namespace), name, make, wait)
    if output in (Output.JSON, Output.YAML):
        emit(record, output)
    else:
        for line in record.get("warnings") or []:
            typer.echo(line, err=True)
        table = views.reset_table(group, record, wide=output is Output.WIDE)
        if table is not None:
            typer.echo("")
            typer.echo(table)
        if (note := views.truncated_note(record)) is not None:
            typer.echo(note, err=True)
    _finish(record, name)


def _finish(record: dict[str, Any], name: str) -> None:
    result = record.get("result")
    if result in (OffsetRequestResult.REFUSED.value, OffsetRequestResult.FAILED.value):
        for line in views.error_lines(record):
            typer.echo(line, err=True)
        raise typer.Exit(1)
    typer.echo(
        f"Request {record['id']} by {record.get('requestedBy')}: {result}, recorded in "
        f"{RESOURCE}/{name} status.offsetRequests.",
        err=True,
    )


@app.command("delete-offsets")
def delete_offsets(
    name: Annotated[str, typer.Argument(help="The ConsumerGroup.")],
    topic: Topics = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Delete a ConsumerGroup's committed offsets for topics or partitions.

    The operator sends OffsetDelete; the coordinator refuses it for topics the group's
    members consume."""
    if not topic:
        usage("give at least one --topic TOPIC[:P,P,...]")
    scopes = _scopes(topic)
    wait = timeout_s(timeout)

    def make(requested_by: str) -> rq.OffsetRequest:
        return rq.OffsetRequest(
            id=str(uuid.uuid4()), action=OffsetRequestAction.DELETE_OFFSETS, topics=scopes,
            requestedBy=requested_by, requestedAt=datetime.datetime.now(datetime.UTC),
        )  # fmt: skip

    _, record = _submit(kubectl(kubeconfig, context, namespace), name, make, wait)
    if output in (Output.JSON, Output.YAML):
        emit(record, output)
    else:
        if record.get("result") == OffsetRequestResult.SUCCEEDED.value:
            typer.echo(record.get("message"))
        typer.echo("")
        typer.echo(views.delete_offsets_table(record))
    _finish(record, name)


# --- delete ---------------------------------------------------------------------------------

STILL_DELETING = ("WaitingForEmptyGroup", "CoordinatorRejected", "CoordinatorUnreachable")


@app.command()
def delete(
    name: Annotated[str, typer.Argument(help="The ConsumerGroup.")],
    timeout: Annotated[
        str,
        typer.Option("--timeout", help="How long to wait for it to go (0: do not wait)."),
    ] = "30s",
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Delete a ConsumerGroup; its deletionPolicy decides what the coordinator keeps.

    Retain (the default) leaves the group and its offsets on the coordinator; Delete
    deletes them once the group has no members (the resource waits until then)."""
    wait = timeout_s(timeout)
    kube = kubectl(kubeconfig, context, namespace)
    try:
        obj = kube.get(name)
        kube.delete(name)
    except KubectlError as exc:
        fail(str(exc))
    policy = (obj.get("spec") or {}).get("deletionPolicy") or "Retain"
    group = views.group_id(obj)
    deadline = time.monotonic() + wait
    left: dict[str, Any] | None = obj
    while wait and time.monotonic() < deadline:
        try:
            left = kube.find(name)
        except KubectlError as exc:
            fail(str(exc))
        ready = views.condition(left or {}, "Ready")
        if left is None or ready.get("reason") in STILL_DELETING:
            break
        time.sleep(POLL_S)
    ready = views.condition(left or {}, "Ready")
    report = {"namespace": obj["metadata"].get("namespace"), "name": name, "group": group,
              "deletionPolicy": policy, "deleted": left is None,
              "waiting": None if left is None else ready.get("message")}  # fmt: skip
    if output in (Output.JSON, Output.YAML):
        emit(report, output)
    elif left is None and policy != "Delete":
        typer.echo(f'{RESOURCE} "{name}" deleted; deletionPolicy {policy}: consumer group '
                   f"'{group}' and its committed offsets stay on the coordinator.")  # fmt: skip
    elif left is None:
        typer.echo(f"Deletion of requested consumer groups ('{group}') was successful.")
    elif not wait:
        typer.echo(f'{RESOURCE} "{name}" deletion requested (deletionPolicy {policy}).')
    if left is not None and wait:
        why = ready.get("message") if ready.get("reason") in STILL_DELETING else None
        fail(f"Error: {RESOURCE}/{name} is still being deleted: "
             f"{why or f'not gone within {wait:g}s'}. It goes once the operator can delete "
             f"the group from the coordinator.")  # fmt: skip
