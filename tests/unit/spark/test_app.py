"""The command line every example Spark application shares (`kgroups.spark.app`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kgroups.spark import app


def parse(*argv: str) -> argparse.Namespace:
    return app.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--bootstrap", "h:1", "--group", "g", "--topic", "t", "--source", "kafka:k:9", *argv]
    )


def test_kafka_options_come_from_a_properties_file_and_the_command_line(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# the cluster's TLS\n"
        "security.protocol = SASL_SSL\n"
        "! a comment too, as in Java properties\n\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="a" password="b=c";\n'
    )
    args = parse("--kafka-options-file", str(props), "--kafka-option", "sasl.mechanism=SCRAM-SHA-512",
                 "--kafka-option", "security.protocol=SSL")  # fmt: skip
    assert app.kafka_options(args) == {
        "security.protocol": "SSL",  # the command line wins over the file
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="a" password="b=c";',
    }


def test_a_kafka_option_without_a_value_or_a_source_without_a_place_is_refused() -> None:
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        app.kafka_options(parse("--kafka-option", "security.protocol"))
    with pytest.raises(SystemExit, match="files:DIR or kafka:HOST:PORT"):
        app.source(None, parse("--source", "kafka:"))


def test_defaults_are_kafkas() -> None:
    args = parse()
    assert (args.session_timeout_ms, args.auto_offset_reset, args.max_records) == (
        45_000, "earliest", 10_000,
    )  # fmt: skip
    assert args.partition_check_interval_s == 30.0


def test_spark_settings_are_key_value_pairs_in_their_order() -> None:
    args = parse("--conf", "spark.executor.instances=2", "--conf", "spark.a=b=c")
    assert app.spark_conf(args) == [("spark.executor.instances", "2"), ("spark.a", "b=c")]
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        app.spark_conf(parse("--conf", "spark.executor.instances"))


def test_a_group_protocol_takes_its_own_options_and_refuses_the_others() -> None:
    assert app.protocol_options(parse()) == {}
    assert app.protocol_options(parse("--assignor", "range")) == {"assignors": ["range"]}
    assert app.protocol_options(parse("--group-protocol", "consumer")) == {
        "group_protocol": "consumer", "server_assignor": None,
    }  # fmt: skip
    chosen = parse("--group-protocol", "consumer", "--server-assignor", "range")
    assert app.protocol_options(chosen)["server_assignor"] == "range"
    for wrong in (("--group-protocol", "consumer", "--assignor", "range"),
                  ("--group-protocol", "consumer", "--heartbeat-interval-ms", "100")):  # fmt: skip
        with pytest.raises(SystemExit, match="classic protocol's"):
            app.protocol_options(parse(*wrong))
    with pytest.raises(SystemExit, match="needs --group-protocol consumer"):
        app.protocol_options(parse("--server-assignor", "uniform"))


def test_a_consumer_protocol_pipeline_has_a_consumer_protocol_member() -> None:
    from prometheus_client import CollectorRegistry

    from kgroups.client import ConsumerProtocolMember
    from kgroups.spark.loop import BatchLoop
    from tests.unit.spark.world import Log, Spark

    def loop(**options: object) -> BatchLoop:
        return BatchLoop(bootstrap="127.0.0.1:9", group="g", topic="t", source=Log(end=0),
                         process=Spark().process, output="out", registry=CollectorRegistry(),
                         group_protocol="consumer", **options)  # fmt: skip

    member = loop(server_assignor="range", session_timeout_ms=6000, heartbeat_interval_ms=500,
                  request_timeout_ms=2000).member  # fmt: skip
    assert isinstance(member, ConsumerProtocolMember)
    assert (member.server_assignor, member.session_timeout_ms) == ("range", 6000)
    assert member._link.timeout == 2.0
    with pytest.raises(ValueError, match="the coordinator assigns"):
        loop(assignors=["range"])
