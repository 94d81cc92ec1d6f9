"""Kafka error codes, and the exception that carries one to the wire.

The codes are kio's `ErrorCode` enum (generated from Kafka's `Errors.java`), so a code
raised anywhere in kgroups is by construction the number a Kafka client understands.
`GroupError` is raised inside the coordinator core for a request that must fail with a
specific code; the request handler turns it into that API's error response. Any other
exception is a bug, never an answer to a client.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "GroupError"]


class GroupError(Exception):
    """A request failed with a Kafka error code that the client is meant to see."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
