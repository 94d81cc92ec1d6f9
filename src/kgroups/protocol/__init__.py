"""The Kafka wire protocol as kgroups speaks it: error codes, framing and kio glue.

Everything here sits below the coordinator: it knows bytes and Kafka message types, never
groups or timers.
"""

from kgroups.protocol.errors import ErrorCode, GroupError

__all__ = ["ErrorCode", "GroupError"]
