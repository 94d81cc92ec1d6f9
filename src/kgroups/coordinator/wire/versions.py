"""ApiVersions, answered by the server itself: it says which APIs and versions we serve.

It is the first request on every connection. A version we do not know (a newer client)
is answered in version 0 with UNSUPPORTED_VERSION *and* the table, so the client can
retry with a version we do support (KIP-511), exactly as a Kafka broker does.
"""

from __future__ import annotations

from kgroups.protocol.apis import SUPPORTED, ApiKey, response_class
from kgroups.protocol.build import build
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.frames import encode_response

_TABLE = [
    {"api_key": spec.key, "min_version": spec.min_version, "max_version": spec.max_version}
    for spec in sorted(SUPPORTED.values(), key=lambda s: s.key)
]


def api_versions_frame(correlation_id: int, requested_version: int) -> bytes:
    spec = SUPPORTED[ApiKey.API_VERSIONS]
    if spec.supports(requested_version):
        version, error = requested_version, ErrorCode.none
    else:
        version, error = 0, ErrorCode.unsupported_version
    body: object = build(
        response_class(ApiKey.API_VERSIONS, version),
        {"error_code": error, "api_keys": _TABLE, "finalized_features_epoch": -1},
    )
    return encode_response(ApiKey.API_VERSIONS, version, correlation_id, body)
