"""Real Kafka peers for tests and benchmarks: a single-node KRaft broker and a Java member.

kgroups is measured against, and tested with, the real thing: an Apache Kafka 4.4.0 broker
(the benchmarks' peer) and the Java client (the interop member every other client
imitates). Both come from Maven Central through `tools/kafka/fetch.sh` into a cache outside
the repository. Stdlib only, so tests and benchmarks can import it without the project
installed.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

HERE = Path(__file__).resolve().parent / "kafka"
FETCH = HERE / "fetch.sh"
# The one place the version is set is pom.xml; benchmarks label Kafka's results with this.
KAFKA_VERSION: str = re.findall(
    r"<kafka.version>(.*)</kafka.version>", (HERE / "pom.xml").read_text()
)[0]


@functools.cache
def ensure_kafka() -> Path:
    """Install (once per machine) and return the cache dir holding `libs/` and `javamember/`.

    Cached per process: fetch.sh is cheap when everything is there, but tests call this for
    every Java member they start.
    """
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(
            f"the Kafka peers need {', '.join(missing)} on PATH (Java 17+ and Maven 3.8+)"
        )
    result = subprocess.run(
        ["bash", str(FETCH)], check=False, capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        raise RuntimeError(f"tools/kafka/fetch.sh failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def free_port() -> int:
    """A loopback port nobody listens on now (the usual small race is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _java(main: str, *args: str, heap: str = "256m", log4j: str = "log4j2-stderr.xml",
          jvm: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """argv running `main` from the cached jars and helpers, logging per `log4j`."""
    cache = ensure_kafka()
    classpath = f"{cache / 'libs'}/*{os.pathsep}{cache / 'javamember'}"
    return [
        "java", f"-Xmx{heap}", "-Djava.awt.headless=true", *jvm,
        f"-Dlog4j2.configurationFile={HERE / log4j}", "-cp", classpath, main, *args,
    ]  # fmt: skip


def java_member_cmd(*args: str) -> list[str]:
    """argv that runs tools/kafka/JavaMember.java (a real KafkaConsumer) with `args`.

    Start it with stdin=subprocess.PIPE: the member leaves the group when its stdin ends.
    Serial GC and a small heap, because tests run several members on 2 cores.
    """
    return _java("JavaMember", *args, jvm=("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"))


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create `name` (replication 1) and return once the broker serves all its partitions.

    Uses tools/kafka/KafkaAdmin.java (the Admin client), because kafka-tools, which holds
    TopicCommand, is not on Maven Central for 4.4.0.
    """
    cmd = _java("KafkaAdmin", "--bootstrap", bootstrap, "--create-topic", name,
                "--partitions", str(partitions), jvm=("-XX:TieredStopAtLevel=1",))  # fmt: skip
    result = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"creating topic {name!r} failed: {result.stderr.strip()[-2000:]}")


def _api_versions_ok(port: int) -> bool:
    """A raw ApiVersions v0 round trip: the broker is not just listening but answering.

    Request: size, api_key 18, api_version 0, correlation_id, client_id "" (v0 header).
    Response: size, correlation_id, error_code, api list; error 0 means ready.
    """
    request = struct.pack(">hhih", 18, 0, 7, 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = b""
            while len(header) < 10:
                chunk = sock.recv(10 - len(header))
                if not chunk:
                    return False
                header += chunk
            _, correlation_id, error = struct.unpack(">iih", header)
            return bool(correlation_id == 7 and error == 0)
    except OSError:
        return False


def sasl_ssl_settings(port: int, secure_port: int, keystore_pem: Path) -> dict[str, str]:
    """server.properties entries for a PLAINTEXT listener on `port` (for setting up) and a
    SASL_SSL one with SCRAM-SHA-512 on `secure_port`, its key and certificate chain in one
    PEM file. The CONTROLLER listener's port is left as "{}": KafkaBroker fills it in."""
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{secure_port},"
        "CONTROLLER://127.0.0.1:{}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{secure_port}",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore_pem),
    }  # fmt: skip


