"""Three Spark applications write one table exactly once (examples/spark/clicks_to_delta.py).

A Delta Lake table from a topic of the real Kafka broker, read over SASL_SSL (TLS and
SCRAM-SHA-512, Kafka's client properties given with --kafka-option), while the topic is
appended to and grows from four partitions to six: one application is killed (SIGKILL)
in the middle of a write; one is frozen, driver and JVM, past its session timeout after
its plan was committed and before its write; one is frozen before a plan commit. Then a
directory of Parquet files from the file log, one application under spark-submit, on
three coordinator replicas sharing a PostgreSQL: the replica that owns the group killed
while they read, then one application killed mid-stage, one frozen while staging (on
waking its batch is refused or cancelled, never published), one frozen between its
commit and its publish.

What must hold: the table, read by delta-rs (for Parquet: by pyarrow), holds one row per
input record, with the record's user, compared with a single-process reading of the
input; every batch landed in one write (its rows share one `processed_at`); the frozen
writers say what happened to their late work (skipped by the table, refused by the
group); the committed offsets reach the input's ends. The same over the file log into
Delta is `make demo` (tests/e2e/test_demo.py).
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgroups.admin.single import Admin
from kgroups.coordinator.core.shards import shard_of
from tests.conftest import LOCAL_SPARK_JVM
from tests.integration.harness import Coordinator, wait_until
from tests.integration.spark_apps import (
    SESSION_MS,
    Bootstrap,
    Feeder,
    FilesInput,
    Input,
    KafkaInput,
    SparkApp,
    ask_owner,
    committed,
    reference,
)  # fmt: skip
from tests.postgres import PostgresServer

pytestmark = pytest.mark.slow

SCRIPT = "examples/spark/clicks_to_delta.py"
FREEZE_S = SESSION_MS / 1000 * 2


def app(coordinator: Bootstrap, name: str, records: Input, table: Path, tmp: Path,
        *extra: str, submit: bool = False, protocol: str = "classic") -> SparkApp:  # fmt: skip
    """(`protocol` consumer: Kafka 4's; the coordinators' consumer session is SESSION_MS.)"""
    assigning = (["--assignor", "cooperative-sticky"] if protocol == "classic"
                 else ["--group-protocol", "consumer"])  # fmt: skip
    args = ["--bootstrap", coordinator.bootstrap, "--group", "clicks", "--topic", records.topic,
            "--source", records.source, "--table", str(table),
            "--session-timeout-ms", str(SESSION_MS), "--max-records", "2000",
            *assigning, "--partition-check-interval-s", "5", *extra]  # fmt: skip
    return SparkApp(name, SCRIPT, args, tmp, submit=submit)


def rows_once(read: Any, expected: dict[Any, Any]) -> None:
    """The table's rows (an Arrow table): each input record once, with its user, each
    batch from one write (one `processed_at`)."""
    columns = ("partition", "offset", "user", "batch_id", "processed_at")
    rows = list(zip(*(read[c].to_pylist() for c in columns), strict=True))
    keys = collections.Counter((p, o) for p, o, _, _, _ in rows)
    twice = [k for k, n in keys.items() if n > 1]
    assert not twice, f"{len(twice)} records twice, e.g. {twice[:5]}"
    assert {(p, o): user for p, o, user, _, _ in rows} == expected
    writes = collections.defaultdict(set)
    for _, _, _, batch, at in rows:
        writes[batch].add(at)
    assert all(len(at) == 1 for at in writes.values()), "a batch written more than once"


def caught_up(coordinator: Bootstrap, records: Input, apps: list[SparkApp]) -> dict[int, int]:
    ends = records.ends()
    wait_until(lambda: [a.alive() for a in apps]
               and committed(coordinator, "clicks", records.topic) == ends, 360,
               "the committed offsets to reach the end of the input", poll=2)  # fmt: skip
    return ends


@pytest.fixture
def secured_topic(tmp_path: Path) -> Iterator[tuple[KafkaInput, list[str]]]:
    """A topic of the real Kafka broker with a SASL_SSL listener (SCRAM-SHA-512) beside a
    PLAINTEXT one, and the Kafka options an application reads it with."""
    import kafkapeer  # tools/kafkapeer.py: the real broker, from Maven Central
    from tests.pki import Pki

    pki = Pki(tmp_path / "pki")
    server = pki.issue_server()
    pem = tmp_path / "server.pem"
    pem.write_bytes(server.key.read_bytes() + server.cert.read_bytes())
    port, secure = kafkapeer.free_port(), kafkapeer.free_port()
    with kafkapeer.KafkaBroker(
        port, tmp_path / "kafka", extra=kafkapeer.sasl_ssl_settings(port, secure, pem),
        scram=(kafkapeer.scram_user("spark", "spark-secret"),),
    ) as broker:  # fmt: skip
        kafkapeer.create_topic(broker.bootstrap, "clicks", 4)
        options = [
            "security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="spark" password="spark-secret";',
            "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
        ]  # fmt: skip
        target = KafkaInput(broker.bootstrap, "clicks", f"kafka:127.0.0.1:{secure}")
        try:
            yield target, [arg for option in options for arg in ("--kafka-option", option)]
        finally:
            target.close()


def test_three_apps_write_a_delta_table_once_from_a_secured_growing_kafka_topic(
    coordinator: Coordinator, secured_topic: tuple[KafkaInput, list[str]], tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    records, options = secured_topic
    table = tmp_path / "table"
    feeder = Feeder(records)
    feeder.start()
    apps = [app(coordinator, f"app{i}", records, table, tmp_path, *options) for i in range(3)]
    try:
        # The coordinator's topic is made by the applications, as large as Kafka's.
        wait_until(lambda: all(a.alive() and "reading clicks from {" in a.log() for a in apps),
                   180, "three apps reading", poll=1)  # fmt: skip
        records.grow(6)
        feeder.count = 6
        wait_until(lambda: [a.alive() for a in apps]
                   and set(committed(coordinator, "clicks", "clicks")) == set(range(6)),
                   240, "the new partitions read", poll=1)  # fmt: skip

        wait_until(lambda: "plan committed; writing" in apps[0].log(), 60, "app0 writing",
                   poll=0.005)  # fmt: skip
        apps[0].signal(signal.SIGKILL)  # dies mid-write
        # On waking, its write finds the batch in the table already (an heir wrote it), or
        # lands first (its plan was committed) with its end commit refused, the heir then
        # finding it there: either way the batch is in the table once.
        late = apps[1].freeze_at("plan committed; writing", FREEZE_S,
                                 lambda said: "in the table already" in said
                                 or "its end commit refused" in said)  # fmt: skip
        # On waking, its next plan commit is refused, or its member first finds its own
        # session run out and drops the partitions: either way its next batch is not written.
        refused = apps[2].freeze_at(": done (", FREEZE_S, lambda said: "plan commit refused"
                                    in said or "no proof of membership" in said)  # fmt: skip
        feeder.stop()
        ends = caught_up(coordinator, records, apps[1:])
    finally:
        feeder.stop()
        for each in apps:
            each.stop()
    assert "skipped" in late or "its end commit refused" in late
    assert "commit refused" in refused or "partitions lost" in refused
    read = DeltaTable(str(table)).to_pyarrow_table()
    rows_once(read, reference(records, ends))
    assert set(read["topic"].to_pylist()) == {"clicks"}
    assert all(key for key in read["kafka_key"].to_pylist())  # the record's key, kept
    assert None not in read["event_time"].to_pylist()  # the record's timestamp, kept


def test_three_apps_write_a_parquet_directory_once_through_kill_and_freezes_on_replicas(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """On three coordinator replicas (PostgreSQL), the one that owns the group killed
    while the applications read: they go on through the new owner. The applications
    speak Kafka 4's consumer protocol (the Delta test's, the classic one)."""
    import pyarrow.dataset as ds

    from tests.integration.test_replicas import Cluster

    (tmp_path / "replicas").mkdir()
    coordinators = Cluster(postgres.create_database(), tmp_path / "replicas")
    coordinators.start()
    records = FilesInput(tmp_path / "log", "clicks", 4)
    table = tmp_path / "table"
    feeder = Feeder(records)
    feeder.start()
    parquet = ("--format", "parquet")
    kip848 = {"protocol": "consumer"}
    apps = [app(coordinators, "app0", records, table, tmp_path, *parquet, **kip848),
            app(coordinators, "app1", records, table, tmp_path, *parquet, **kip848),
            app(coordinators, "submitted", records, table, tmp_path, *parquet, submit=True,
                **kip848)]  # fmt: skip
    try:
        wait_until(lambda: all(a.alive() and "reading clicks from {" in a.log() for a in apps),
                   180, "three apps reading", poll=1)  # fmt: skip
        before = committed(coordinators, "clicks", "clicks")
        group = ask_owner(coordinators, "clicks", Admin.describe_group)
        assert (group.group_type, len(group.members)) == ("consumer", 3), group
        owner = coordinators.owners()[shard_of("clicks", 50)]
        coordinators.replicas[owner].kill()
        wait_until(lambda: [a.alive() for a in apps] and any(
            o > before.get(p, 0) for p, o in committed(coordinators, "clicks", "clicks").items()),
            150, "commits through the new owner", poll=1)  # fmt: skip
        wait_until(lambda: "generation" in apps[0].log() and ": batch " in apps[0].log(), 60,
                   "app0 staging", poll=0.005)  # fmt: skip
        apps[0].signal(signal.SIGKILL)  # dies mid-stage
        # Frozen while its executors stage a batch (the commit follows the "staged" line
        # within microseconds: a freeze there lands after the commit is sent). It wakes
        # without its generation: the staged batch is refused or cancelled, never published.
        refused = apps[1].freeze_at("[(", FREEZE_S,  # a batch planned
                                    lambda said: "dropping clicks-" in said)  # fmt: skip
        published = apps[2].freeze_at("committed; publishing", FREEZE_S,
                                      lambda said: ": done (" in said)  # fmt: skip
        feeder.stop()
        ends = caught_up(coordinators, records, apps[1:])
    finally:
        feeder.stop()
        for each in apps:
            each.stop()
        coordinators.stop()
    assert "dropping" in refused and published
    read = ds.dataset(str(table), format="parquet").to_table()
    rows_once(read, reference(records, ends))
    # What the frozen applications staged is published or swept; the killed one's staging
    # (if its executors had written any) stays for the sweep of staging a day old.
    left = [p for p in (table / ".staging").rglob("*") if p.is_file()]
    assert not [p for p in left if not any(part.endswith(".app0") for part in p.parts)], left


def test_a_batch_larger_than_the_drivers_memory_goes_through_the_executors(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """Nothing is collected to the driver: with a 512 MiB driver (local mode: executors
    are threads of the driver's JVM) and spark.driver.maxResultSize at 1 MiB, one batch of
    about 600 MB of records (60,000 of 10 KB) is read, transformed and written to Delta."""
    from deltalake import DeltaTable

    # Few large records (10 KB each): the bytes are what the driver could not hold, and
    # Spark's per-record work would only make the test longer.
    records, per_partition, chunk = FilesInput(tmp_path / "log", "big", 2), 30_000, 5_000
    pad = "x" * 10_000
    for p in range(2):
        for start in range(0, per_partition, chunk):
            records.append(p, [{"user": f"u{(start + i) % 9}", "pad": pad} for i in range(chunk)])
    size = sum(f.stat().st_size for f in (tmp_path / "log" / "big").iterdir())
    assert size > 600 * 10**6
    table = tmp_path / "table"
    env = {"PYSPARK_SUBMIT_ARGS": f"--driver-memory 512m --conf spark.driver.maxResultSize=1m "
                                  f"--driver-java-options '{LOCAL_SPARK_JVM}' pyspark-shell"}  # fmt: skip
    args = ["--bootstrap", coordinator.bootstrap, "--group", "big", "--topic", "big",
            "--source", records.source, "--table", str(table), "--max-records", "1000000"]  # fmt: skip
    big = SparkApp("big", SCRIPT, args, tmp_path, env=env)
    try:
        wait_until(lambda: big.alive() and f": done ({2 * per_partition} records)" in big.log(), 600,
                   "the one batch written", poll=1)  # fmt: skip
    finally:
        big.stop()
    read = DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "offset"])
    assert read.num_rows == 2 * per_partition
    assert committed(coordinator, "big", "big") == {0: per_partition, 1: per_partition}
