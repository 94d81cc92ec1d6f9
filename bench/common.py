"""What every benchmark shares: targets to measure (kgroups, a Kafka broker) and stats.

A target is a coordinator process pinned to one CPU, so "per core" figures mean what they
say; the load generator runs pinned to the other CPU. Every figure printed comes from the
same run as the figures it is compared with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

from bench.loadgen import Security  # noqa: E402  (the paths above first)

SERVER_CPU = "0"


def _kafka_label() -> str:
    """ "kafka <version>" from tools/kafka/pom.xml, the one place the peer's version is set."""
    pom = (ROOT / "tools" / "kafka" / "pom.xml").read_text()
    start = pom.find("<kafka.version>") + len("<kafka.version>")
    return "kafka " + pom[start : pom.find("</kafka.version>")]


KAFKA_LABEL = _kafka_label()
LOAD_CPU = "1"


def pin(cpu: str) -> list[str]:
    """A `taskset` prefix when the machine has it and the CPU exists."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > int(cpu):
        return ["taskset", "-c", cpu]
    return []


def pin_self(cpu: str) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > int(cpu):
        os.sched_setaffinity(0, {int(cpu)})


@dataclass
class Target:
    name: str
    host: str
    port: int
    """Where the load goes (the SASL_SSL listener of a secured target)."""
    security: Security | None = None
    setup_port: int = 0
    """A PLAINTEXT listener for setting up (creating topics); 0: `port`."""
    pid: int | None = None
    """The server's process (for its CPU time)."""

    @property
    def admin_port(self) -> int:
        return self.setup_port or self.port


PASSWORD = "bench-password"


def secured(directory: Path) -> tuple[Security, Path, Path]:
    """A CA, a server certificate for loopback and the bench's SCRAM user: (what clients
    use, the server's certificate, its key)."""
    from tests.pki import Pki

    pki = Pki(directory / "pki")
    server = pki.issue_server()
    return Security(pki.ca, "bench", PASSWORD), server.cert, server.key


START_S = 90
"""How long a server (a coordinator, a replica) may take to listen."""


@contextlib.contextmanager
def kgroups_coordinator(*extra: str, secure: bool = False) -> Iterator[Target]:
    """The coordinator pinned to SERVER_CPU; `secure`: its load on a SASL_SSL listener
    (TLS, SCRAM-SHA-512), beside a PLAINTEXT one for setting up."""
    with tempfile.TemporaryDirectory(prefix="kgroups-bench-") as tmp:
        port_file = Path(tmp) / "port"
        listen = ["--listen", "127.0.0.1:0"]
        security = None
        if secure:
            security, cert, key = secured(Path(tmp))
            (Path(tmp) / "users.yaml").write_text(
                f"users:\n  {security.user}:\n    password: {security.password}\n"
            )
            listen = ["--listen", "PLAINTEXT://127.0.0.1:0", "--listen", "SASL_SSL://127.0.0.1:0",
                      "--tls-cert", str(cert), "--tls-key", str(key),
                      "--sasl-mechanisms", "SCRAM-SHA-512",
                      "--credentials", f"{tmp}/users.yaml"]  # fmt: skip
        cmd = [
            *pin(SERVER_CPU), sys.executable, "-m", "kgroups", "coordinator", *listen,
            "--data-dir", f"{tmp}/data", "--port-file", str(port_file),
            "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "1000",
            "--log-level", "WARNING", *extra,
        ]  # fmt: skip
        log = (Path(tmp) / "log").open("wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            # make test's other workers may keep a pinned server from starting for long.
            deadline = time.monotonic() + START_S
            while not port_file.exists():
                code = proc.poll()
                if code is not None or time.monotonic() > deadline:
                    why = f"exited with {code}" if code is not None else f"not up in {START_S} s"
                    log_text = (Path(tmp) / "log").read_text()
                    raise RuntimeError(f"the coordinator {why}; its log:\n{log_text}")
                time.sleep(0.05)
            first, *more = port_file.read_text().split("\n")
            ports = dict(line.split() for line in more if line.strip())
            if security is None:
                yield Target("kgroups", "127.0.0.1", int(first))
            else:
                yield Target("kgroups", "127.0.0.1", int(ports["SASL_SSL"]), security,
                             int(ports["PLAINTEXT"]))  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


@contextlib.contextmanager
def kafka_broker(
    *, secure: bool = False, extra: dict[str, str] | None = None
) -> Iterator[Target | None]:
    """A real Kafka 4.x broker pinned like the coordinator, or None if it cannot run here;
    `secure`: its load on a SASL_SSL listener with SCRAM-SHA-512, as kgroups'; `extra`:
    more server.properties settings."""
    try:
        import kafkapeer  # type: ignore[import-not-found]
    except ImportError:
        yield None
        return
    if os.environ.get("KGROUPS_BENCH_NO_KAFKA"):
        yield None
        return
    try:
        kafkapeer.ensure_kafka()
    except Exception as exc:  # noqa: BLE001 - a missing peer is reported, not fatal
        print(f"(Kafka broker unavailable: {exc})", file=sys.stderr)
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        port = kafkapeer.free_port()
        settings: dict[str, str] = dict(extra or {})
        scram: tuple[str, ...] = ()
        security = None
        secure_port = kafkapeer.free_port()
        if secure:
            security, cert, key = secured(Path(tmp))
            pem = Path(tmp) / "server.pem"
            pem.write_bytes(key.read_bytes() + cert.read_bytes())
            settings.update(kafkapeer.sasl_ssl_settings(port, secure_port, pem))
            scram = (kafkapeer.scram_user(security.user, security.password),)
        broker = kafkapeer.KafkaBroker(
            port, Path(tmp), group_initial_rebalance_delay_ms=0, cpu=SERVER_CPU,
            extra=settings, scram=scram,
        )  # fmt: skip
        with broker:
            pid = broker.proc.pid if broker.proc is not None else None
            if security is None:
                yield Target("kafka", "127.0.0.1", port, pid=pid)
            else:
                yield Target("kafka", "127.0.0.1", secure_port, security, port, pid=pid)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]
