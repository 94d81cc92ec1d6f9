"""kgroups' own member library (`kgroups.client.GroupMember`) in an application's process, as
a member of a kgroups consumer group (examples/k8s/members.yaml): no Kafka client, no
sidecar.

It joins the group, prints what it owns as one JSON line on stdout whenever that changes,
and commits, every commit interval, one more unit of "work" per owned partition,
continuing from the group's committed offset, so that `kubectl get cg` shows offsets
moving and a partition's next owner carries on where the last one stopped. SIGTERM
closes the member, which leaves the group.

    python kgroups_member.py --bootstrap-server HOST:PORT --group billing --topic orders

The bootstrap, group and topic may come from the environment instead (KGROUPS_BOOTSTRAP,
KGROUPS_GROUP, KGROUPS_TOPIC); the client id defaults to the host name, the pod's name.
A secured coordinator's settings come from KGROUPS_SECURITY_PROTOCOL, KGROUPS_SASL_* and
KGROUPS_SSL_* (e.g. a projected ServiceAccount token: examples/k8s/secured/billing.yaml).
A line says which generation the assignment belongs to (null while it holds none):

    {"client": "kgroups", "name": "<id>", "generation": 3, "assigned": [["orders", 0]]}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

import common
from common import Report
from kgroups.client import CoordinatorUnavailable, GroupMember, MemberError, TopicPartition
from kgroups.security.client import ClientSecurity

CLIENT = "kgroups"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    return common.arguments(__doc__.split("\n\n")[0], argv)


class Listener:
    """The member's rebalance listener: called on the member's loop, one call at a time."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.member: GroupMember | None = None

    def on_partitions_assigned(self, added: frozenset[TopicPartition]) -> None:
        assert self.member is not None
        self.report(self.member.generation, self.member.assignment)  # all it owns now

    def on_partitions_revoked(self, revoked: frozenset[TopicPartition]) -> None:
        assert self.member is not None
        kept = self.member.assignment - revoked  # eager (range): nothing
        self.report(self.member.generation if kept else None, kept)

    def on_partitions_lost(self, lost: frozenset[TopicPartition]) -> None:
        self.report(None, [])


async def commit_work(member: GroupMember, work: dict[TopicPartition, int]) -> None:
    """One more unit of work per owned partition, committed in the member's generation."""
    owned = member.assignment
    new = owned - work.keys()
    if new:  # newly owned: carry on from the group's offset
        for tp, committed in (await member.committed(new)).items():
            work[tp] = committed.offset if committed is not None else 0
    for tp in work.keys() - owned:
        del work[tp]
    for tp in owned:
        work[tp] += 1
    if owned:
        await member.commit({tp: work[tp] for tp in owned})


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    report = Report(CLIENT, args.client_id)
    listener = Listener(report)
    member = GroupMember(
        args.bootstrap,
        args.group,
        [args.topic],
        assignors=["range"],  # the sidecars' strategy
        client_id=args.client_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        metadata_max_age_ms=args.metadata_max_age_ms,
        listener=listener,
        security=ClientSecurity.from_env(),
    )
    listener.member = member
    # start() returns once the member first holds an assignment; SIGTERM may come first.
    starting = asyncio.create_task(member.start(), name="kgroups-member-start")
    work: dict[TopicPartition, int] = {}
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.commit_interval_ms / 1000)
        if stop.is_set() or member.error is not None:
            break
        try:
            await commit_work(member, work)
        except (MemberError, CoordinatorUnavailable) as exc:
            # a rebalance under way, or the coordinator restarting: the next owner carries on
            print(f"commit: {exc!r}", file=sys.stderr, flush=True)
            work.clear()
    starting.cancel()
    with contextlib.suppress(asyncio.CancelledError, MemberError):
        await starting
    await member.close()  # LeaveGroup: the others get the partitions at once
    report(None, [])
    if member.error is not None:  # e.g. fenced: let the pod restart
        print(f"member failed: {member.error!r}", file=sys.stderr, flush=True)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
