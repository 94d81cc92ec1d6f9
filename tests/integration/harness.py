"""Processes for integration tests: the real coordinator and real Kafka client members.

Everything binds to 127.0.0.1, every wait is bounded, and every process started is
stopped by the fixture that started it (SIGKILL as a last resort).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests import waits

ROOT = Path(__file__).resolve().parents[2]
MEMBER_SCRIPT = Path(__file__).with_name("member.py")
PYTHON = sys.executable
sys.path.insert(0, str(ROOT / "tools"))


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


wait_until = waits.wait_until
"""Poll a predicate until it returns something truthy (`tests/waits.py`: the bound is
scaled by KGROUPS_TEST_SLOWNESS)."""


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` within `within` s (reading nothing from it)."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class Coordinator:
    """`kgroups coordinator` as a subprocess, on loopback ports, with a data dir.

    `listeners` are security protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); each
    keeps its port across restarts. `port` and `bootstrap` are the first listener's."""

    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        listeners: Iterable[str] = ("PLAINTEXT",),
        address_space: int | None = None,
    ) -> None:
        """`address_space`: an RLIMIT_AS for the process, in bytes (an allocation past it
        fails, as it would on a host without overcommit)."""
        self.address_space = address_space
        self.data_dir = data_dir
        self.extra = list(extra)
        self.protocols = list(listeners)
        self.ports: dict[str, int] = dict.fromkeys(self.protocols, 0)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.starts = 0

    @property
    def port(self) -> int:
        return self.ports[self.protocols[0]]

    @port.setter
    def port(self, value: int) -> None:
        self.ports[self.protocols[0]] = value

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"

    def start(self) -> None:
        port_file = self.data_dir.parent / f"{self.data_dir.name}.port"
        port_file.unlink(missing_ok=True)
        listen = [a for p in self.protocols
                  for a in ("--listen", f"{p}://127.0.0.1:{self.ports[p]}")]  # fmt: skip
        cmd = [
            PYTHON, "-m", "kgroups", "coordinator", *listen,
            "--data-dir", str(self.data_dir),
            "--port-file", str(port_file),
            *self.extra,
        ]  # fmt: skip
        log = self.log_path.open("ab")
        limit = self.address_space

        def limited() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            preexec_fn=limited if limit is not None else None,  # noqa: PLW1509  (only setrlimit)
        )  # fmt: skip
        log.close()
        self.starts += 1

        def bound() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"coordinator exited early:\n{self.log()}")
            return port_file.exists()

        # Usually under a second; beside make test's busiest minute (the kind node's images
        # being loaded) once over 20 s. The bound is for a coordinator that never listens.
        try:
            wait_until(bound, 60, "the coordinator to listen")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its log:\n{self.log()[-3000:]}") from None
        first, *more = port_file.read_text().splitlines()
        self.port = int(first)
        for line in more:
            name, port = line.split()
            self.ports[name] = int(port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to flush or close anything."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self, *, hard: bool = False) -> None:
        if hard:
            self.kill()
        else:
            assert self.stop() == 0, self.log()
        self.start()


GO_CLIENTS = ("franz-go", "sarama")
"""Go group consumers built from the Go module proxy (tools/peers/go)."""
KCAT_MEMBER = Path(__file__).with_name("kcat_member.py")


@functools.cache
def go_peers() -> Path:
    """The directory of the Go peers' binaries, built (once, cached) by tools/peers/go."""
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "peers" / "go" / "build.sh")],
        check=True, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    return Path(out.stdout.strip().splitlines()[-1])


