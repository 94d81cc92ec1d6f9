"""No input from one client can crash the coordinator or disturb its other clients.

Raw bytes go over plain blocking sockets (every one with a timeout, every one closed);
semantic nonsense goes through `KafkaConnection` with real kio requests. Every test that
attacks a connection keeps a second, healthy connection open and checks that it is served
before and after. Most tests share one coordinator process for the whole module, and its
fixture checks, when the last of them is done (in whatever order they ran), that it
survived all of them without a single traceback.

The behaviours are Kafka's: a request larger than `socket.request.max.bytes` or one that
does not decode closes that connection (and only that one), and so does an API or version we
do not serve (Kafka closes the connection of a request "which is not enabled"); ApiVersions with a
version we do not know is answered in v0 with the table (KIP-511); group semantics errors
come back as Kafka's error codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v0 import response as av0_response
from kio.schema.api_versions.v3 import request as av3
from kio.schema.api_versions.v3 import response as av3_response
from kio.schema.create_topics.v7 import request as ct
from kio.schema.heartbeat.v4 import request as hb
from kio.schema.heartbeat.v4 import response as hb_response
from kio.schema.join_group.v3 import request as jg3
from kio.schema.join_group.v5 import request as jg5
from kio.schema.join_group.v9 import request as jg9
from kio.schema.join_group.v9 import response as jg9_response
from kio.schema.leave_group.v5 import request as lg
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12 import response as md_response
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_fetch.v8 import request as of
from kio.schema.sync_group.v5 import request as sg

from kgroups import admin
from kgroups.protocol.apis import SUPPORTED, ApiKey, request_class
from kgroups.protocol.build import build
from kgroups.protocol.client import KafkaConnection, encode_request
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.tags import reader_for, write_uvarint
from tests.integration.conftest import FAST
from tests.integration.harness import Coordinator, wait_until

E = ErrorCode
HOST = "127.0.0.1"
SIZE = struct.Struct(">i")
IO_TIMEOUT = 5.0
CLOSE_WITHIN = 2.0
"""A connection we expect the server to drop must be dropped this promptly."""
MAX_RESPONSE = 16 * 1024 * 1024

API_VERSIONS_V3 = build(
    av3.ApiVersionsRequest,
    {"client_software_name": "kgroups-bad-input", "client_software_version": "1.0"},
)
METADATA_ALL = build(md.MetadataRequest, {"topics": None})


# -- raw bytes ----------------------------------------------------------------------------


def request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: bytes = b"bad-input",
    *,
    flexible: bool = False,
) -> bytes:
    """Request header v1 (or v2 when `flexible`: an empty tagged-fields section)."""
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id))
    return header + client_id + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload


_SOURCES = itertools.count(1)


def open_socket(port: int) -> socket.socket:
    """A connection from a loopback address of its own (127.1.x.y): the coordinator
    budgets the lines it logs about bad frames per client address, and these tests,
    hundreds of bad frames a second, each look for their own line."""
    n = next(_SOURCES)
    source = f"127.1.{n // 250 % 250}.{n % 250 + 1}"
    sock = socket.create_connection((HOST, port), timeout=IO_TIMEOUT, source_address=(source, 0))
    sock.settimeout(IO_TIMEOUT)
    return sock


def local_peer(sock: socket.socket) -> str:
    """How the coordinator names this connection in its log."""
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    """One response frame's payload (the bytes after the size prefix)."""
    (size,) = SIZE.unpack(recv_exactly(sock, 4))
    assert 0 <= size <= MAX_RESPONSE, f"absurd response size {size}"
    return recv_exactly(sock, size)


def correlation_id_of(payload: bytes) -> int:
    return int.from_bytes(payload[:4], "big", signed=True)


def assert_closed(sock: socket.socket, within: float = CLOSE_WITHIN) -> None:
    """The server closed this connection (FIN or RST), promptly, answering nothing."""
    sock.settimeout(within)
    start = time.monotonic()
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        data = b""
    except TimeoutError:
        raise AssertionError(f"connection still open after {within}s") from None
    finally:
        sock.settimeout(IO_TIMEOUT)
    assert data == b"", f"expected the connection closed, got {data[:64]!r}"
    assert time.monotonic() - start < within


