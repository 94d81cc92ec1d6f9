"""The wire adapter: Kafka messages (kio, every version) to and from the core's messages."""

from kgroups.coordinator.wire.decode import DECODERS, decode
from kgroups.coordinator.wire.encode import encode
from kgroups.coordinator.wire.produce import refused_produce
from kgroups.coordinator.wire.versions import api_versions_frame

__all__ = ["DECODERS", "api_versions_frame", "decode", "encode", "refused_produce"]
