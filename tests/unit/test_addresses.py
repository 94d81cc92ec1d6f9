"""One HOST:PORT reader for every command, member and listener (`kgroups.protocol.addresses`)."""

from __future__ import annotations

import pytest

from kgroups.client.link import parse_bootstrap as member_bootstrap
from kgroups.coordinator.listeners import parse_address as listen_address
from kgroups.kubectl.views import coordinator_node
from kgroups.protocol.addresses import parse_bootstrap, parse_host_port


@pytest.mark.parametrize(("text", "expected"), [
    ("broker:9092", ("broker", 9092)),
    (" broker:9092 ", ("broker", 9092)),
    ("[::1]:9093", ("::1", 9093)),
    ("fe80::1:9094", ("fe80::1", 9094)),  # unbracketed v6: the last colon, as Kafka's Utils
    (":9092", ("127.0.0.1", 9092)),
])  # fmt: skip
def test_what_kafka_accepts_is_read(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize("text", ["broker", "broker:", "broker:x", "broker:0", "broker:65536",
                                  "[::1", "[::1]9092", "", "  "])  # fmt: skip
def test_what_is_not_host_port_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_host_port(text)


def test_each_caller_keeps_its_own_defaults() -> None:
    # A listener: a bare host takes 9092, and port 0 binds any free port.
    assert listen_address("0.0.0.0") == ("0.0.0.0", 9092)
    assert listen_address("127.0.0.1:0") == ("127.0.0.1", 0)
    # A metrics endpoint binds every address when no host is given.
    assert parse_host_port(":0", default_host="0.0.0.0", any_port=True) == ("0.0.0.0", 0)
    # A member connects: port 0 is nothing to connect to.
    assert member_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    with pytest.raises(ValueError, match="bootstrap address: 'a:0' is not HOST:PORT"):
        member_bootstrap("a:0")
    with pytest.raises(ValueError, match="no bootstrap address"):
        parse_bootstrap(" , ")
    # The plugin shows an unknown coordinator rather than failing on a status it cannot read.
    assert coordinator_node("svc.ns:9092").port == 9092
    assert coordinator_node("garbage").node_id == -1
