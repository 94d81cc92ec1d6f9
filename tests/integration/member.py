"""A real Kafka consumer (kafka-python, aiokafka, confluent-kafka) as a group member, driven
by a test.

Run as its own process so a test can close it, kill it with SIGKILL, or restart it with
the same static identity. It reports what the client library itself believes, one JSON
object per line on stdout:

    {"event": "assigned", "generation": 3, "member_id": "...", "partitions": [["t", 0]]}
    {"event": "revoked", "partitions": [...]}
    {"event": "committed", "offset": 42, "partitions": [...]}   (after a "commit N" command)
    {"event": "commit_failed", "error": "..."}
    {"event": "closed"}
    {"event": "lost", "partitions": [...]}, {"event": "failed", "error": "..."}  (kgroups)

Commands on stdin: `commit N` (commit offset N for every assigned partition) and `close`
(leave the group cleanly). confluent-kafka also takes `commit-async N` (reported from its
commit callback) and closes on SIGTERM; its `assigned` carries the whole assignment after
the rebalance callback and, like kgroups', `added` (what the callback was handed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import queue
import signal
import struct
import sys
import threading
import time
from typing import Any

# As `python -m kgroups` does: kio would import hypothesis (installed for the tests) for
# strategies nobody here uses, ~0.13 s of each of the many members a test run starts.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

events_seen: list[dict[str, Any]] = []


def security(client: str) -> dict[str, Any]:
    """The KGROUPS_* security settings in the environment (the ones kgroups' own clients
    read, kgroups.security.client) spelled as `client`'s configuration: each library joins a
    secured group with its own TLS and SASL code."""
    from kgroups.security.client import ClientSecurity

    s = ClientSecurity.from_env()
    if s.protocol == "PLAINTEXT":
        return {}
    if s.mechanism == "OAUTHBEARER":
        assert s.token_file is not None
        return bearer(client, s.protocol, s.token_file, str(s.ca_file) if s.ca_file else None)
    password = s.password if s.password is not None else None
    if password is None and s.password_file is not None:
        password = s.password_file.read_text().rstrip("\n")
    ca = str(s.ca_file) if s.ca_file else None
    cert = str(s.cert_file) if s.cert_file else None
    key = str(s.key_file) if s.key_file else None
    if client == "confluent":
        conf = {"security.protocol": s.protocol, "ssl.ca.location": ca,
                "ssl.certificate.location": cert, "ssl.key.location": key,
                "sasl.mechanisms": s.mechanism, "sasl.username": s.username,
                "sasl.password": password}  # fmt: skip
        return {k: v for k, v in conf.items() if v is not None}
    if client == "aiokafka":
        from aiokafka.helpers import create_ssl_context

        ctx = create_ssl_context(cafile=ca, certfile=cert, keyfile=key) if s.tls else None
        return {"security_protocol": s.protocol, "ssl_context": ctx, "sasl_mechanism": s.mechanism or "PLAIN",
                "sasl_plain_username": s.username, "sasl_plain_password": password}  # fmt: skip
    return {"security_protocol": s.protocol, "ssl_cafile": ca, "ssl_certfile": cert,
            "ssl_keyfile": key, "sasl_mechanism": s.mechanism,
            "sasl_plain_username": s.username, "sasl_plain_password": password}  # fmt: skip


def bearer(client: str, protocol: str, token_file: Any, ca: str | None) -> dict[str, Any]:
    """OAUTHBEARER with a token file (a projected ServiceAccount token), read afresh at
    every (re-)authentication, in each library's own way."""

    def token() -> str:
        return str(token_file.read_text().strip())

    if client == "confluent":

        def oauth_cb(_config: str) -> tuple[str, float]:
            import base64

            value = token()
            payload = value.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            return value, float(claims["exp"])

        conf = {"security.protocol": protocol, "sasl.mechanisms": "OAUTHBEARER",
                "oauth_cb": oauth_cb, "ssl.ca.location": ca}  # fmt: skip
        return {k: v for k, v in conf.items() if v is not None}
    if client == "aiokafka":
        from aiokafka.abc import AbstractTokenProvider as AsyncProvider
        from aiokafka.helpers import create_ssl_context

        class AsyncTokens(AsyncProvider):
            async def token(self) -> str:
                return token()

        ctx = create_ssl_context(cafile=ca) if ca else None
        return {"security_protocol": protocol, "ssl_context": ctx, "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token_provider": AsyncTokens()}  # fmt: skip
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        def token(self) -> str:
            return token()

    return {"security_protocol": protocol, "ssl_cafile": ca, "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Tokens()}  # fmt: skip


def emit(**event: Any) -> None:
    events_seen.append(event)
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def tps(partitions: Any) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def stdin_commands() -> queue.Queue[str]:
    commands: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("close")

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return commands


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    strategies = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        group_instance_id=args.instance_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.max_poll_interval_ms,
        metadata_max_age_ms=args.metadata_max_age_ms,
        enable_auto_commit=False,
        partition_assignment_strategy=[strategies[args.strategy]],
        **security("kafka-python"),
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(event="revoked", partitions=tps(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            meta = consumer.group_metadata()
            emit(
                event="assigned",
                generation=meta.generation_id,
                member_id=meta.member_id,
                partitions=tps(consumer.assignment()),  # all it owns: cooperative adds
                added=tps(assigned),
            )

    consumer.subscribe(args.topics.split(","), listener=Listener())
    commands = stdin_commands()
    while True:
        try:
            consumer.poll(timeout_ms=100)
        except KafkaError as exc:
            # kafka-python raises connection errors out of poll() while its only broker is
            # down (a coordinator restart); an application retries, and so does this one.
            emit(event="poll_error", error=repr(exc))
            time.sleep(0.1)
        if args.strategy == "cooperative-sticky":
            # kafka-python calls on_partitions_assigned only when something was added; a
            # cooperative generation that only took partitions away is reported here.
            meta = consumer.group_metadata()
            now = (meta.generation_id, tps(consumer.assignment()))
            last = next((e for e in reversed(events_seen) if e["event"] == "assigned"), None)
            if meta.generation_id > 0 and last and (last["generation"], last["partitions"]) != now:
                emit(event="assigned", generation=now[0], member_id=meta.member_id,
                     partitions=now[1])  # fmt: skip
        try:
            command = commands.get_nowait()
        except queue.Empty:
            continue
        if command == "close":
            consumer.close()
            emit(event="closed")
            return
        if command.startswith("commit "):
            offset = int(command.split()[1])
            assigned = consumer.assignment()
            try:
                consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp in assigned})
                emit(event="committed", offset=offset, partitions=tps(assigned))
            except Exception as exc:  # noqa: BLE001 - the test wants to see any failure
                emit(event="commit_failed", error=repr(exc))


async def run_aiokafka(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.structs import OffsetAndMetadata

    strategies = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        group_instance_id=args.instance_id,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.max_poll_interval_ms,
        enable_auto_commit=False,
        partition_assignment_strategy=(strategies[args.strategy],),
        **security("aiokafka"),
    )

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(event="revoked", partitions=tps(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            coordinator = consumer._coordinator
            emit(
                event="assigned",
                generation=coordinator.generation,
                member_id=coordinator.member_id,
                partitions=tps(assigned),
            )

    await consumer.start()
    consumer.subscribe(args.topics.split(","), listener=Listener())
    commands = stdin_commands()
    loop = asyncio.get_running_loop()
    getter = loop.run_in_executor(None, commands.get)
    while True:
        await consumer.getmany(timeout_ms=100)
        if not getter.done():
            continue
        command = getter.result()
        getter = loop.run_in_executor(None, commands.get)
        if command == "close":
            await consumer.stop()
            emit(event="closed")
            return
        if command.startswith("commit "):
            offset = int(command.split()[1])
            assigned = consumer.assignment()
            try:
                await consumer.commit({tp: OffsetAndMetadata(offset, "") for tp in assigned})
                emit(event="committed", offset=offset, partitions=tps(assigned))
            except Exception as exc:  # noqa: BLE001 - the test wants to see any failure
                emit(event="commit_failed", error=repr(exc))


async def run_kgroups(args: argparse.Namespace) -> None:
    from kgroups.client import ConsumerProtocolMember, GroupMember
    from kgroups.client.errors import MemberError
    from kgroups.security.client import ClientSecurity

    member: GroupMember

    class Listener:
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(event="revoked", partitions=tps(revoked))

        def on_partitions_lost(self, lost: Any) -> None:
            emit(event="lost", partitions=tps(lost))

        def on_partitions_assigned(self, added: Any) -> None:
            # The whole assignment, as the eager peers report it (cooperative: added only).
            emit(
                event="assigned",
                generation=member.generation,
                member_id=member.member_id,
                partitions=tps(member.assignment),
                added=tps(added),
            )

    if args.group_protocol == "consumer":
        # Kafka 4's protocol: the coordinator assigns; the session is the coordinator's
        # (the tests run it at 6 s: --consumer-session-timeout-ms).
        member = ConsumerProtocolMember(  # type: ignore[assignment]
            args.bootstrap, args.group, args.topics.split(","), instance_id=args.instance_id,
            client_id=args.client_id, session_timeout_ms=6000, listener=Listener(),
            rebalance_timeout_ms=args.max_poll_interval_ms, security=ClientSecurity.from_env(),
        )  # fmt: skip
    else:
        member = GroupMember(
            args.bootstrap,
            args.group,
            args.topics.split(","),
            assignors=[args.strategy],
            instance_id=args.instance_id,
            client_id=args.client_id,
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            rebalance_timeout_ms=args.max_poll_interval_ms,
            metadata_max_age_ms=args.metadata_max_age_ms,
            listener=Listener(),
            security=ClientSecurity.from_env(),
        )
    await member.start()

    async def report_failure() -> None:
        error = await member.wait_failed()
        emit(event="failed", error=repr(error), code=getattr(error.code, "name", None))

    async def report_epochs() -> None:
        """The consumer protocol moves a member's epoch without always changing what it
        holds (no callback then): say so, as the Java and Go peers do."""
        last = None
        while True:
            await asyncio.sleep(0.05)
            now = (member.generation, tps(member.assignment))
            if now[0] > 0 and now != last:
                last = now
                emit(event="generation", generation=now[0], member_id=member.member_id,
                     partitions=now[1])  # fmt: skip

    tasks = {asyncio.create_task(report_failure())}  # a reference keeps it alive
    if args.group_protocol == "consumer":
        tasks.add(asyncio.create_task(report_epochs()))
    commands = stdin_commands()
    loop = asyncio.get_running_loop()
    while True:
        command = await loop.run_in_executor(None, commands.get)
        if command == "close":
            for task in tasks:
                task.cancel()
            await member.close()
            emit(event="closed")
            return
        if command.startswith("commit "):
            offset = int(command.split()[1])
            assigned = member.assignment
            try:
                await member.commit(dict.fromkeys(assigned, offset))
                emit(event="committed", offset=offset, partitions=tps(assigned))
            except MemberError as exc:
                emit(event="commit_failed", error=repr(exc), code=getattr(exc.code, "name", None))


LIBRDKAFKA_STRATEGIES = ("range", "roundrobin", "cooperative-sticky")
"""librdkafka's assignors, under Kafka's names: it has no eager "sticky"."""


def librdkafka_generation(consumer: Any) -> int:
    """The generation librdkafka is in, from its consumer group metadata.

    confluent-kafka hands the metadata out serialized (rd_kafka_consumer_group_metadata_write:
    "CGMDv2:", the generation as a native int32, then the group and member ids); there is no
    other accessor for the generation.
    """
    data: bytes = consumer.consumer_group_metadata()
    magic = b"CGMDv2:"
    if not data.startswith(magic):
        raise RuntimeError(f"unknown consumer group metadata format: {data[:16]!r}")
    (generation,) = struct.unpack_from("=i", data, len(magic))
    return int(generation)


def librdkafka_error(error: Any) -> dict[str, str]:
    """A KafkaError as event fields: `code` is librdkafka's name for it (e.g. FENCED_INSTANCE_ID,
    or _FATAL for its own)."""
    return {"error": f"{error.name()}: {error.str()}", "code": error.name()}


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer_protocol = args.group_protocol == "consumer"
    if not consumer_protocol and args.strategy not in LIBRDKAFKA_STRATEGIES:
        emit(event="failed", error=f"librdkafka has no {args.strategy!r} assignor; it has "
             f"{', '.join(LIBRDKAFKA_STRATEGIES)}")  # fmt: skip
        sys.exit(2)
    # Under Kafka 4's consumer protocol assignments change incrementally, as cooperative.
    cooperative = consumer_protocol or args.strategy == "cooperative-sticky"
    reported: set[str] = set()
    pending_async: list[int] = []  # offsets of async commits not yet called back, in order

    def report_once(event: str, error: Any) -> None:
        # librdkafka repeats an error on every retry; one line per distinct error is enough.
        fields = librdkafka_error(error)
        if fields["error"] not in reported:
            reported.add(fields["error"])
            emit(event=event, **fields)

    def report_commit(mode: str, offset: int | None, error: Any, partitions: Any) -> None:
        failed = [tp.error for tp in partitions or [] if tp.error is not None]
        if error is not None or failed:
            emit(event="commit_failed", mode=mode, **librdkafka_error(error or failed[0]))
        else:
            emit(event="committed", mode=mode, offset=offset, partitions=tps(partitions or []))

    def on_commit(error: Any, partitions: Any) -> None:
        # Served from poll(), for asynchronous commits only (synchronous ones return).
        offset = pending_async.pop(0) if pending_async else None
        report_commit("async", offset, error, partitions)

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "max.poll.interval.ms": args.max_poll_interval_ms,
        "topic.metadata.refresh.interval.ms": args.metadata_max_age_ms,
        "enable.auto.commit": False,
        "on_commit": on_commit,
        "error_cb": lambda error: report_once("client_error", error),
    }
    if consumer_protocol:
        # The coordinator assigns and sets the timeouts: librdkafka refuses these then.
        config["group.protocol"] = "consumer"
    else:
        config["partition.assignment.strategy"] = args.strategy
        config["session.timeout.ms"] = args.session_timeout_ms
        config["heartbeat.interval.ms"] = args.heartbeat_interval_ms
    if args.instance_id is not None:
        config["group.instance.id"] = args.instance_id
    config.update(security("confluent"))
    consumer = Consumer(config)

    # librdkafka calls the assign callback after every SyncGroup, also with nothing new (a
    # cooperative generation that only took partitions away): one `assigned` per generation.
    def on_assign(_: Any, partitions: Any) -> None:
        if cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        emit(
            event="assigned",
            generation=librdkafka_generation(consumer),
            member_id=consumer.memberid(),
            partitions=tps(consumer.assignment()),
            added=tps(partitions),
        )

    def give_up(event: str, partitions: Any) -> None:
        if cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        emit(event=event, partitions=tps(partitions))

    # librdkafka takes a name starting with "^" as a regular expression (matched whole by
    # the coordinator under the consumer protocol).
    topics = [f"^{args.pattern}"] if args.pattern else args.topics.split(",")
    consumer.subscribe(
        topics,
        on_assign=on_assign,
        on_revoke=lambda _, partitions: give_up("revoked", partitions),
        on_lost=lambda _, partitions: give_up("lost", partitions),
    )
    commands = stdin_commands()
    signal.signal(signal.SIGTERM, lambda *_: commands.put("close"))
    generation = -1
    while True:
        message = consumer.poll(0.1)  # serves the rebalance and commit callbacks
        if message is not None and message.error() is not None:
            report_once("poll_error", message.error())
        if consumer_protocol:
            # A member's epoch moves without a callback when nothing of its own changes.
            owned = consumer.assignment()
            now = librdkafka_generation(consumer)
            if owned and now != generation:
                generation = now
                emit(event="generation", generation=now, member_id=consumer.memberid(),
                     partitions=tps(owned))  # fmt: skip
        try:
            command = commands.get_nowait()
        except queue.Empty:
            continue
        if command == "close":
            consumer.close()  # LeaveGroup (a static member keeps its place, as Kafka's do)
            emit(event="closed")
            return
        verb, _, number = command.partition(" ")
        if verb not in ("commit", "commit-async"):
            continue
        mode, offset = ("async" if verb == "commit-async" else "sync"), int(number)
        owned = consumer.assignment()
        if not owned:  # nothing to commit, as the other clients report it
            emit(event="committed", mode=mode, offset=offset, partitions=[])
            continue
        offsets = [TopicPartition(tp.topic, tp.partition, offset) for tp in owned]
        if mode == "async":
            pending_async.append(offset)
            consumer.commit(offsets=offsets, asynchronous=True)
            continue
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            report_commit(mode, offset, exc.args[0], None)
        else:
            report_commit(mode, offset, None, result)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--client", choices=["kafka-python", "aiokafka", "kgroups", "confluent"], required=True
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--instance-id")
    parser.add_argument("--session-timeout-ms", type=int, default=4000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--max-poll-interval-ms", type=int, default=30000)
    parser.add_argument("--metadata-max-age-ms", type=int, default=300000)
    parser.add_argument("--pattern", help="confluent only: subscribe to the topics it matches")
    parser.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic",
                        help="confluent only: Kafka 4's consumer protocol (KIP-848)")  # fmt: skip
    args = parser.parse_args()
    emit(event="started", at=time.time())
    if args.client == "kafka-python":
        run_kafka_python(args)
    elif args.client == "confluent":
        run_confluent(args)
    elif args.client == "kgroups":
        # Why the member rejoined goes to stderr, which the harness shows on a failure.
        logging.basicConfig(
            stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
        )
        asyncio.run(run_kgroups(args))
    else:
        asyncio.run(run_aiokafka(args))


if __name__ == "__main__":
    main()