def closed_or_answered(sock: socket.socket, correlation_id: int) -> bytes | None:
    """None if the server closed the connection, else the answer (checked to be ours)."""
    try:
        (size,) = SIZE.unpack(recv_exactly(sock, 4))
    except (AssertionError, ConnectionResetError):
        return None
    payload = recv_exactly(sock, size)
    assert correlation_id_of(payload) == correlation_id
    return payload


def wait_for_log(coord: Coordinator, text: str) -> None:
    wait_until(lambda: text in coord.log(), 5, f"{text!r} in the coordinator log")


def rss_mib(coord: Coordinator) -> float:
    """Resident memory of the coordinator process (Linux /proc)."""
    assert coord.proc is not None
    for line in Path(f"/proc/{coord.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc status")


def api_versions_round_trip(sock: socket.socket, correlation_id: int) -> Any:
    sock.sendall(encode_request(API_VERSIONS_V3, correlation_id))
    payload = read_frame(sock)
    assert correlation_id_of(payload) == correlation_id
    # ApiVersions keeps response header v0 (no tagged fields) even in flexible versions.
    body, _ = reader_for(av3_response.ApiVersionsResponse)(memoryview(payload), 4)
    assert body.error_code is E.none
    return body


def metadata_round_trip(sock: socket.socket, correlation_id: int) -> Any:
    sock.sendall(encode_request(METADATA_ALL, correlation_id))
    payload = read_frame(sock)
    assert correlation_id_of(payload) == correlation_id
    body, _ = reader_for(md_response.MetadataResponse)(memoryview(payload), 5)
    assert body.brokers[0].node_id == 0
    return body


class Healthy:
    """A well-behaved client on its own connection, opened before the trouble starts."""

    def __init__(self, port: int) -> None:
        self.sock = open_socket(port)
        self.correlation_id = 0

    def check(self) -> None:
        """Two requests answered in order on the same connection, promptly."""
        start = time.monotonic()
        self.correlation_id += 1
        api_versions_round_trip(self.sock, self.correlation_id)
        self.correlation_id += 1
        metadata_round_trip(self.sock, self.correlation_id)
        assert time.monotonic() - start < 2.0

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def healthy_client(port: int) -> Iterator[Healthy]:
    client = Healthy(port)
    try:
        client.check()
        yield client
        client.check()
    finally:
        client.close()


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    """One coordinator for the whole module: it must survive every test in it, still serve
    a healthy client after the last one and have logged no traceback."""
    coord = Coordinator(tmp_path_factory.mktemp("bad-input") / "data", *FAST)
    coord.start()
    try:
        yield coord
        assert coord.proc is not None
        assert coord.proc.poll() is None, coord.log()
        with healthy_client(coord.port) as client:
            client.check()
        assert "Traceback" not in coord.log(), coord.log()
    finally:
        coord.kill()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinator]:
    """A coordinator with a 1 KiB `socket.request.max.bytes`."""
    coord = Coordinator(
        tmp_path_factory.mktemp("capped") / "data", "--max-frame-bytes", "1024", *FAST
    )
    coord.start()
    yield coord
    coord.kill()


@pytest.fixture
def healthy(shared: Coordinator) -> Iterator[Healthy]:
    """A healthy connection to `shared`, checked when opened and again at teardown."""
    with healthy_client(shared.port) as client:
        yield client


# -- 1. the size cap ---------------------------------------------------------------------


def test_a_frame_over_socket_request_max_bytes_closes_only_that_connection(
    capped: Coordinator,
) -> None:
    with healthy_client(capped.port) as healthy:
        # Exactly at the cap is allowed (Kafka refuses only size > max): Metadata v0
        # whose client id pads the payload to 1024 bytes.
        at_cap = open_socket(capped.port)
        try:
            payload = request_header(ApiKey.METADATA, 0, 41, b"x" * 1010) + SIZE.pack(0)
            assert len(payload) == 1024
            at_cap.sendall(frame(payload))
            assert correlation_id_of(read_frame(at_cap)) == 41
        finally:
            at_cap.close()

        over = open_socket(capped.port)
        try:
            peer = local_peer(over)
            over.sendall(SIZE.pack(1025) + request_header(ApiKey.METADATA, 0, 42) + b"\x00" * 64)
            assert_closed(over)
        finally:
            over.close()
        wait_for_log(capped, f"closing connection from {peer}: frame size 1025 outside 0..1024")
        healthy.check()


# -- 2. absurd length prefixes -----------------------------------------------------------


