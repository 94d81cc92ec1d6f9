"""`kgroups coordinator`: its flags, the settings they make, and the server run until a
signal or a failure (exit 1, the reason in the log and the termination message)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kgroups.cli.options import parse_address
from kgroups.coordinator.limits import Limits
from kgroups.files import say_why_stopped
from kgroups.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from kgroups.protocol.groups import COORDINATOR, GroupConfig

if TYPE_CHECKING:
    from kgroups.coordinator.core.config import MigrationPolicy
    from kgroups.coordinator.listeners import ListenerSettings
    from kgroups.coordinator.server import ServerSettings

LIMITS = Limits()


def _listeners(listen: list[str], advertise: list[str]) -> tuple[ListenerSettings, ...]:
    """--listen PROTOCOL://HOST:PORT (repeated) with --advertise [PROTOCOL=]HOST:PORT."""
    from kgroups.coordinator import listeners

    try:
        parsed = [listeners.parse_listener(value) for value in listen]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    by_name = {ls.name: ls for ls in parsed}
    for value in advertise:
        name, sep, address = value.rpartition("=")
        name = name.upper() if sep else parsed[0].name
        if name not in by_name:
            raise typer.BadParameter(f"--advertise {value}: no {name} listener")
        host, port = parse_address(address)
        by_name[name] = dataclasses.replace(by_name[name], advertised_host=host,
                                            advertised_port=port)  # fmt: skip
    return tuple(by_name[ls.name] for ls in parsed)


