"""The `kgroups group` commands: kafka-consumer-groups' verbs, flags and output.

Each command checks its arguments (Kafka's rules, as usage errors with exit code 2),
does its work through one `Cluster` (so it runs against kgroups and against a Kafka
cluster alike), then prints: tables and CSV on stdout, Kafka's notices and errors on
stderr. Where Kafka's tool prints an error and still exits 0, these exit 1, with the
same text, so scripts can tell.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from kgroups.admin import TP, AdminError, Cluster, ListedGroup
from kgroups.api import parse, reset
from kgroups.api.deleting import Report, delete_groups_report, delete_offsets_report
from kgroups.api.table import Column, render
from kgroups.groupcli import describe as desc
from kgroups.groupcli import options
from kgroups.protocol.addresses import parse_bootstrap
from kgroups.protocol.errors import ErrorCode
from kgroups.security.client import ClientSecurity

T = TypeVar("T")

group_app = typer.Typer(
    rich_markup_mode="markdown",  # docstrings read as paragraphs
    no_args_is_help=True,
    help="List, describe, reset the offsets of and delete consumer groups "
    "(Kafka's kafka-consumer-groups, for kgroups or any Kafka cluster).",
)


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap-server", "--bootstrap", help="A broker or kgroups coordinator, HOST:PORT."
    ),
]
Timeout = Annotated[
    int, typer.Option("--timeout", min=1, help="How long to wait for each answer, in ms.")
]
OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (Kafka's layout) or json.")
]
Groups = Annotated[list[str] | None, typer.Option("--group", help="A consumer group (repeatable).")]
AllGroups = Annotated[bool, typer.Option("--all-groups", help="Every consumer group.")]
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_MS = 30_000
CONSUMER_PROTOCOL_TYPES = ("", "consumer")
"""Kafka's tool lists groups of these protocol types (`ListGroupsOptions.forConsumerGroups`):
"" is a group that only ever had offsets committed for it."""


def usage(message: str) -> NoReturn:
    raise typer.BadParameter(message)


def fail(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(1)


def address(value: str) -> tuple[str, int]:
    """The first of Kafka's comma-separated `HOST:PORT` list."""
    try:
        return parse_bootstrap(value)[0]
    except ValueError as exc:
        usage(str(exc))


def run(bootstrap: str, timeout_ms: int, work: Callable[[Cluster], Awaitable[T]]) -> T:
    """Do `work` with a cluster reached through `bootstrap`; what goes wrong on the way
    (a Kafka error, a plan that cannot be made, no answer) ends the command with exit 1."""
    host, port = address(bootstrap)
    try:
        security = ClientSecurity.from_env()
    except ValueError as exc:
        fail(f"Error: KGROUPS_* security settings: {exc}")

    async def main() -> T:
        async with Cluster(host, port, timeout_ms=timeout_ms, security=security) as cluster:
            return await work(cluster)

    try:
        return asyncio.run(main())
    except AdminError as exc:
        fail(f"Error: {exc}")
    except reset.ResetError as exc:
        fail(f"Error: {exc}")
    except OSError as exc:  # CoordinatorUnavailable included
        fail(f"Error: cannot reach {bootstrap}: {exc}")


def emit_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2))


def emit_report(report: Report, output: Output) -> None:
    """A deletion's outcome: its lines (or JSON), its errors on stderr, exit 1 if any."""
    if output is Output.JSON:
        emit_json(report.json)
    else:
        for line in report.out:
            typer.echo(line)
    for line in report.err:
        typer.echo(line, err=True)
    if report.failed:
        raise typer.Exit(1)


async def consumer_groups(cluster: Cluster, states: Sequence[str] = ()) -> list[ListedGroup]:
    listed = await cluster.list_groups(states, ("Classic", "Consumer"))
    return [g for g in listed if g.protocol_type in CONSUMER_PROTOCOL_TYPES]


def chosen_groups(names: Sequence[str], all_groups: bool) -> None:
    if names and all_groups:
        usage("give groups or --all-groups, not both")
    if not names and not all_groups:
        usage("give at least one group (--group G) or --all-groups")


async def group_ids(cluster: Cluster, names: Sequence[str], all_groups: bool) -> list[str]:
    if all_groups:
        return [g.group_id for g in await consumer_groups(cluster)]
    return list(dict.fromkeys(names))


# --- list ---------------------------------------------------------------------------------