@pytest.mark.parametrize(
    "size",
    [0x7FFFFFFF, 100 * 1024 * 1024 + 1, -1, -(2**31)],
    ids=["int32-max", "just-over-100MiB", "minus-one", "int32-min"],
)
def test_an_absurd_length_prefix_closes_the_connection_at_once_without_buffering(
    shared: Coordinator, healthy: Healthy, size: int
) -> None:
    before = rss_mib(shared)
    sock = open_socket(shared.port)
    try:
        peer = local_peer(sock)
        # The prefix and a few bytes only: a server that waited for 2 GiB would hang here.
        sock.sendall(SIZE.pack(size) + b"\x00\x12\x00\x00")
        assert_closed(sock)
    finally:
        sock.close()
    wait_for_log(shared, f"closing connection from {peer}: frame size {size} outside")
    healthy.check()
    assert rss_mib(shared) - before < 32, "the coordinator buffered for an absurd frame"


# -- 3. truncated frames -----------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [
        SIZE.pack(100) + request_header(ApiKey.HEARTBEAT, 3, 7),
        SIZE.pack(100),
        b"\x00\x00",
    ],
    ids=["part-of-the-payload", "size-prefix-only", "half-a-size-prefix"],
)
@pytest.mark.parametrize("how", ["shutdown-write-side", "close"])
def test_a_truncated_frame_then_disconnect_leaves_the_server_healthy(
    shared: Coordinator, healthy: Healthy, sent: bytes, how: str
) -> None:
    sock = open_socket(shared.port)
    try:
        sock.sendall(sent)
        healthy.check()  # an unfinished frame on one connection blocks nobody
        if how == "close":
            sock.close()
        else:
            sock.shutdown(socket.SHUT_WR)
            assert_closed(sock)  # EOF mid-frame: the server hangs up, answering nothing
    finally:
        sock.close()
    healthy.check()


def test_a_frame_trickling_in_byte_by_byte_is_still_answered(
    shared: Coordinator, healthy: Healthy
) -> None:
    data = encode_request(API_VERSIONS_V3, 77)
    sock = open_socket(shared.port)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one segment per byte
        for i in range(len(data)):
            sock.sendall(data[i : i + 1])
            if i % 8 == 0:
                time.sleep(0.005)
                if i == 32:
                    healthy.check()
        payload = read_frame(sock)
        assert correlation_id_of(payload) == 77
    finally:
        sock.close()


# -- 4. garbage --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(16))
def test_a_random_payload_is_answered_or_closed(
    shared: Coordinator, healthy: Healthy, seed: int
) -> None:
    rng = random.Random(seed)
    payload = rng.randbytes(rng.randint(8, 300))
    key, version, correlation_id = struct.unpack_from(">hhi", payload)
    spec = SUPPORTED.get(key)
    sock = open_socket(shared.port)
    try:
        sock.sendall(frame(payload))
        if spec is None or (key != ApiKey.API_VERSIONS and not spec.supports(version)):
            assert_closed(sock)
        else:
            closed_or_answered(sock, correlation_id)
    finally:
        sock.close()
    healthy.check()


# Requests that are answered at once (nothing here parks a request or creates topics).
GARBAGE_BEHIND_A_VALID_HEADER = [
    (ApiKey.HEARTBEAT, 3),
    (ApiKey.HEARTBEAT, 4),
    (ApiKey.METADATA, 12),
    (ApiKey.OFFSET_FETCH, 8),
    (ApiKey.DESCRIBE_GROUPS, 5),
    (ApiKey.FIND_COORDINATOR, 4),
    (ApiKey.OFFSET_COMMIT, 8),
    (ApiKey.LEAVE_GROUP, 4),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("key", "version"), GARBAGE_BEHIND_A_VALID_HEADER)
def test_a_random_body_behind_a_valid_header_is_answered_or_closed(
    shared: Coordinator, healthy: Healthy, key: int, version: int, seed: int
) -> None:
    rng = random.Random(f"{key}/{version}/{seed}")
    flexible = bool(request_class(key, version).__flexible__)  # type: ignore[attr-defined]
    payload = request_header(key, version, 1000 + seed, flexible=flexible)
    payload += rng.randbytes(rng.randint(0, 200))
    sock = open_socket(shared.port)
    try:
        sock.sendall(frame(payload))
        closed_or_answered(sock, 1000 + seed)
    finally:
        sock.close()
    healthy.check()


