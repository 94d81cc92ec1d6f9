"""A confluent-kafka (librdkafka) consumer as a member of a kgroups consumer group
(examples/k8s/members.yaml).

It consumes nothing (kgroups stores no records): it joins the group, prints what it owns
as one JSON line on stdout whenever that changes, and commits, every commit interval, one
more unit of "work" per owned partition, continuing from the group's committed offset, so
that `kubectl get cg` shows offsets moving and a partition's next owner carries on where
the last one stopped. SIGTERM closes the consumer, which leaves the group.

    python confluent_member.py --bootstrap-server HOST:PORT --group billing --topic orders

The bootstrap, group and topic may come from the environment instead (KGROUPS_BOOTSTRAP,
KGROUPS_GROUP, KGROUPS_TOPIC); the client id defaults to the host name, the pod's name.
A line says which generation the assignment belongs to (null while it holds none):

    {"client": "confluent-kafka", "name": "<id>", "generation": 3, "assigned": [["orders", 0]]}
"""

from __future__ import annotations

import argparse
import signal
import struct
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

import common
from common import Report

CLIENT = "confluent-kafka"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    return common.arguments(__doc__.split("\n\n")[0], argv)


def generation(consumer: Consumer) -> int | None:
    """The generation librdkafka is in. confluent-kafka has no accessor for it, but its
    consumer group metadata (for transactions) carries it: "CGMDv2:", a native int32."""
    data: bytes = consumer.consumer_group_metadata()
    magic = b"CGMDv2:"
    if not data.startswith(magic):
        return None
    return int(struct.unpack_from("=i", data, len(magic))[0])


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    report = Report(CLIENT, args.client_id)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "topic.metadata.refresh.interval.ms": args.metadata_max_age_ms,
        "partition.assignment.strategy": "range",  # the sidecars' strategy
        "enable.auto.commit": False,
    })  # fmt: skip
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # librdkafka calls these from poll() and close(), in the main thread; the assignment
    # is applied after on_assign returns.
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, partitions: report(generation(c), partitions),
        on_revoke=lambda c, partitions: report(None, []),  # eager: everything goes
        on_lost=lambda c, partitions: report(None, []),
    )
    work: dict[tuple[str, int], int] = {}  # owned partition -> units of work done on it
    errors: set[str] = set()
    next_commit = time.monotonic() + args.commit_interval_ms / 1000
    while not stopping:
        message = consumer.poll(0.5)  # serves the rebalance callbacks
        if message is not None and message.error() is not None:
            error = str(message.error())
            if error not in errors:  # librdkafka repeats an error on every retry
                errors.add(error)
                print(f"poll: {error}", file=sys.stderr, flush=True)
        if time.monotonic() < next_commit:
            continue
        next_commit = time.monotonic() + args.commit_interval_ms / 1000
        owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        try:
            new = [TopicPartition(t, p) for t, p in owned - work.keys()]
            if new:  # newly owned: carry on from the group's offset (none: -1001)
                for committed in consumer.committed(new, timeout=10):
                    work[committed.topic, committed.partition] = max(committed.offset, 0)
            for gone in work.keys() - owned:
                del work[gone]
            for key in owned:
                work[key] += 1
            if owned:
                offsets = [TopicPartition(t, p, work[t, p]) for t, p in owned]
                failed = [tp for tp in consumer.commit(offsets=offsets, asynchronous=False)
                          if tp.error is not None]  # fmt: skip
                if failed:
                    raise KafkaException(failed[0].error)
        except KafkaException as exc:  # a rebalance under way: the next owner carries on
            print(f"commit: {exc!r}", file=sys.stderr, flush=True)
            work.clear()
    consumer.close()  # LeaveGroup: the others get the partitions at once
    report(None, [])
    return 0


if __name__ == "__main__":
    sys.exit(main())