def java_security_args(env: dict[str, str]) -> list[str]:
    """KGROUPS_* security settings as the Java consumer's own properties (a PEM
    truststore, and JAAS for PLAIN and SCRAM), for tools/kafka/JavaMember.java."""
    props: dict[str, str] = {}
    protocol = env.get("KGROUPS_SECURITY_PROTOCOL", "PLAINTEXT")
    props["security.protocol"] = protocol
    if env.get("KGROUPS_SSL_CA_FILE"):
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = env["KGROUPS_SSL_CA_FILE"]
    mechanism = env.get("KGROUPS_SASL_MECHANISM")
    if mechanism == "OAUTHBEARER":  # Kafka's file-based token retriever, re-read at refresh
        props["sasl.mechanism"] = mechanism
        props["sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;"
        )
        props["sasl.login.callback.handler.class"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        )
        props["sasl.oauthbearer.token.endpoint.url"] = java_token_url(env)
    elif mechanism:
        password = env.get("KGROUPS_SASL_PASSWORD")
        if password is None:
            password = Path(env["KGROUPS_SASL_PASSWORD_FILE"]).read_text().rstrip("\n")
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")  # fmt: skip
        props["sasl.mechanism"] = mechanism
        props["sasl.jaas.config"] = (f'{module} required username="{env["KGROUPS_SASL_USERNAME"]}" '
                                     f'password="{password}";')  # fmt: skip
    return [a for k, v in props.items() for a in (f"--prop.{k}", v)]


def java_token_url(env: dict[str, str]) -> str:
    return Path(env["KGROUPS_SASL_TOKEN_FILE"]).resolve().as_uri()


def java_environment(env: dict[str, str]) -> dict[str, str]:
    """A Kafka 4 client reads a token URL only if a system property allows it."""
    if env.get("KGROUPS_SASL_MECHANISM") != "OAUTHBEARER":
        return env
    allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={java_token_url(env)}"
    return {**env, "JAVA_TOOL_OPTIONS": allowed}


def member_command(client: str, args: list[str]) -> list[str]:
    """The command that runs `client` as a member speaking member.py's protocol (its
    arguments, its JSON events on stdout, `commit N` and `close` on stdin)."""
    if client == "java":
        import kafkapeer  # tools/kafkapeer.py: the Java client from Maven Central

        return kafkapeer.java_member_cmd(*args)
    if client in GO_CLIENTS:
        return [str(go_peers() / f"{client}-member"), *args]
    if client == "kcat":
        return [PYTHON, str(KCAT_MEMBER), *args]
    return [PYTHON, str(MEMBER_SCRIPT), "--client", client, *args]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) used so far by `pid` and every live descendant of it."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += used.get(current, 0.0)
        todo.extend(children.get(current, []))
    return total


STATIC_SESSION_MS = 20_000
"""The session of a static member a test kills and starts again under the same instance id:
its replacement (a new process: an interpreter, a JVM) must rejoin before the coordinator
expires the old one, and on a loaded machine that once took more than 4 s (KIP-345 expects
static members to run with long sessions for the same reason)."""


