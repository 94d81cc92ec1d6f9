"""The Spark image's entrypoint for executor pods (`kgroups.spark.executor`): the command
Spark's Kubernetes scheduler expects from the environment it gives each executor pod.
(tests/cluster/test_kind.py runs such executors on kind.)"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kgroups.spark import executor

POD = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.244.0.17:7078",
    "SPARK_EXECUTOR_ID": "3",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_EXECUTOR_MEMORY": "1024m",
    "SPARK_APPLICATION_ID": "spark-8f1c",
    "SPARK_EXECUTOR_POD_IP": "10.244.0.23",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_10": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_2": "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "SPARK_JAVA_OPT_0": "-Djava.net.preferIPv6Addresses=false",
    "SPARK_LOCAL_IP": "127.0.0.1",
}


def test_the_backend_gets_the_pods_settings_and_java_options_in_sparks_order() -> None:
    cmd = executor.command(POD, Path("/site/pyspark"), "/jdk/bin/java")
    assert cmd[:4] == [
        "/jdk/bin/java",
        "-Djava.net.preferIPv6Addresses=false",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "-Dspark.driver.port=7078",  # 10 after 2: numbers, not strings
    ]
    assert cmd[4:8] == ["-Xms1024m", "-Xmx1024m", "-cp", "/opt/spark/conf:/site/pyspark/jars/*"]
    assert cmd[8] == executor.BACKEND
    flags = dict(zip(cmd[9::2], cmd[10::2], strict=True))
    assert flags == {
        "--driver-url": POD["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "1",
        "--app-id": "spark-8f1c",
        "--hostname": "10.244.0.23",
        "--resourceProfileId": "0",
    }


def test_the_executor_binds_the_pods_address_not_the_images_loopback() -> None:
    env = executor.environment(POD, Path("/site/pyspark"))
    assert env["SPARK_LOCAL_IP"] == "10.244.0.23"
    assert env["SPARK_HOME"] == "/site/pyspark"  # where its Python workers find pyspark


def test_the_executor_works_where_it_may_write_its_jars() -> None:
    pod = {**POD, "SPARK_EXECUTOR_DIRS": "/var/data/spark-1a2b:/var/data/spark-3c4d"}
    assert executor.workdir(pod) == Path("/var/data/spark-1a2b/work")  # Spark's emptyDir
    assert executor.workdir(POD).parent == Path(tempfile.gettempdir())


def test_a_pod_spark_did_not_start_is_told_what_is_missing() -> None:
    partial = {k: v for k, v in POD.items() if k != "SPARK_DRIVER_URL"}
    with pytest.raises(executor.NotAnExecutorPod, match="SPARK_DRIVER_URL"):
        executor.command(partial, Path("/x"))
    run = subprocess.run(
        [sys.executable, "-m", "kgroups.spark.executor", "executor"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 2 and "SPARK_DRIVER_URL" in run.stderr, run.stderr


def test_any_other_command_runs_as_given() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kgroups.spark.executor", sys.executable, "-c", "print('driver')"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (run.returncode, run.stdout) == (0, "driver\n"), run.stderr