@group_app.command("list")
def list_(
    states: Annotated[
        str | None,
        typer.Argument(
            metavar="[STATES]",
            help="With --state: only groups in these states, comma-separated (stable,empty).",
        ),
    ] = None,
    state: Annotated[
        bool, typer.Option("--state", help="Show each group's state (Kafka: --list --state).")
    ] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_MS,
    output: OutputOption = Output.TABLE,
) -> None:
    """List consumer groups (ListGroups at every broker)."""
    if states is not None and not state:
        usage("a state list goes with --state: kgroups group list --state STATES")
    try:
        wanted = parse.states_arg(states) if states else ()
    except parse.UsageError as exc:
        usage(str(exc))
    groups = run(bootstrap, timeout, lambda c: consumer_groups(c, wanted))
    if output is Output.JSON:
        emit_json(
            [
                {"group": g.group_id, "state": g.state, "type": g.group_type.capitalize()}
                for g in groups
            ]
        )
    elif state:
        width = max([15, *(len(g.group_id) for g in groups)]) + 10
        typer.echo(render([Column("GROUP", width), Column("STATE", 20)],
                          [[g.group_id, g.state] for g in groups]))  # fmt: skip
    else:
        for g in groups:
            typer.echo(g.group_id)


# --- describe -----------------------------------------------------------------------------


@group_app.command()
def describe(
    groups: Annotated[list[str] | None, typer.Argument(help="Groups to describe.")] = None,
    group: Groups = None,
    all_groups: AllGroups = False,
    members: Annotated[bool, typer.Option("--members", help="Members view.")] = False,
    state: Annotated[bool, typer.Option("--state", help="State view.")] = False,
    offsets: Annotated[
        bool, typer.Option("--offsets", help="Offsets and lag per partition (the default).")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Kafka's extra columns.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_MS,
    output: OutputOption = Output.TABLE,
) -> None:
    """Describe groups: offsets and lag (default), --members or --state.

    kgroups adds each group's generation and leader, and each member's assignment."""
    names = [*(groups or []), *(group or [])]
    chosen_groups(names, all_groups)
    if members + state + offsets > 1:
        usage("give at most one of --members, --offsets and --state")
    with_offsets = output is Output.JSON or not (members or state)

    async def work(cluster: Cluster) -> list[desc.Described]:
        ids = await group_ids(cluster, names, all_groups)
        return await desc.collect(cluster, ids, offsets=with_offsets) if ids else []

    described = run(bootstrap, timeout, work)
    failed = False
    for d in described:
        notice = desc.notice(d.group)
        if notice is not None:
            typer.echo(notice[0], err=True)
            failed = failed or notice[1]
        if output is Output.JSON or not d.group.exists:
            continue
        table = desc.view_table(d, members=members, state=state, verbose=verbose)
        if table is not None:
            typer.echo("")
            typer.echo(table)
    if output is Output.JSON:
        emit_json([desc.to_json(d) for d in described])
    if failed:
        raise typer.Exit(1)


# --- reset-offsets ------------------------------------------------------------------------


def reset_spec(
    *,
    to_earliest: bool,
    to_latest: bool,
    to_current: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: str | None,
    by_duration: str | None,
    from_file: Path | None,
    groups: Sequence[str],
) -> reset.Reset:
    """The one reset scenario given, read and checked before anything is asked."""
    given = options.scenarios(
        to_earliest, to_latest, to_current, to_offset, shift_by, to_datetime, by_duration
    )
    given[reset.Spec.FROM_FILE] = (from_file is not None, None)
    try:
        spec, _ = options.chosen(given)
        if spec is reset.Spec.TO_OFFSET and to_offset is not None:
            return reset.Reset(spec, to_offset)
        if spec is reset.Spec.SHIFT_BY and shift_by is not None:
            return reset.Reset(spec, shift_by)
        if spec is reset.Spec.TO_DATETIME and to_datetime is not None:
            return reset.Reset(spec, parse.parse_datetime(to_datetime))
        if spec is reset.Spec.BY_DURATION and by_duration is not None:
            now = datetime.datetime.now(datetime.UTC)  # the CLI reads the clock, once
            moment = now - parse.parse_duration(by_duration)
            return reset.Reset(spec, int(moment.timestamp() * 1000))
        if spec is reset.Spec.FROM_FILE and from_file is not None:
            try:
                text = from_file.read_text()
            except OSError as exc:
                usage(f"cannot read {from_file}: {exc.strerror}")
            return reset.Reset(spec, plans=parse.parse_plan(text, groups))
    except parse.UsageError as exc:
        usage(str(exc))
    return reset.Reset(spec)


@group_app.command("reset-offsets")
def reset_offsets(
    group: Groups = None,
    all_groups: AllGroups = False,
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", help="TOPIC or TOPIC:P,P,... (repeatable)."),
    ] = None,
    all_topics: options.AllTopics = False,
    to_earliest: options.ToEarliest = False,
    to_latest: options.ToLatest = False,
    to_current: options.ToCurrent = False,
    to_offset: options.ToOffset = None,
    shift_by: options.ShiftBy = None,
    to_datetime: options.ToDatetime = None,
    by_duration: options.ByDuration = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="The offsets in a CSV that --export wrote.")
    ] = None,
    dry_run: options.DryRun = False,
    execute: options.Execute = False,
    export: Annotated[
        bool, typer.Option("--export", help="Print the result as CSV, for --from-file.")
    ] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_MS,
    output: OutputOption = Output.TABLE,
) -> None:
    """Reset the offsets of groups without members (--dry-run by default; --execute).

    Refused for a group with members. New offsets are clamped into the log's range."""
    names = list(group or [])
    chosen_groups(names, all_groups)
    if dry_run and execute:
        usage("give --dry-run or --execute, not both")
    if export and output is Output.JSON:
        usage("--export prints CSV; leave out -o json")
    spec = reset_spec(
        to_earliest=to_earliest, to_latest=to_latest, to_current=to_current,
        to_offset=to_offset, shift_by=shift_by, to_datetime=to_datetime,
        by_duration=by_duration, from_file=from_file, groups=names,
    )  # fmt: skip
    if topic and all_topics:
        usage("give --topic or --all-topics, not both")
    if not topic and not all_topics and spec.spec is not reset.Spec.FROM_FILE:
        usage("One of the reset scopes should be defined: --all-topics, --topic.")
    try:
        scope = reset.Scope(all_topics, tuple(parse.topic_arg(t) for t in topic or []))
    except parse.UsageError as exc:
        usage(str(exc))
    if not execute and not dry_run:
        typer.echo(options.DRY_RUN_WARNING, err=True)

    async def work(cluster: Cluster) -> reset.Outcome:
        ids = await group_ids(cluster, names, all_groups)
        outcome = await reset.plan(cluster, ids, scope, spec)
        if execute:
            await reset.execute(cluster, outcome)
        return outcome

    outcome = run(bootstrap, timeout, work)
    for line in [*outcome.warnings, *outcome.errors]:
        typer.echo(line, err=True)
    rows = [
        [g, t, p, o] for g, offsets in sorted(outcome.plans.items())
        for (t, p), o in sorted(offsets.items())
    ]  # fmt: skip
    if export:
        typer.echo(parse.plan_csv(outcome.plans, with_group=len(names) != 1), nl=False)
    elif output is Output.JSON:
        emit_json(
            [{"group": g, "topic": t, "partition": p, "new_offset": o} for g, t, p, o in rows]
        )
    elif rows:
        typer.echo("")
        typer.echo(render([Column("GROUP"), Column("TOPIC"), Column("PARTITION", 10),
                           Column("NEW-OFFSET")], rows))  # fmt: skip
    if outcome.errors:
        raise typer.Exit(1)