def scram_user(user: str, password: str) -> str:
    """A SCRAM-SHA-512 credential as kafka-storage format's --add-scram takes it."""
    return f"SCRAM-SHA-512=[name={user},password={password}]"


def new_cluster_id() -> str:
    """16 random bytes in URL-safe base64 without padding, as kafka-storage wants."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaBroker:
    """A combined broker+controller KRaft Kafka on 127.0.0.1:`port`, formatted in `data_dir`.

    A context manager: `__enter__` formats storage, starts the JVM and returns once the
    broker answers ApiVersions; `__exit__` stops it (SIGTERM, then SIGKILL) and waits.
    Settings suit one node and fast tests: every internal topic has replication 1, session
    timeouts down to 1 s are allowed and topics are only created explicitly. `extra`
    overrides or adds server.properties entries; `cpu` pins the JVM with taskset (benchmarks).
    """

    def __init__(
        self,
        port: int,
        data_dir: Path,
        *,
        group_initial_rebalance_delay_ms: int = 0,
        extra: dict[str, str] | None = None,
        cpu: str | None = None,
        heap: str = "512m",
        start_timeout: float = 240,  # a JVM beside make test's busiest minutes: over 90 s once
        stop_timeout: float = 30,
        scram: tuple[str, ...] = (),
        node_id: int = 1,
        controller_port: int | None = None,
        voters: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        """`scram`: SCRAM credentials written at format time, as kafka-storage takes
        them (`SCRAM-SHA-512=[name=bench,password=pw]`). `voters`: one node of a
        several-node quorum (`1@host:port,2@...`, every node given the same `cluster_id`)
        instead of a standalone one."""
        self.scram = scram
        self.port = port
        self.controller_port = controller_port or free_port()
        self.voters = voters
        self.cluster_id = cluster_id
        self.data_dir = Path(data_dir)
        self.cpu = cpu
        self.heap = heap
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.started_in: float | None = None  # seconds from launching the JVM to ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.settings = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            **(
                {"controller.quorum.voters": voters}
                if voters
                else {"controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}"}
            ),
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": str(group_initial_rebalance_delay_ms),
            "group.min.session.timeout.ms": "1000",
            **(extra or {}),
        }

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _cmd(self, main: str, *args: str) -> list[str]:
        pin = ["taskset", "-c", self.cpu] if self.cpu and shutil.which("taskset") else []
        gc = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35")
        return [
            *pin,
            *_java(main, *args, heap=self.heap, log4j="log4j2.xml",
                   jvm=(*gc, f"-Dkgroups.broker.log={self.data_dir / 'broker.log'}")),
        ]  # fmt: skip

    def __enter__(self) -> KafkaBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # sasl_ssl_settings leaves the controller's port, chosen here, to fill in.
        self.settings["listeners"] = self.settings["listeners"].replace(
            "{}", str(self.controller_port)
        )
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        cluster_id = self.cluster_id or new_cluster_id()
        quorum = () if self.voters else ("--standalone",)
        fmt = subprocess.run(
            # --cluster-id=ID: an id starting with "-" (1 in 64) is an option to argparse
            self._cmd("kafka.tools.StorageTool", "format", *quorum, "--ignore-formatted",
                      f"--cluster-id={cluster_id}", "--config", str(config),
                      *(arg for user in self.scram for arg in ("--add-scram", user))),
            check=False, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {(fmt.stdout + fmt.stderr)[-2000:]}")
        started = time.monotonic()
        with (self.data_dir / "broker.out").open("wb") as out:
            self.proc = subprocess.Popen(
                self._cmd("kafka.Kafka", str(config)),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        while not _api_versions_ok(self.port):
            if self.proc.poll() is not None or time.monotonic() - started > self.start_timeout:
                self.__exit__(None, None, None)
                raise RuntimeError(
                    f"Kafka broker did not start within {self.start_timeout:.0f} s; "
                    f"see {self.data_dir}/broker.log and broker.out"
                )
            time.sleep(0.1)
        self.started_in = time.monotonic() - started
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)  # a controlled shutdown: a few seconds
        try:
            proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
