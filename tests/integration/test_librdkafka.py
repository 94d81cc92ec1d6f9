"""librdkafka (confluent-kafka 2.16.1, its own process) against the coordinator.

Issue 12, finding 1: without Produce in ApiVersions librdkafka turned off its v2 message
format and failed every Fetch inside the client, in a loop: an idle consumer burned a
core (11 s of CPU in 15 s here), never sent a Fetch and never saw the end of its
partitions. Produce is listed now and refused as Kafka refuses a principal without
Write permission (TOPIC_AUTHORIZATION_FAILED, not retriable).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from kgroups import admin
from tests.integration.harness import PYTHON, Coordinator

IDLE_CONSUMER = """
import json, sys, time
from confluent_kafka import Consumer, KafkaError
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g", "enable.partition.eof": True,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
c.subscribe(["t"])
eofs, deadline = set(), time.monotonic() + 60
while time.monotonic() < deadline and (not c.assignment() or eofs < {p.partition for p in c.assignment()}):
    m = c.poll(0.2)
    if m is not None and m.error() and m.error().code() == KafkaError._PARTITION_EOF:
        eofs.add(m.partition())
cpu, wall = time.process_time(), time.monotonic()
while time.monotonic() - wall < float(sys.argv[2]):  # idle, as a consumer with nothing to read
    c.poll(0.5)
print(json.dumps({"assignment": sorted(p.partition for p in c.assignment()),
                  "eofs": sorted(eofs), "cpu_s": time.process_time() - cpu,
                  "wall_s": time.monotonic() - wall}))
c.close()
"""

PRODUCER = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "message.timeout.ms": 30000})
errors = []
p.produce("t", b"x", partition=0, on_delivery=lambda err, msg: errors.append(err))
started = time.monotonic()
p.flush(40)
print(errors[0].name() if errors and errors[0] else errors, round(time.monotonic() - started, 2))
"""


def run(script: str, *args: str, timeout: float = 120) -> str:
    done = subprocess.run([PYTHON, "-c", script, *args], capture_output=True, text=True,
                          timeout=timeout, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def test_an_idle_librdkafka_consumer_reaches_the_end_of_its_partitions_and_uses_no_cpu(
    coordinator: Coordinator,
) -> None:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "t", 3))
    seen = json.loads(run(IDLE_CONSUMER, coordinator.bootstrap, "10"))
    assert seen["assignment"] == [0, 1, 2] == seen["eofs"]
    # Against Kafka an idle consumer uses next to nothing; the spinning client used a
    # whole core. Half a second over ten allows for a loaded CI machine.
    assert seen["cpu_s"] < 0.5, seen


def test_a_librdkafka_producer_is_refused_at_once_not_after_its_timeout(
    coordinator: Coordinator,
) -> None:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "t", 3))
    started = time.monotonic()
    error, seconds = run(PRODUCER, coordinator.bootstrap).split()
    assert error == "TOPIC_AUTHORIZATION_FAILED"
    assert float(seconds) < 10 and time.monotonic() - started < 60  # not the 30 s timeout