# --- delete, delete-offsets ---------------------------------------------------------------


@group_app.command()
def delete(
    group: Groups = None,
    all_groups: AllGroups = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_MS,
    output: OutputOption = Output.TABLE,
) -> None:
    """Delete groups without members, with their committed offsets (DeleteGroups)."""
    names = list(group or [])
    chosen_groups(names, all_groups)

    async def work(cluster: Cluster) -> dict[str, ErrorCode]:
        ids = await group_ids(cluster, names, all_groups)
        return dict(await cluster.delete_groups(ids)) if ids else {}

    codes = run(bootstrap, timeout, work)
    report = delete_groups_report(codes)
    emit_report(report, output)


@group_app.command("delete-offsets")
def delete_offsets(
    group: Annotated[str, typer.Option("--group", help="The consumer group.")],
    topic: Annotated[
        list[str], typer.Option("--topic", help="TOPIC or TOPIC:P,P,... (repeatable).")
    ],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_MS,
    output: OutputOption = Output.TABLE,
) -> None:
    """Delete a group's committed offsets for topics or partitions (OffsetDelete)."""
    try:
        topics = [parse.topic_arg(t) for t in topic]
    except parse.UsageError as exc:
        usage(str(exc))

    async def work(
        cluster: Cluster,
    ) -> tuple[ErrorCode | None, dict[TP, ErrorCode], dict[str, ErrorCode]]:
        topology = await cluster.topology({t for t, ps in topics if ps is None})
        partitions: list[TP] = []
        for name, listed in topics:
            known = sorted(topology.leaders.get(name, {})) if listed is None else listed
            partitions.extend((name, p) for p in known)
        missing = dict(topology.missing)
        if not partitions:
            return None, {}, missing
        _, admin = await cluster.group_admin(group)
        top, codes = await admin.delete_offsets(group, partitions)
        return top, {tp: codes.get(tp, top) for tp in partitions}, missing

    top, codes, missing = run(bootstrap, timeout, work)
    report = delete_offsets_report(group, top, codes, missing)
    emit_report(report, output)
