"""`Cluster`: admin requests routed the way Kafka's admin client routes them.

A group's requests go to its coordinator (FindCoordinator), ListOffsets to each
partition's leader (Metadata), ListGroups to every broker, so `kgroups group` works
against a Kafka cluster as well as against kgroups, a one-node cluster that answers all
of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping

from kgroups.admin.single import Admin
from kgroups.admin.views import (
    TIMEOUT_MS,
    TP,
    AdminError,
    GroupView,
    ListedGroup,
    Node,
    Topology,
)
from kgroups.protocol.errors import ErrorCode
from kgroups.security.client import ClientSecurity

RETRY_COORDINATOR = frozenset(
    {
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
    }
)
"""FindCoordinator answers that mean "not yet": a fresh Kafka creates its offsets topic
on first use and answers COORDINATOR_NOT_AVAILABLE meanwhile."""


class Cluster:
    """Admin requests routed the way Kafka's admin client routes them, for any cluster.

    A group's requests go to its coordinator (FindCoordinator), ListOffsets to each
    partition's leader (Metadata), ListGroups to every broker. A kgroups coordinator is a
    one-node cluster that coordinates every group and leads every partition, so all of
    it lands on one connection; a Kafka cluster spreads it over its brokers. When
    Metadata names a single broker, it is reached through the bootstrap connection
    whatever address it advertises: the address the user reached it by (a port-forward,
    a load balancer) is the one that works from where they are.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_ms: int = TIMEOUT_MS,
        client_id: str = "kgroups-admin",
        bootstrap: Admin | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        """`bootstrap`: an open connection to `host:port` to use instead of a new one (the
        operator's shared, reconnecting client); `close()` leaves it to its owner."""
        self.timeout_ms = timeout_ms
        self._client_id = client_id
        self._security = security
        self._owns_bootstrap = bootstrap is None
        self._bootstrap = bootstrap or Admin(
            host, port, client_id=client_id, timeout=timeout_ms / 1000, security=security
        )
        self._admins: dict[int, Admin] = {}
        self._nodes: dict[int, Node] | None = None

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        owned = [self._bootstrap] if self._owns_bootstrap else []
        for admin in (*owned, *self._admins.values()):
            await admin.close()

    async def topology(self, topics: Iterable[str] | None = None) -> Topology:
        topology = await self._bootstrap.topology(topics)
        self._nodes = topology.nodes
        return topology

    async def nodes(self) -> dict[int, Node]:
        if self._nodes is None:
            return (await self.topology([])).nodes
        return self._nodes

    async def admin(self, node: Node) -> Admin:
        """The connection to `node`."""
        nodes = await self.nodes()
        if node.node_id not in nodes:  # a broker (a coordinator replica) new since
            nodes = (await self.topology([])).nodes
        if len(nodes) <= 1:
            return self._bootstrap
        admin = self._admins.get(node.node_id)
        if admin is None:
            admin = Admin(node.host, node.port, client_id=self._client_id,
                          timeout=self.timeout_ms / 1000, security=self._security)  # fmt: skip
            self._admins[node.node_id] = admin
        return admin

    async def coordinators(self, group_ids: Collection[str]) -> dict[str, Node]:
        """Each group's coordinator, asking again while the cluster has none yet."""
        wanted = list(dict.fromkeys(group_ids))
        found: dict[str, Node] = {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        while len(found) < len(wanted):
            asked = [g for g in wanted if g not in found]
            for group_id, answer in (await self._bootstrap.find_coordinators(asked)).items():
                if isinstance(answer, Node):
                    found[group_id] = answer
                elif answer not in RETRY_COORDINATOR or loop.time() >= deadline:
                    raise AdminError(answer, f"no coordinator for group {group_id!r}")
            if len(found) < len(wanted):
                await asyncio.sleep(0.2)
        return found

    async def group_admin(self, group_id: str) -> tuple[Node, Admin]:
        """The coordinator of `group_id`, and the connection to it."""
        node = (await self.coordinators([group_id]))[group_id]
        return node, await self.admin(node)

    async def list_groups(
        self, states: Collection[str] = (), types: Collection[str] = ()
    ) -> list[ListedGroup]:
        """Every broker's groups (each lists those it coordinates), by group id."""
        admins = {id(a): a for a in [await self.admin(n) for n in (await self.nodes()).values()]}
        listed: dict[str, ListedGroup] = {}
        for admin in admins.values() or [self._bootstrap]:
            for group in await admin.list_groups(states, types):
                listed[group.group_id] = group
        return [listed[g] for g in sorted(listed)]

    async def describe_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, tuple[Node, GroupView]]:
        """DescribeGroups at each group's coordinator, batched per coordinator; a group
        it calls Dead that ListGroups lists as a KIP-848 "consumer" group is described by
        ConsumerGroupDescribe instead (Kafka's admin client asks the other way round)."""
        coordinators = await self.coordinators(group_ids)
        by_node: dict[Node, list[str]] = {}
        for group_id, node in coordinators.items():
            by_node.setdefault(node, []).append(group_id)
        described: dict[str, tuple[Node, GroupView]] = {}
        for node, ids in by_node.items():
            admin = await self.admin(node)
            views = await admin.describe_groups(ids)
            dead = {v.group_id for v in views if not v.exists}
            if dead:
                listed = await admin.list_groups(types=("Consumer",))
                new = [g.group_id for g in listed if g.group_id in dead]
                views += await admin.describe_consumer_groups(new) if new else []
            for view in views:  # a KIP-848 group's view comes after its Dead one
                described[view.group_id] = (node, view)
        return described

    async def delete_groups(self, group_ids: Collection[str]) -> dict[str, ErrorCode]:
        """DeleteGroups at each group's coordinator; each group's error code, in the
        order asked."""
        by_node: dict[Node, list[str]] = {}
        for group_id, node in (await self.coordinators(group_ids)).items():
            by_node.setdefault(node, []).append(group_id)
        codes: dict[str, ErrorCode] = {}
        for node, ids in by_node.items():
            codes |= await (await self.admin(node)).delete_groups(ids)
        return {g: codes.get(g, ErrorCode.unknown_server_error) for g in dict.fromkeys(group_ids)}

    async def list_offsets(self, specs: Mapping[TP, int]) -> dict[TP, int | ErrorCode]:
        """`Admin.list_offsets` sent to each partition's leader; a partition of a topic
        the cluster lacks, or one without a leader now, gets that error."""
        if not specs:
            return {}
        topology = await self.topology({topic for topic, _ in specs})
        out: dict[TP, int | ErrorCode] = {}
        by_leader: dict[int, dict[TP, int]] = {}
        for (topic, partition), timestamp in specs.items():
            leader = topology.leaders.get(topic, {}).get(partition)
            if topic in topology.missing:
                out[(topic, partition)] = topology.missing[topic]
            elif leader is None:
                out[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            elif leader not in topology.nodes:
                out[(topic, partition)] = ErrorCode.leader_not_available
            else:
                by_leader.setdefault(leader, {})[(topic, partition)] = timestamp
        for leader, asked in by_leader.items():
            out |= await (await self.admin(topology.nodes[leader])).list_offsets(asked)
        return out
