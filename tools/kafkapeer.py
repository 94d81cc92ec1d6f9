"""Real Kafka peers for tests and benchmarks: a single-node KRaft broker and a Java member.

kgroups is measured against, and tested with, the real thing: a Kafka broker (the
benchmarks' peer) and the Java client (an interop member). Both come from Maven Central
through `tools/kafka/fetch.sh` into a cache outside the repository. Stdlib only, so the
tests and the benchmarks can import it without the project installed.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

HERE = Path(__file__).resolve().parent
FETCH = HERE / "kafka" / "fetch.sh"


def ensure_kafka() -> Path:
    """Install (once) and return the cache directory holding `libs/` and `javamember/`."""
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"the Kafka peers need {', '.join(missing)} (Java 17 and Maven)")
    result = subprocess.run(
        ["bash", str(FETCH)], check=False, capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        raise RuntimeError(f"tools/kafka/fetch.sh failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def java_member_cmd(*args: str) -> list[str]:
    """argv that runs tools/kafka/JavaMember.java (a real KafkaConsumer) with `args`."""
    cache = ensure_kafka()
    classpath = f"{cache / 'libs'}/*{os.pathsep}{cache / 'javamember'}"
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", classpath, "JavaMember", *args]


def _api_versions_ok(port: int) -> bool:
    """A raw ApiVersions v0 round trip: the broker is not just listening but answering."""
    request = struct.pack(">hhih", 18, 0, 1, 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = sock.recv(10)
            return len(header) >= 10 and struct.unpack(">h", header[8:10])[0] == 0
    except OSError:
        return False


class KafkaBroker:
    """A combined broker+controller KRaft Kafka on 127.0.0.1, formatted in `data_dir`."""

    def __init__(
        self,
        port: int,
        data_dir: Path,
        *,
        group_initial_rebalance_delay_ms: int = 0,
        cpu: str | None = None,
        extra: dict[str, str] | None = None,
        start_timeout: float = 90,
    ) -> None:
        self.port = port
        self.controller_port = free_port()
        self.data_dir = data_dir
        self.cpu = cpu
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(data_dir / "logs"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": str(group_initial_rebalance_delay_ms),
            "group.min.session.timeout.ms": "1000",
            "auto.create.topics.enable": "false",
            **(extra or {}),
        }

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, cache: Path, main: str, *args: str) -> list[str]:
        pin = ["taskset", "-c", self.cpu] if self.cpu and shutil.which("taskset") else []
        return [
            *pin, "java", "-Xmx768m", "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={HERE / 'kafka' / 'log4j2.xml'}",
            f"-Dkgroups.broker.log={self.data_dir / 'broker.log'}",
            "-cp", f"{cache / 'libs'}/*", main, *args,
        ]  # fmt: skip

    def __enter__(self) -> KafkaBroker:
        cache = ensure_kafka()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run(
            self._java(cache, "kafka.tools.StorageTool", "format", "--standalone",
                       "-t", cluster_id, "-c", str(config)),
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        out = (self.data_dir / "broker.out").open("wb")
        self.proc = subprocess.Popen(
            self._java(cache, "kafka.Kafka", str(config)), stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        deadline = time.monotonic() + self.start_timeout
        while not _api_versions_ok(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"Kafka broker did not start; see {self.data_dir}/broker.log")
            time.sleep(0.2)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self.proc = None
