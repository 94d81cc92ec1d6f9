"""The sans-IO classic group coordinator (no asyncio, sockets, database or clock here).

The import-linter contract `sans-io-core` keeps it that way.
"""

from kgroups.coordinator.core.config import CoordinatorConfig
from kgroups.coordinator.core.effects import Effects, Reply
from kgroups.coordinator.core.machine import GroupCoordinator, HandlerFailed
from kgroups.coordinator.core.msg_cluster import Node
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.states import GroupState

__all__ = [
    "CoordinatorConfig",
    "Effects",
    "GroupCoordinator",
    "GroupState",
    "HandlerFailed",
    "Node",
    "Reply",
    "RequestContext",
]