def coordinator(
    listen: Annotated[
        list[str],
        typer.Option(
            help="A listener: PROTOCOL://HOST:PORT (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) "
            "or HOST:PORT (PLAINTEXT). Repeat for several; leave PLAINTEXT out to refuse "
            "unauthenticated clients."
        ),
    ] = ["127.0.0.1:9092"],  # noqa: B006 - typer's way to give a list option a default
    data_dir: Annotated[
        Path, typer.Option(help="Where the SQLite store lives (without --store).")
    ] = Path(".kgroups"),
    store: Annotated[
        str | None,
        typer.Option(
            envvar="KGROUPS_STORE",
            help="The store in PostgreSQL: postgresql://USER[:PASSWORD]@HOST:PORT/DB (libpq's "
            "URL; PGPASSWORD, PGPASSFILE, PGSSLMODE, PGSSLROOTCERT... as for psql). "
            "Default: SQLite in --data-dir.",
        ),
    ] = None,
    shards: Annotated[
        int,
        typer.Option(
            help="Shards groups hash to in a PostgreSQL store (Kafka's "
            "offsets.topic.num.partitions): fixed when the store is created."
        ),
    ] = 50,
    replica_name: Annotated[
        str | None,
        typer.Option(
            help="With --store: this replica's name, which keeps its node id across restarts "
            "(default: the host name and the first listener's port; a StatefulSet pod's name)."
        ),
    ] = None,
    lease_ttl: Annotated[
        float,
        typer.Option(
            help="With --store: seconds a replica's shard leases last unrenewed (renewed every "
            "fifth); a replica that dies loses its groups to the others after this."
        ),
    ] = 5.0,
    advertise: Annotated[
        list[str] | None,
        typer.Option(
            help="[PROTOCOL=]HOST:PORT clients of that listener should connect to "
            "(default: its --listen address; no PROTOCOL: the first listener)."
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="TLS certificate chain (PEM) for SSL/SASL_SSL listeners.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Private key (PEM) of --tls-cert.")] = None,
    tls_client_ca: Annotated[
        Path | None, typer.Option(help="CA bundle (PEM) that signs accepted client certificates.")
    ] = None,
    tls_client_auth: Annotated[
        str, typer.Option(help="Client certificates: none, requested or required (mTLS).")
    ] = "none",
    sasl_mechanisms: Annotated[
        str,
        typer.Option(
            help="SASL mechanisms offered, comma-separated: PLAIN, SCRAM-SHA-256, "
            "SCRAM-SHA-512, OAUTHBEARER."
        ),
    ] = "",
    oauthbearer_audience: Annotated[
        list[str] | None,
        typer.Option(
            help="OAUTHBEARER: an audience tokens must be for (repeat for several; default "
            "kgroups). Tokens are ServiceAccount tokens, verified with the API server's keys."
        ),
    ] = None,
    oauthbearer_jwks: Annotated[
        Path | None,
        typer.Option(help="OAUTHBEARER: verify with this JWKS file instead (another issuer)."),
    ] = None,
    oauthbearer_issuer: Annotated[
        str | None,
        typer.Option(
            help="OAUTHBEARER: the issuer (iss) tokens must have (default: the "
            "API server's; with --oauthbearer-jwks, any)."
        ),
    ] = None,
    oauthbearer_review: Annotated[
        bool,
        typer.Option(
            help="OAUTHBEARER: also ask the API server (TokenReview) about each new "
            "token, so a deleted ServiceAccount or pod is refused before expiry."
        ),
    ] = False,
    oauthbearer_review_cache: Annotated[
        float, typer.Option(help="OAUTHBEARER: seconds a TokenReview answer is reused.")
    ] = 30.0,
    credentials: Annotated[
        Path | None,
        typer.Option(help="Users for PLAIN and SCRAM (YAML; see `kgroups credentials`)."),
    ] = None,
    max_reauth_ms: Annotated[
        int,
        typer.Option(
            help="connections.max.reauth.ms: longest SASL session before the client "
            "must re-authenticate (0: only a token's expiry bounds it)."
        ),
    ] = 0,
    reload_interval: Annotated[
        float,
        typer.Option(
            help="Seconds between checks of the certificate and credentials files "
            "for changes (a rotated Secret applies to new connections)."
        ),
    ] = 10.0,
    acl_file: Annotated[
        Path | None,
        typer.Option(help="Authorize with Kafka ACLs from this YAML file (reloaded on change)."),
    ] = None,
    rbac_namespace: Annotated[
        str | None,
        typer.Option(
            help="Authorize with Kubernetes RBAC: SubjectAccessReviews on ConsumerGroups and "
            "Topics in this namespace (verbs join, commit, reset, get, delete, consume...)."
        ),
    ] = None,
    rbac_by_resource: Annotated[
        bool,
        typer.Option(
            help="RBAC: ask about the ConsumerGroup or Topic that declares a Kafka name, in "
            "its own namespace (names no resource declares: --rbac-namespace). Needs list "
            "and watch on consumergroups and topics."
        ),
    ] = True,
    rbac_cache_ttl: Annotated[
        float, typer.Option(help="Seconds an RBAC answer (yes or no) is reused.")
    ] = 10.0,
    super_users: Annotated[
        str,
        typer.Option(
            help="Kafka's super.users: principals allowed everything whatever the ACLs or "
            "RBAC say, separated by ; or , (e.g. User:system:serviceaccount:kgroups:operator)."
        ),
    ] = "",
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="For RBAC and OAUTHBEARER: the API server (default $KUBECONFIG or the pod's own)."
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Serve http://HOST:PORT/metrics (Prometheus), /healthz (alive) and /readyz "
            "(store replayed, listening)."
        ),
    ] = None,
    initial_rebalance_delay_ms: Annotated[
        int, typer.Option(help=GroupConfig.INITIAL_REBALANCE_DELAY_MS)
    ] = COORDINATOR.initial_rebalance_delay_ms,
    min_session_timeout_ms: Annotated[
        int, typer.Option(help=GroupConfig.MIN_SESSION_TIMEOUT_MS)
    ] = COORDINATOR.min_session_timeout_ms,
    max_session_timeout_ms: Annotated[
        int, typer.Option(help=GroupConfig.MAX_SESSION_TIMEOUT_MS)
    ] = COORDINATOR.max_session_timeout_ms,
    max_group_size: Annotated[int, typer.Option(help=GroupConfig.MAX_SIZE)] = COORDINATOR.max_size,
    max_groups_per_principal: Annotated[
        int,
        typer.Option(
            help="Groups one authenticated principal may create; more get POLICY_VIOLATION "
            "(0: no limit; ANONYMOUS is not counted)."
        ),
    ] = COORDINATOR.max_groups_per_principal,
    max_group_record_bytes: Annotated[
        int,
        typer.Option(
            help="Largest group record (members' ids, metadata, assignments; Kafka's "
            "message.max.bytes): a JoinGroup or assignment past it gets UNKNOWN_SERVER_ERROR."
        ),
    ] = COORDINATOR.max_record_bytes,
    offsets_retention_minutes: Annotated[
        int, typer.Option(help=GroupConfig.OFFSETS_RETENTION_MINUTES)
    ] = COORDINATOR.offsets_retention_minutes,
    consumer_session_timeout_ms: Annotated[
        int,
        typer.Option(
            help="group.consumer.session.timeout.ms: how long a member of Kafka 4's consumer "
            "protocol lives without a heartbeat (a group overrides it with "
            f"{GroupConfig.CONSUMER_SESSION_TIMEOUT_MS})."
        ),
    ] = COORDINATOR.consumer_session_timeout_ms,
    consumer_heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            help="group.consumer.heartbeat.interval.ms: how often consumer-protocol members "
            f"are told to heartbeat ({GroupConfig.CONSUMER_HEARTBEAT_INTERVAL_MS} per group)."
        ),
    ] = COORDINATOR.consumer_heartbeat_interval_ms,
    consumer_waiting_heartbeat_interval_ms: Annotated[
        int,
        typer.Option(
            help="The heartbeat interval told to a consumer-protocol member waiting for "
            "partitions others are releasing (kgroups' own; 2 ms more per member of the "
            "group waiting, at most the heartbeat interval)."
        ),
    ] = COORDINATOR.consumer_waiting_heartbeat_interval_ms,
    consumer_migration_policy: Annotated[
        str,
        typer.Option(
            help="group.consumer.migration.policy: bidirectional, upgrade, downgrade or "
            "disabled (case-insensitive). May a live classic group become a consumer-protocol "
            "group when such a member joins (upgrade), and back when the last one leaves "
            "(downgrade)? Empty groups convert either way; `disabled` also refuses classic "
            "members in consumer-protocol groups."
        ),
    ] = "bidirectional",
    auto_create_topics: Annotated[
        bool, typer.Option(help="Create unknown topics on Metadata requests that allow it.")
    ] = False,
    max_frame_bytes: Annotated[
        int, typer.Option(help="Largest request accepted (socket.request.max.bytes).")
    ] = DEFAULT_MAX_FRAME_BYTES,
    max_connections: Annotated[
        int, typer.Option(help="max.connections: more are closed on accept.")
    ] = LIMITS.max_connections,
    max_connections_per_address: Annotated[
        int, typer.Option(help="max.connections.per.ip: more from one address are closed.")
    ] = LIMITS.max_connections_per_address,
    connections_max_idle_ms: Annotated[
        int, typer.Option(help="connections.max.idle.ms: idle connections are closed.")
    ] = LIMITS.connections_max_idle_ms,
    max_buffered_bytes: Annotated[
        int,
        typer.Option(
            help="queued.max.request.bytes: requests (partial ones too) held at once "
            "before the connection adding bytes is no longer read."
        ),
    ] = LIMITS.max_buffered_bytes,
    authentication_timeout_ms: Annotated[
        int,
        typer.Option(help="A connection on a SASL listener not authenticated by then is closed."),
    ] = LIMITS.authentication_timeout_ms,
    failed_authentications_per_s: Annotated[
        float,
        typer.Option(
            help="Failed authentications per client address per second (after a burst of "
            "--failed-authentications-burst); more attempts wait."
        ),
    ] = LIMITS.failed_authentications_per_s,
    failed_authentications_burst: Annotated[
        int, typer.Option(help="Failed authentications one address may make at once.")
    ] = LIMITS.failed_authentications_burst,
    join_rate: Annotated[
        float,
        typer.Option(help="JoinGroup requests per second per principal; more wait (0: no limit)."),
    ] = LIMITS.join_rate,
    commit_rate: Annotated[
        float,
        typer.Option(
            help="OffsetCommit requests per second per principal; more wait (0: no limit)."
        ),
    ] = LIMITS.commit_rate,
    fsync: Annotated[
        bool, typer.Option(help="fsync every write (SQLite synchronous=FULL).")
    ] = True,
    log_level: Annotated[str, typer.Option(help="Python logging level.")] = "INFO",
    port_file: Annotated[
        Path | None,
        typer.Option(
            help="Once listening, write the first listener's bound port here (with several "
            "listeners, then a line `PROTOCOL PORT` for each) (for --listen HOST:0)."
        ),
    ] = None,
) -> None:
    """Run the group coordinator until SIGINT or SIGTERM."""
    # The coordinator is imported when this command runs, not with this module: every
    # command's options are declared when `kgroups` starts, and `kgroups topic` and
    # `kgroups group` reach a coordinator over the wire without loading one.
    from kgroups.coordinator.authorizers import AuthorizationSettings
    from kgroups.coordinator.core import CoordinatorConfig
    from kgroups.coordinator.listeners import SecuritySettings
    from kgroups.coordinator.server import ServerSettings
    from kgroups.coordinator.tls import TlsSettings
    from kgroups.coordinator.tokens import OAuthBearerSettings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    bound = _listeners(listen, advertise or [])
    if tls_client_auth not in ("none", "requested", "required"):
        raise typer.BadParameter("--tls-client-auth: none, requested or required")
    tls = None
    if tls_cert is not None or tls_key is not None:
        if tls_cert is None or tls_key is None:
            raise typer.BadParameter("--tls-cert and --tls-key go together")
        tls = TlsSettings(tls_cert, tls_key, tls_client_ca, tls_client_auth)  # type: ignore[arg-type]
    mechanisms = tuple(m.strip().upper() for m in sasl_mechanisms.split(",") if m.strip())
    oauthbearer = None
    if "OAUTHBEARER" in mechanisms:
        oauthbearer = OAuthBearerSettings(
            audiences=tuple(oauthbearer_audience or ("kgroups",)), jwks_file=oauthbearer_jwks,
            issuer=oauthbearer_issuer, review=oauthbearer_review,
            review_cache_s=oauthbearer_review_cache, kubeconfig=kubeconfig,
        )  # fmt: skip
    security = SecuritySettings(
        tls=tls,
        sasl_mechanisms=mechanisms,
        credentials_file=credentials,
        max_reauth_ms=max_reauth_ms,
        oauthbearer=oauthbearer,
    )
    try:
        security.check(bound)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    limits = Limits(max_connections, max_connections_per_address, connections_max_idle_ms,
                    max_buffered_bytes, join_rate, commit_rate, authentication_timeout_ms,
                    failed_authentications_per_s, failed_authentications_burst)  # fmt: skip
    try:
        limits.validate()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if acl_file is not None and rbac_namespace is not None:
        raise typer.BadParameter("--acl-file or --rbac-namespace, not both")
    authorization = None
    if acl_file is not None or rbac_namespace is not None:
        supers = tuple(p.strip() for p in super_users.replace(";", ",").split(",") if p.strip())
        for principal in supers:
            if ":" not in principal:
                raise typer.BadParameter(f"--super-users: {principal!r} is not TYPE:NAME")
        authorization = AuthorizationSettings(acl_file, rbac_namespace, rbac_cache_ttl, kubeconfig,
                                              rbac_by_resource, supers)  # fmt: skip
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=initial_rebalance_delay_ms,
        group_min_session_timeout_ms=min_session_timeout_ms,
        group_max_session_timeout_ms=max_session_timeout_ms,
        group_max_size=max_group_size,
        max_groups_per_principal=max_groups_per_principal,
        max_group_record_bytes=max_group_record_bytes,
        offsets_retention_minutes=offsets_retention_minutes,
        auto_create_topics_enable=auto_create_topics,
        group_consumer_session_timeout_ms=consumer_session_timeout_ms,
        group_consumer_heartbeat_interval_ms=consumer_heartbeat_interval_ms,
        group_consumer_waiting_heartbeat_interval_ms=consumer_waiting_heartbeat_interval_ms,
        group_consumer_migration_policy=_migration_policy(consumer_migration_policy),
    )
    try:
        config.validate()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    settings = ServerSettings(
        host=bound[0].host,
        port=bound[0].port,
        data_dir=data_dir,
        store_url=checked_store_url(store),
        shards=checked_shards(shards),
        replica_name=replica_name,
        lease_ttl_s=_lease_ttl(lease_ttl),
        listeners=bound,
        security=security,
        reload_interval_s=reload_interval,
        authorization=authorization,
        limits=limits,
        max_frame_bytes=max_frame_bytes,
        synchronous="FULL" if fsync else "NORMAL",
        coordinator=config,
        metrics=parse_address(metrics) if metrics else None,
    )
    sys.exit(asyncio.run(_serve(settings, port_file)))