@pytest.mark.parametrize("size", [0, 1, 4, 7])
def test_a_frame_too_short_for_a_request_header_closes_the_connection(
    shared: Coordinator, healthy: Healthy, size: int
) -> None:
    sock = open_socket(shared.port)
    try:
        peer = local_peer(sock)
        sock.sendall(frame(b"\x00\x12\x00\x03\x00\x00\x00"[:size]))
        assert_closed(sock)
    finally:
        sock.close()
    wait_for_log(shared, f"closing connection from {peer}: frame of {size} bytes is too short")
    healthy.check()


# -- 5. unknown APIs and versions ----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "version"),
    [
        (999, 0),
        (-1, 0),
        (ApiKey.JOIN_GROUP, 99),
        (ApiKey.OFFSET_COMMIT, 0),  # removed in Kafka 4 (KIP-896)
        (ApiKey.OFFSET_COMMIT, 1),
        (ApiKey.HEARTBEAT, -1),
        (ApiKey.METADATA, 32767),
    ],
    ids=[
        "api-999",
        "api-minus-1",
        "join_group-v99",
        "offset_commit-v0",
        "offset_commit-v1",
        "heartbeat-v-1",
        "metadata-v32767",
    ],
)
def test_an_unknown_api_or_version_closes_that_connection_only(
    shared: Coordinator, healthy: Healthy, key: int, version: int
) -> None:
    sock = open_socket(shared.port)
    try:
        api_versions_round_trip(sock, 123455)
        # A plausible body behind the header: the server must not try to decode it.
        sock.sendall(frame(request_header(key, version, 123456) + b"\x00\x01g\xff\xff\xff\xff"))
        assert_closed(sock)
    finally:
        sock.close()
    healthy.check()
    # Logged, not hidden (within the per-address log budget).
    wait_until(lambda: "closing connection from" in shared.log(), 5, "the close logged")


def test_an_unsupported_request_pipelined_behind_valid_ones_closes_after_their_answers(
    shared: Coordinator, healthy: Healthy
) -> None:
    sock = open_socket(shared.port)
    try:
        sock.sendall(
            encode_request(API_VERSIONS_V3, 1)
            + encode_request(METADATA_ALL, 2)
            + frame(request_header(ApiKey.JOIN_GROUP, 99, 3, flexible=True))
            + encode_request(METADATA_ALL, 4)
        )
        answers = [read_frame(sock) for _ in range(2)]
        assert [correlation_id_of(a) for a in answers] == [1, 2]
        assert_closed(sock)  # nothing after the unsupported request is answered
    finally:
        sock.close()
    healthy.check()


# -- 6. ApiVersions from the future ---------------------------------------------------------


@pytest.mark.parametrize("version", [5, 99, 32767, -1])
def test_api_versions_newer_than_supported_answers_v0_with_the_table(
    shared: Coordinator, healthy: Healthy, version: int
) -> None:
    sock = open_socket(shared.port)
    try:
        # A newer client sends header v2 and a body we cannot know: both must be ignored.
        header = request_header(ApiKey.API_VERSIONS, version, 9001, flexible=True)
        sock.sendall(frame(header + b"\x05future\x02x\x00\x07\x07\x07"))
        payload = read_frame(sock)
        assert correlation_id_of(payload) == 9001
        body, size = reader_for(av0_response.ApiVersionsResponse)(memoryview(payload), 4)
        assert 4 + size == len(payload)  # exactly v0: no v1+ fields follow the table
        assert body.error_code is E.unsupported_version
        table = {int(a.api_key): (a.min_version, a.max_version) for a in body.api_keys}
        assert table == {k: (s.min_version, s.max_version) for k, s in SUPPORTED.items()}
        # KIP-511: the client retries with the highest version both sides know.
        assert table[ApiKey.API_VERSIONS] == (0, 4)
        retried = api_versions_round_trip(sock, 9002)
        assert {int(a.api_key) for a in retried.api_keys} == set(SUPPORTED)
    finally:
        sock.close()
    healthy.check()


# -- 7. bodies that do not decode --------------------------------------------------------


def _join_v5_payload() -> bytes:
    body = build(
        jg5.JoinGroupRequest,
        {
            "group_id": "cut-short",
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
        },
    )
    return encode_request(body, 55)[4:]


