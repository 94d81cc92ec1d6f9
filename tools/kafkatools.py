"""Apache Kafka's own command-line tools, `kafka-consumer-groups` and `kafka-topics`, as peers.

Operators point these at any Kafka endpoint, so they run against kgroups in the client
matrix (tests/matrix/test_kafka_cli.py). They are the `kafka-tools` jar from Maven Central,
installed with its dependencies by `tools/kafka-tools/fetch.sh` into a cache outside the
repository (4.3.1: kafka-tools 4.4.0 is not on Maven Central). The shell scripts of a Kafka
distribution only run these main classes; the argv built here does the same. Stdlib only,
so tests can import it without the project installed (`sys.path.insert(0, "tools")`).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent / "kafka-tools"
FETCH = HERE / "fetch.sh"
KAFKA_TOOLS_VERSION: str = re.findall(
    r"<kafka.version>(.*)</kafka.version>", (HERE / "pom.xml").read_text()
)[0]
MAIN_CLASSES = {
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
}
"""What bin/kafka-consumer-groups.sh and bin/kafka-topics.sh run."""


@functools.cache
def ensure_tools() -> Path:
    """Install (once per machine) and return the cache dir holding `libs/`."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(
            f"Kafka's tools need {', '.join(missing)} on PATH (Java 17+ and Maven 3.8+)"
        )
    result = subprocess.run(
        ["bash", str(FETCH)], check=False, capture_output=True, text=True, timeout=900
    )
    if result.returncode != 0:
        raise RuntimeError(f"tools/kafka-tools/fetch.sh failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def tool_cmd(tool: str, *args: str) -> list[str]:
    """argv running `tool` ("kafka-consumer-groups" or "kafka-topics") with `args`.

    A small heap, serial GC and C1 only: each run is a short-lived JVM (about a second),
    and tests run many of them on 2 cores.
    """
    libs = ensure_tools() / "libs"
    return [
        "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={HERE / 'log4j2-stderr.xml'}",
        "-cp", f"{libs}/*", MAIN_CLASSES[tool], *args,
    ]  # fmt: skip


def consumer_groups_cmd(*args: str) -> list[str]:
    """argv of `kafka-consumer-groups.sh args...`."""
    return tool_cmd("kafka-consumer-groups", *args)


def topics_cmd(*args: str) -> list[str]:
    """argv of `kafka-topics.sh args...`."""
    return tool_cmd("kafka-topics", *args)


def run(tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `tool` to completion; the caller checks the exit code and reads stdout/stderr."""
    return subprocess.run(
        tool_cmd(tool, *args), capture_output=True, text=True, timeout=timeout, check=False
    )