class Member:
    """tests/integration/member.py as a subprocess; collects the events it prints."""

    def __init__(self, client: str, bootstrap: str, group: str, topics: Iterable[str], *,
                 client_id: str, strategy: str = "range", instance_id: str | None = None,
                 session_timeout_ms: int = 4000,
                 metadata_max_age_ms: int | None = None,
                 env: dict[str, str] | None = None,
                 extra: Iterable[str] = ()) -> None:  # fmt: skip
        """`env`: more environment, e.g. KGROUPS_* security settings (member.py maps them
        to each client library's own); `extra`: more arguments for the member (e.g. the
        Java member's `--group-protocol consumer`)."""
        self.name = client_id
        args = [
            "--bootstrap", bootstrap, "--group", group, "--topics", ",".join(topics),
            "--client-id", client_id, "--strategy", strategy,
            "--session-timeout-ms", str(session_timeout_ms),
        ]  # fmt: skip
        if metadata_max_age_ms is not None:
            args += ["--metadata-max-age-ms", str(metadata_max_age_ms)]
        if instance_id is not None:
            args += ["--instance-id", instance_id]
        args += list(extra)
        if client == "java" and env:
            args += java_security_args(env)
            env = java_environment(env)
        cmd = member_command(client, args)
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._new: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"{client_id}-out", daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_err, name=f"{client_id}-err", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.events.append(event)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    @property
    def assignment(self) -> dict[str, Any] | None:
        """The last assignment this member reported (None before its first)."""
        for event in reversed(self.events):
            if event["event"] == "assigned":
                return event
        return None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\n".encode())
        self.proc.stdin.flush()

    def wait_event(self, name: str, after: int = 0, timeout: float = 20) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for event in self.events[after:]:
                if event["event"] == name:
                    return event
            return None

        try:
            event: dict[str, Any] = wait_until(found, timeout, f"{self.name}: {name}")
        except AssertionError:
            raise AssertionError(
                f"{self.name} never reported {name}; events={self.events}\n"
                f"stderr tail:\n{''.join(self.stderr[-30:])}"
            ) from None
        return event

    def close(self, timeout: float = 20) -> None:
        """Ask the client to close (it sends LeaveGroup), wait for it to exit and for
        everything it printed to be read (a loaded machine may run the reader late)."""
        if self.proc.poll() is None:
            self.send("close")
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup; the coordinator must notice by session timeout."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """CPU used so far by this member's process and its children (kcat's wrapper)."""
        return cpu_seconds(self.proc.pid)


class SidecarProcess:
    """`kgroups sidecar` as a subprocess with an assignment file and local HTTP (whose
    address it prints on its first line)."""

    def __init__(self, coordinator: Coordinator, name: str, strategy: str, tmp: Path,
                 timeouts: tuple[str, ...] = ("--session-timeout-ms", "4000",
                                              "--heartbeat-interval-ms", "300",
                                              "--rebalance-timeout-ms", "15000"),
                 *, group: str = "apps", topics: str = "jobs", extra: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.name = name
        self.file = tmp / f"{name}.json"
        self.proc = subprocess.Popen(
            [
                PYTHON, "-m", "kgroups", "sidecar", "--bootstrap", coordinator.bootstrap,
                "--group", group, "--topics", topics, "--strategy", strategy,
                "--assignment-file", str(self.file), "--http", "127.0.0.1:0", *timeouts, *extra,
            ],
            stdout=subprocess.PIPE, stderr=(tmp / f"{name}.log").open("ab"), cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.address: str = json.loads(line)["http"]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def converged(members: Iterable[Member], partitions: set[tuple[str, int]]) -> int | None:
    """The generation if every member reports the same one and together they cover
    `partitions` exactly once; None otherwise."""
    reports = [m.assignment for m in members]
    if any(r is None for r in reports):
        return None
    generations = {r["generation"] for r in reports if r is not None}
    if len(generations) != 1:
        return None
    owned = [tuple(p) for r in reports if r is not None for p in r["partitions"]]
    if len(owned) != len(set(owned)) or set(owned) != partitions:
        return None
    return generations.pop()


def no_overlap_per_generation(members: Iterable[Member]) -> None:
    """Across everything ever reported: no partition owned twice in one generation.

    Owners are processes by name: a static member restarted under the same name is the
    same owner (its predecessor is dead and fenced), anything else is a violation.
    """
    owners: dict[tuple[int, tuple[str, int]], str] = {}
    for m in members:
        for event in m.events:
            if event["event"] != "assigned":
                continue
            for p in event["partitions"]:
                key = (event["generation"], (p[0], p[1]))
                other = owners.setdefault(key, m.name)
                assert other == m.name, (
                    f"partition {p} assigned to {other} and {m.name} "
                    f"in generation {event['generation']}"
                )


def assert_idle(members: Iterable[Member], seconds: float = 5.0, limit: float = 0.25) -> None:
    """Members with nothing to do use no measurable CPU: under `limit` CPU seconds each
    over `seconds` of wall time (a spinning client uses a whole core)."""
    live = [m for m in members if m.alive]
    before = {m.name: m.cpu_seconds() for m in live}
    time.sleep(seconds)
    used = {m.name: round(m.cpu_seconds() - before[m.name], 3) for m in live}
    busy = {name: cpu for name, cpu in used.items() if cpu >= limit}
    assert not busy, f"idle members used CPU over {seconds}s: {busy} (all: {used})"


def create_topic(coordinator: Coordinator, name: str, partitions: int) -> set[tuple[str, int]]:
    """Create `name` on the coordinator; returns its (topic, partition) pairs."""
    import asyncio

    from kgroups import admin

    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, name, partitions))
    return {(name, p) for p in range(partitions)}


def wait_converged(members: list[Member], partitions: set[tuple[str, int]], timeout: float,
                   after: int = 0) -> int:  # fmt: skip
    """Wait until `members` cover `partitions` exactly once in one generation later than
    `after`; return it. (A member that left or died is replaced by a new generation: a
    wait that accepted the old one could pass on reports written before the change.)"""

    def newer() -> int | None:
        generation = converged(members, partitions)
        return generation if generation is not None and generation > after else None

    try:
        generation: int = wait_until(
            newer, timeout,
            f"{[m.name for m in members]} to cover {len(partitions)} partitions in one "
            f"generation after {after}",
        )  # fmt: skip
    except AssertionError as exc:
        # What each member said last, read now (not when the wait began).
        said = "".join(f"\n{m.name}: {m.assignment}; stderr: {''.join(m.stderr[-15:])[-1500:]}"
                       for m in members)  # fmt: skip
        raise AssertionError(f"{exc}{said}") from None
    return generation


def refused_while_polling(consumer: Any, error: type[BaseException] | tuple[type[BaseException], ...],
                          seconds: float = 4) -> None:  # fmt: skip
    """A kafka-python consumer's poll raises `error` (how it reports an authorization
    refusal), over and over for `seconds`, and no assignment ever arrives."""
    deadline, raised = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        try:
            consumer.poll(timeout_ms=200)
        except error:
            raised += 1
        assert not consumer.assignment()
    assert raised, f"{error} never raised"


def keeps_assignment(consumer: Any, seconds: float) -> None:
    """A kafka-python consumer, polled for `seconds`, keeps the assignment and the
    generation it has now: held over time, not caught once."""
    tps, generation = consumer.assignment(), consumer._coordinator._generation.generation_id
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.poll(timeout_ms=200)
        assert consumer.assignment() == tps
    assert consumer._coordinator._generation.generation_id == generation


def polled_assignment(consumer: Any, timeout: float = 20) -> Any:
    """Poll a kafka-python consumer until it has an assignment; return it."""

    def poll() -> Any:
        consumer.poll(timeout_ms=200)
        return consumer.assignment() or None

    return wait_until(poll, timeout, "an assignment", poll=0)


def consumer_protocol_member_passes(coordinator: Coordinator, group: str, topic: str) -> None:
    """A consumer of Kafka 4's protocol (KIP-848) joins `group` on `topic` and leaves: a
    raw ConsumerGroupHeartbeat exchange, far lighter than a JVM, for tests that need a
    consumer-protocol group to exist (and its metrics to have series)."""
    import uuid

    from kio.schema.consumer_group_heartbeat.v1 import request as hb_req
    from kio.schema.consumer_group_heartbeat.v1 import response as hb_resp

    from kgroups.admin import Admin
    from kgroups.protocol.build import build

    member = str(uuid.uuid4())

    async def go() -> None:
        async with Admin("127.0.0.1", coordinator.port) as client:
            join = build(hb_req.ConsumerGroupHeartbeatRequest, {
                "group_id": group, "member_id": member, "member_epoch": 0,
                "rebalance_timeout": 30_000, "subscribed_topic_names": [topic],
                "topic_partitions": [],
            })  # fmt: skip
            joined = await client.request(join, hb_resp.ConsumerGroupHeartbeatResponse)
            assert int(joined.error_code) == 0 and joined.assignment is not None, joined
            leave = build(hb_req.ConsumerGroupHeartbeatRequest, {
                "group_id": group, "member_id": member, "member_epoch": -1,
                "topic_partitions": None,
            })  # fmt: skip
            left = await client.request(leave, hb_resp.ConsumerGroupHeartbeatResponse)
            assert int(left.error_code) == 0, left

    asyncio.run(go())


def commit_is_read_back(member: Member, bootstrap: str, group: str, offset: int) -> None:
    """`member` commits `offset` on what it holds; another client (kafka-python) reads
    each of those offsets back: they really are the group's."""
    from kafka import KafkaConsumer, TopicPartition

    member.send(f"commit {offset}")
    committed = member.wait_event("committed")
    assert committed["partitions"], committed
    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        for t, p in committed["partitions"]:
            assert reader.committed(TopicPartition(t, p)) == offset
    finally:
        reader.close()
