"""Kafka request and response frames: size-prefixed, with a versioned header.

A frame is `int32 size` then `size` bytes. Requests start with `api_key int16,
api_version int16, correlation_id int32, client_id nullable string`, plus tagged fields
when the request version is flexible (header v2). Responses start with the correlation id,
plus tagged fields when the response version is flexible, except ApiVersions, whose
response header is always v0 so that a client can read it before it knows our versions.

Parsing never trusts the input: an unknown API or version is reported with the
correlation id (`UnsupportedRequest`: the server closes that connection once earlier
answers are written, as Kafka does; ApiVersions is answered in v0 instead, KIP-511);
anything that does not decode raises `MalformedFrame` (the server closes that
connection). Tagged fields we do not know are skipped, as Kafka's readers do (`tags`).
"""

from __future__ import annotations

import io
import struct
from typing import Any, NamedTuple

from kio.serial import entity_writer

from kgroups.protocol.apis import SUPPORTED, ApiKey, request_class, response_class
from kgroups.protocol.tags import read_entity, read_uvarint

SIZE = struct.Struct(">i")
_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
"""Kafka's `socket.request.max.bytes` default."""


class MalformedFrame(Exception):
    """The bytes are not a request we can decode; the connection cannot be trusted."""


class UnsupportedRequest(Exception):
    """A well-framed request for an API or version we do not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported api {api_key} v{api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class Request(NamedTuple):
    """A decoded request (a named tuple: one is made per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: Any


def skip_tagged_fields(buf: memoryview, offset: int) -> int:
    """The offset after a tagged-fields section (a header's, whose tags we never use)."""
    count, offset = read_uvarint(buf, offset)
    for _ in range(count):
        _, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        offset += size
        if offset > len(buf):
            raise MalformedFrame("tagged field runs past the frame")
    return offset


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame's payload."""
    if len(frame) < _FIXED.size:
        raise MalformedFrame(f"frame of {len(frame)} bytes is too short for a request header")
    key, version, correlation_id = _FIXED.unpack_from(frame, 0)
    return key, version, correlation_id


_WRITERS: dict[type, Any] = {}


def writer_for(cls: type) -> Any:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def parse_request(frame: bytes, header: tuple[int, int, int] | None = None) -> Request:
    """Decode one request frame payload (the bytes after the size prefix); `header` is
    what `peek_header` already said of it, if the caller asked."""
    key, version, correlation_id = header or peek_header(frame)
    spec = SUPPORTED.get(key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        raise UnsupportedRequest(key, version, correlation_id)
    cls = request_class(key, version)
    try:
        (length,) = _I16.unpack_from(frame, _FIXED.size)
        offset = _FIXED.size + 2
        client_id = ""
        if length >= 0:
            end = offset + length
            if end > len(frame):
                raise MalformedFrame("client id runs past the frame")
            client_id = _client_id(frame[offset:end])
            offset = end
        if cls.__flexible__:  # type: ignore[attr-defined]
            if offset < len(frame) and frame[offset] == 0:  # the usual: no header tags
                offset += 1
            else:
                offset = skip_tagged_fields(memoryview(frame), offset)
        body = read_entity(cls, frame, offset)
    except MalformedFrame:
        raise
    except Exception as exc:  # kio raises many types on bad input; all mean "malformed"
        raise MalformedFrame(f"cannot decode {spec.name} v{version}: {exc!r}") from exc
    return Request(key, version, correlation_id, client_id, body)


_CLIENT_IDS: dict[bytes, str] = {}
"""Client ids seen, decoded: a client sends the same one with every request. At most 4096
of at most 256 bytes each (1 MiB): made-up ids cost a client its own decoding, nothing
kept."""


def _client_id(raw: bytes) -> str:
    text = _CLIENT_IDS.get(raw)
    if text is None:
        text = raw.decode("utf-8")
        if len(raw) <= 256:
            if len(_CLIENT_IDS) >= 4096:
                _CLIENT_IDS.clear()  # many clients (or made-up ids): forget, never grow
            _CLIENT_IDS[raw] = text
    return text


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A complete response frame (size prefix included) for `body`."""
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(correlation_id.to_bytes(4, "big", signed=True))
    if api_key != ApiKey.API_VERSIONS and type(body).__flexible__:
        out.write(b"\x00")  # no tagged fields in the response header
    writer_for(type(body))(out, body)
    frame = out.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def response_type(api_key: int, api_version: int) -> type:
    return response_class(api_key, api_version)