JOIN_V5 = _join_v5_payload()
JOIN_V9_HEADER = request_header(ApiKey.JOIN_GROUP, 9, 55, flexible=True)
UNDECODABLE: dict[str, tuple[bytes, str]] = {
    "join-v5-cut-in-the-middle": (JOIN_V5[: len(JOIN_V5) // 2], "cannot decode join_group v5"),
    "join-v5-missing-its-last-byte": (JOIN_V5[:-1], "cannot decode join_group v5"),
    "join-v5-group-id-length-past-the-end": (
        request_header(ApiKey.JOIN_GROUP, 5, 55) + b"\x7f\xffg",
        "cannot decode join_group v5",
    ),
    "join-v5-negative-protocol-count": (
        JOIN_V5[: JOIN_V5.index(b"\x00\x00\x00\x01\x00\x05range")] + b"\xff\xff\xff\xfe",
        "cannot decode join_group v5",
    ),
    "join-v9-compact-string-past-the-end": (
        JOIN_V9_HEADER + b"\xc8\x01g",  # length 199, one byte present
        "cannot decode join_group v9",
    ),
    "join-v9-unterminated-varint": (JOIN_V9_HEADER + b"\xff" * 6, "cannot decode join_group v9"),
    "heartbeat-v3-group-id-not-utf8": (
        request_header(ApiKey.HEARTBEAT, 3, 55)
        + b"\x00\x02\xff\xfe\x00\x00\x00\x01\x00\x01m\xff\xff",
        "cannot decode heartbeat v3",
    ),
    "client-id-past-the-frame": (
        struct.pack(">hhih", ApiKey.HEARTBEAT, 3, 55, 500) + b"abc",
        "client id runs past the frame",
    ),
    "header-tagged-fields-past-the-frame": (
        request_header(ApiKey.HEARTBEAT, 4, 55) + b"\x03\x00\x40",
        "tagged field runs past the frame",
    ),
}


@pytest.mark.parametrize(("payload", "reason"), list(UNDECODABLE.values()), ids=list(UNDECODABLE))
def test_a_well_framed_request_whose_body_does_not_decode_closes_the_connection(
    shared: Coordinator, healthy: Healthy, payload: bytes, reason: str
) -> None:
    sock = open_socket(shared.port)
    try:
        peer = local_peer(sock)
        sock.sendall(frame(payload))
        assert_closed(sock)
    finally:
        sock.close()
    wait_for_log(shared, f"closing connection from {peer}: {reason}")
    healthy.check()


def test_unknown_tagged_fields_from_a_newer_client_are_skipped_not_fatal(
    shared: Coordinator, healthy: Healthy
) -> None:
    """KIP-482: a reader skips tags it does not know, in the header and in the body."""
    body = build(
        jg9.JoinGroupRequest,
        {"group_id": "tagged", "session_timeout": 6000, "rebalance_timeout": 6000,
         "member_id": "", "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": subscription("t")}]},
    )  # fmt: skip
    plain = encode_request(body, correlation_id=71, client_id="newer-client")[4:]
    header_end = struct.calcsize(">hhih") + len(b"newer-client")
    assert plain[header_end] == 0 and plain[-1] == 0  # the two empty tagged-field sections
    unknown = write_uvarint(1) + write_uvarint(9998) + write_uvarint(2) + b"\xab\xcd"
    payload = plain[:header_end] + unknown + plain[header_end + 1 : -1] + unknown
    sock = open_socket(shared.port)
    try:
        sock.sendall(frame(payload))
        answer = read_frame(sock)
    finally:
        sock.close()
    assert correlation_id_of(answer) == 71
    joined = reader_for(jg9_response.JoinGroupResponse)(memoryview(answer), 5)[0]
    assert joined.error_code is E.member_id_required
    assert joined.member_id.startswith("newer-client-")
    healthy.check()


# -- 8. a flood of pipelined requests ------------------------------------------------------


