"""A kafka-python consumer as a member of a kgroups consumer group (examples/k8s/members.yaml).

It consumes nothing (kgroups stores no records): it joins the group, prints what it owns
as one JSON line on stdout whenever that changes, and commits, every commit interval, one
more unit of "work" per owned partition, continuing from the group's committed offset, so
that `kubectl get cg` shows offsets moving and a partition's next owner carries on where
the last one stopped. SIGTERM closes the consumer, which leaves the group.

    python kafka_python_member.py --bootstrap-server HOST:PORT --group billing --topic orders

The bootstrap, group and topic may come from the environment instead (KGROUPS_BOOTSTRAP,
KGROUPS_GROUP, KGROUPS_TOPIC); the client id defaults to the host name, the pod's name.
A line says which generation the assignment belongs to (null while it holds none):

    {"client": "kafka-python", "name": "<id>", "generation": 3, "assigned": [["orders", 0]]}
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import KafkaError

import common
from common import Report

CLIENT = "kafka-python"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    return common.arguments(__doc__.split("\n\n")[0], argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        metadata_max_age_ms=args.metadata_max_age_ms,
        partition_assignment_strategy=[RangePartitionAssignor],  # the sidecars' strategy
        enable_auto_commit=False,
    )
    report = Report(CLIENT, args.client_id)
    work: dict[TopicPartition, int] = {}  # owned partition -> units of work done on it

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        # kafka-python calls these from poll(), in the main thread.
        def on_partitions_revoked(self, revoked: Any) -> None:
            report(None, set())  # eager (range): everything goes before the rejoin

        def on_partitions_assigned(self, assigned: Any) -> None:
            report(consumer.group_metadata().generation_id, assigned)

    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer.subscribe([args.topic], listener=Listener())
    next_commit = time.monotonic() + args.commit_interval_ms / 1000
    while not stopping:
        try:
            consumer.poll(timeout_ms=500)
        except KafkaError as exc:  # the coordinator restarting: retry, as an application would
            print(f"poll: {exc!r}", file=sys.stderr, flush=True)
            time.sleep(0.5)
            continue
        if time.monotonic() < next_commit:
            continue
        next_commit = time.monotonic() + args.commit_interval_ms / 1000
        owned = consumer.assignment()
        try:
            for tp in owned - work.keys():  # newly owned: carry on from the group's offset
                work[tp] = consumer.committed(tp) or 0
            for tp in work.keys() - owned:
                del work[tp]
            for tp in owned:
                work[tp] += 1
            if owned:
                consumer.commit({tp: OffsetAndMetadata(work[tp], "", -1) for tp in owned})
        except KafkaError as exc:  # a rebalance under way: the next owner carries on
            print(f"commit: {exc!r}", file=sys.stderr, flush=True)
            work.clear()
    consumer.close()  # LeaveGroup: the others get the partitions at once
    report(None, set())
    return 0


if __name__ == "__main__":
    sys.exit(main())
