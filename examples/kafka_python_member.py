"""A kafka-python consumer that takes part in a kgroups group, as any Kafka client can.

    python examples/kafka_python_member.py --bootstrap-server 127.0.0.1:9092 --group demo \
        --topic orders --name member-1

It prints a line each time the group hands it partitions (with the generation), and one
JSON line per event when --json is given. kgroups serves the group protocol only: the
consumer's fetches return no records, so poll() simply idles between rebalances.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.errors import KafkaError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", default="127.0.0.1:9092"
    )
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True, help="client.id, shown in describe output")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.name,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.session_timeout_ms // 6,
        enable_auto_commit=False,
    )

    def report(event: str, partitions: Any) -> None:
        owned = sorted(p.partition for p in partitions)
        generation = consumer.group_metadata().generation_id
        if args.json:
            print(json.dumps({"event": event, "generation": generation, "partitions": owned}))
        elif event == "assigned":
            print(f"[{args.name}] generation {generation}: owns {args.topic} partitions {owned}")
        sys.stdout.flush()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            report("revoked", revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            report("assigned", assigned)

    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer.subscribe([args.topic], listener=Listener())
    while not stopping:
        try:
            consumer.poll(timeout_ms=200)
        except KafkaError as exc:
            # kafka-python raises connection errors out of poll() while the coordinator is
            # unreachable (a restart, say); the group survives, so keep polling.
            print(f"[{args.name}] {exc!r}; retrying", file=sys.stderr, flush=True)
            time.sleep(0.5)
    consumer.close()  # sends LeaveGroup: the others rebalance at once


if __name__ == "__main__":
    main()