def test_a_flood_of_pipelined_heartbeats_is_answered_in_order_while_others_are_served(
    shared: Coordinator, healthy: Healthy
) -> None:
    count = 10_000  # far more than a connection may queue (MAX_QUEUED_FRAMES = 128)
    body = build(
        hb.HeartbeatRequest, {"group_id": "no-such-group", "generation_id": 1, "member_id": "m"}
    )
    flood = b"".join(encode_request(body, i) for i in range(1, count + 1))
    answers: list[bytes] = []
    failures: list[BaseException] = []
    sock = open_socket(shared.port)

    def send() -> None:
        try:
            sock.sendall(flood)  # all of it in one write
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    def receive() -> None:
        try:
            answers.extend(read_frame(sock) for _ in range(count))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=f, name=f.__name__, daemon=True) for f in (send, receive)]
    try:
        for thread in threads:
            thread.start()
        pings = 0
        while threads[1].is_alive() or pings < 3:
            healthy.check()  # each round trip within 2 s, while the flood is served
            pings += 1
        for thread in threads:
            thread.join(timeout=30)
            assert not thread.is_alive()
    finally:
        sock.close()
    assert not failures, failures
    assert [correlation_id_of(a) for a in answers] == list(range(1, count + 1))
    read = reader_for(hb_response.HeartbeatResponse)
    # Response header v1: the correlation id, then an empty tagged-fields section.
    codes = {read(memoryview(a), 5)[0].error_code for a in answers}
    assert codes == {E.unknown_member_id}


# -- 9. semantic nonsense through a real client ------------------------------------------


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, *partitions: int) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


async def test_group_protocol_misuse_gets_kafkas_error_codes(shared: Coordinator) -> None:
    topic, group = "bad-input-orders", "bad-input-group"
    await admin.create_topic(HOST, shared.port, topic, 2)
    conn = await KafkaConnection.open(HOST, shared.port, client_id="misbehaving")
    try:

        def join(**values: Any) -> Any:
            fields = {
                "group_id": group,
                "session_timeout": 6000,
                "rebalance_timeout": 10_000,
                "member_id": "",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(topic)}],
            }
            return conn.request(build(jg9.JoinGroupRequest, fields | values))

        def sync(member_id: str, generation: int, assignments: list[Any]) -> Any:
            values = {
                "group_id": group,
                "generation_id": generation,
                "member_id": member_id,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": assignments,
            }
            return conn.request(build(sg.SyncGroupRequest, values))

        def heartbeat(member_id: str, generation: int) -> Any:
            values = {"group_id": group, "generation_id": generation, "member_id": member_id}
            return conn.request(build(hb.HeartbeatRequest, values))

        def commit(member_id: str, generation: int) -> Any:
            values = {
                "group_id": group,
                "generation_id_or_member_epoch": generation,
                "member_id": member_id,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": p, "committed_offset": 10 + p} for p in (0, 1)
                        ],
                    }
                ],
            }
            return conn.request(build(oc.OffsetCommitRequest, values))

        def commit_codes(response: Any) -> set[ErrorCode]:
            return {p.error_code for t in response.topics for p in t.partitions}

        # Validation that needs no group.
        assert (await join(session_timeout=1)).error_code is E.invalid_session_timeout
        assert (await join(session_timeout=2**31 - 1)).error_code is E.invalid_session_timeout
        assert (await join(group_id="")).error_code is E.invalid_group_id
        assert (await heartbeat("nobody", 1)).error_code is E.unknown_member_id

        # A real member: MEMBER_ID_REQUIRED first (KIP-394), then generation 1.
        first = await join()
        assert first.error_code is E.member_id_required
        me = first.member_id
        assert me
        joined = await join(member_id=me)
        assert joined.error_code is E.none
        assert (joined.generation_id, joined.leader) == (1, me)
        mine = [{"member_id": me, "assignment": assignment(topic, 0, 1)}]
        assert (await sync(me, 0, mine)).error_code is E.illegal_generation
        assert (await sync(me, 1, mine)).error_code is E.none

        assert (await heartbeat(me, 0)).error_code is E.illegal_generation
        assert (await heartbeat(me, 2)).error_code is E.illegal_generation
        assert (await heartbeat("ghost", 1)).error_code is E.unknown_member_id
        assert (await heartbeat(me, 1)).error_code is E.none
        assert commit_codes(await commit("ghost", 1)) == {E.unknown_member_id}
        assert commit_codes(await commit(me, 1)) == {E.none}

        # The leader rejoins: generation 2. Everything of generation 1 is now stale.
        rejoined = await join(member_id=me)
        assert (rejoined.error_code, rejoined.generation_id) == (E.none, 2)
        assert (await sync(me, 1, mine)).error_code is E.illegal_generation
        assert (await sync(me, 2, mine)).error_code is E.none
        assert commit_codes(await commit(me, 1)) == {E.illegal_generation}
        assert (await heartbeat(me, 1)).error_code is E.illegal_generation
        assert (await heartbeat(me, 2)).error_code is E.none

        # The stale commit did not land: the offsets are generation 1's.
        fetched = await conn.request(
            build(of.OffsetFetchRequest, {"groups": [{"group_id": group, "topics": None}]})
        )
        (fetched_topic,) = fetched.groups[0].topics
        assert [p.committed_offset for p in fetched_topic.partitions] == [10, 11]

        left = await conn.request(
            build(lg.LeaveGroupRequest, {"group_id": group, "members": [{"member_id": me}]})
        )
        assert left.error_code is E.none
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "metadata",
    [b"", b"\xff\xff\xff", struct.pack(">hi", 0, 2**31 - 1), struct.pack(">hih", 0, 1, 300)],
    ids=["empty", "negative-version", "huge-topic-count", "topic-name-past-the-end"],
)
async def test_a_join_with_unparseable_consumer_subscription_still_completes(
    shared: Coordinator, metadata: bytes
) -> None:
    # Kafka does not parse the subscription to accept a member; neither may we crash on it.
    group = f"garbage-subscription-{len(metadata)}-{metadata[:2].hex()}"
    conn = await KafkaConnection.open(HOST, shared.port, client_id="garbage-subscription")
    try:
        values = {
            "group_id": group,
            "session_timeout": 6000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": metadata}],
        }
        joined = await conn.request(build(jg3.JoinGroupRequest, values))
        assert (joined.error_code, joined.generation_id) == (E.none, 1)
        assert [m.metadata for m in joined.members] == [metadata]
        left = await conn.request(
            build(
                lg.LeaveGroupRequest,
                {"group_id": group, "members": [{"member_id": joined.member_id}]},
            )
        )
        assert left.error_code is E.none
    finally:
        await conn.close()