def checked_store_url(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not value.startswith(("postgresql://", "postgres://")):
        raise typer.BadParameter(
            "--store: a postgresql:// URL (for SQLite, leave it out and use --data-dir)"
        )
    return value


def _lease_ttl(value: float) -> float:
    if not 0.5 <= value <= 300:
        raise typer.BadParameter(f"--lease-ttl: between 0.5 and 300 seconds, not {value}")
    return value


def checked_shards(value: int) -> int:
    from kgroups.coordinator.core.shards import MAX_SHARDS

    if not 1 <= value <= MAX_SHARDS:
        raise typer.BadParameter(f"--shards: between 1 and {MAX_SHARDS}, not {value}")
    return value


def _stopped_because(reason: str) -> None:
    logging.getLogger("kgroups").critical("coordinator stopped: %s", reason)
    say_why_stopped(f"coordinator stopped: {reason}")


async def _serve(settings: ServerSettings, port_file: Path | None) -> int:
    from kgroups.coordinator.kubeapi import KubeApiError
    from kgroups.coordinator.server import CoordinatorServer
    from kgroups.coordinator.store import StoreError

    try:
        server = CoordinatorServer(settings)
    except (ValueError, OSError, KubeApiError) as exc:  # unusable certificates, ACLs, config
        _stopped_because(f"cannot start: {exc}")
        return 1
    try:
        await server.start()
    except StoreError as exc:
        _stopped_because(str(exc))
        return 1
    if port_file is not None:
        tmp = port_file.with_suffix(".tmp")
        # The first listener's port alone, as always; with more listeners, a line
        # `PROTOCOL PORT` for each.
        lines = [f"{server.port}"]
        if len(server.ports) > 1:
            lines += [f"{name} {port}" for name, port in server.ports.items()]
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(port_file)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    serve = asyncio.create_task(server.serve_forever(), name="coordinator-serve")
    stop_wait = asyncio.create_task(stopping.wait(), name="coordinator-signal")
    await asyncio.wait({serve, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    if server.failure is not None:
        _stopped_because(str(server.failure))
        return 1
    await server.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await serve
    return 0


def _migration_policy(text: str) -> MigrationPolicy:
    from kgroups.coordinator.core.config import MigrationPolicy

    try:
        return MigrationPolicy(text.strip().lower())
    except ValueError:
        choices = ", ".join(p.value for p in MigrationPolicy)
        raise typer.BadParameter(
            f"--consumer-migration-policy must be one of {choices}, not {text!r}"
        ) from None
