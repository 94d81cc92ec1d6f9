"""The response classes of the requests kgroups' own clients send, by name.

The member and the admin client pick one version of each API; their answers are these
kio classes, which `ReconnectingConnection.ask` checks at run time so that mypy can see
every field the code reads (a typo in a field name is a type error, not an
AttributeError in production).
"""

from __future__ import annotations

from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.join_group.v9.response import JoinGroupResponse
from kio.schema.leave_group.v5.response import LeaveGroupResponse
from kio.schema.offset_commit.v8.response import OffsetCommitResponse
from kio.schema.offset_fetch.v7.response import OffsetFetchResponse
from kio.schema.sync_group.v5.response import SyncGroupResponse

__all__ = [
    "HeartbeatResponse",
    "JoinGroupResponse",
    "LeaveGroupResponse",
    "OffsetCommitResponse",
    "OffsetFetchResponse",
    "SyncGroupResponse",
]