# -- resource limits, each on a coordinator of its own -----------------------------------


async def test_create_topics_refuses_more_partitions_per_request_than_kafka(
    coordinator: Coordinator,
) -> None:
    conn = await KafkaConnection.open(HOST, coordinator.port, client_id="greedy-admin")
    try:

        def create(name: str, partitions: int, *, validate_only: bool) -> Any:
            values = {
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                "timeout": 5000,
                "validate_only": validate_only,
            }
            return conn.request(build(ct.CreateTopicsRequest, values))

        # Kafka checks the total before validate_only, and before creating anything.
        checked = await create("huge", 2**31 - 1, validate_only=True)
        assert checked.topics[0].error_code is E.policy_violation
        created = await create("too-many", 10_001, validate_only=False)
        assert created.topics[0].error_code is E.policy_violation
        assert (await create("fine", 10_000, validate_only=False)).topics[0].error_code is E.none
    finally:
        await conn.close()


def test_a_client_that_never_reads_cannot_make_the_coordinator_buffer_without_bound(
    coordinator: Coordinator,
) -> None:
    async def prepare() -> None:
        await admin.create_topic(HOST, coordinator.port, "wide", 1000)
        conn = await KafkaConnection.open(HOST, coordinator.port)
        try:
            parts = [
                {"partition_index": p, "committed_offset": p, "committed_metadata": "m" * 4000}
                for p in range(1000)
            ]
            values = {
                "group_id": "fat",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [{"name": "wide", "partitions": parts}],
            }
            committed = await conn.request(build(oc.OffsetCommitRequest, values))
            assert {p.error_code for p in committed.topics[0].partitions} == {E.none}
        finally:
            await conn.close()

    asyncio.run(prepare())
    with healthy_client(coordinator.port) as healthy:
        fetch = build(of.OffsetFetchRequest, {"groups": [{"group_id": "fat", "topics": None}]})
        requests = b"".join(encode_request(fetch, i) for i in range(48))  # ~4 MB answer each
        before = rss_mib(coordinator)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(IO_TIMEOUT)
            sock.connect((HOST, coordinator.port))
            sock.sendall(requests)  # and never read
            time.sleep(1.0)
            healthy.check()
            time.sleep(1.0)
            grown = rss_mib(coordinator) - before
        finally:
            sock.close()
    assert grown < 64, f"the coordinator buffered {grown:.0f} MiB for one non-reading client"
