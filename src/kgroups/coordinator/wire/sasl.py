"""SaslHandshake and SaslAuthenticate, answered by the server's edge, never the core.

Authentication belongs to a connection, not to a group: the core never sees these
requests, and sees every other request only once its connection has a principal.
"""

from __future__ import annotations

from typing import Any

from kgroups.protocol.apis import ApiKey, response_class
from kgroups.protocol.build import build
from kgroups.protocol.frames import encode_response
from kgroups.security.session import AuthenticateAnswer, HandshakeAnswer


def handshake_frame(version: int, correlation_id: int, answer: HandshakeAnswer) -> bytes:
    body: Any = build(
        response_class(ApiKey.SASL_HANDSHAKE, version),
        {"error_code": answer.error, "mechanisms": list(answer.mechanisms)},
    )
    return encode_response(ApiKey.SASL_HANDSHAKE, version, correlation_id, body)


def authenticate_frame(version: int, correlation_id: int, answer: AuthenticateAnswer) -> bytes:
    body: Any = build(
        response_class(ApiKey.SASL_AUTHENTICATE, version),
        {
            "error_code": answer.error,
            "error_message": answer.message,
            "auth_bytes": answer.data,
            "session_lifetime": answer.session_lifetime_ms,  # v1+ (KIP-368)
        },
    )
    return encode_response(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body)
