"""A Spark executor in a pod that Spark's Kubernetes scheduler started (`--master k8s://`).

Spark creates each executor pod from the image in `spark.kubernetes.container.image`
with the single argument `executor` and says everything else in the environment:
`SPARK_DRIVER_URL`, `SPARK_EXECUTOR_ID`, `SPARK_EXECUTOR_CORES`, `SPARK_EXECUTOR_MEMORY`,
`SPARK_APPLICATION_ID`, `SPARK_EXECUTOR_POD_IP`, `SPARK_RESOURCE_PROFILE_ID`, the JVM's
options as `SPARK_JAVA_OPT_0`, `SPARK_JAVA_OPT_1`, ... and the directory of the
configuration it mounts (`SPARK_CONF_DIR`). Apache's Spark images answer with a shell
entrypoint; kgroups' image has Spark as pip installs it (pyspark's `jars/`), so this
module is its entrypoint: `executor` starts Spark's executor backend from that
environment, anything else is run as given (the application's driver, in client mode).

`command` is the pure part (the environment in, the argument vector out) so that it is
tested without a pod; `main` replaces this process with it, so that the JVM receives the
pod's signals and its exit status is the container's.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
REQUIRED = (
    "SPARK_DRIVER_URL",
    "SPARK_EXECUTOR_ID",
    "SPARK_EXECUTOR_CORES",
    "SPARK_EXECUTOR_MEMORY",
    "SPARK_APPLICATION_ID",
    "SPARK_EXECUTOR_POD_IP",
)
_JAVA_OPT = re.compile(r"SPARK_JAVA_OPT_(\d+)")


class NotAnExecutorPod(ValueError):
    """The environment lacks what Spark's scheduler gives every executor pod."""


def java_options(env: Mapping[str, str]) -> list[str]:
    """`SPARK_JAVA_OPT_<n>` in the order of n (Spark numbers them in its order)."""
    found = [(int(m.group(1)), v) for k, v in env.items() if (m := _JAVA_OPT.fullmatch(k))]
    return [value for _, value in sorted(found)]


def command(env: Mapping[str, str], spark_home: Path, java: str = "java") -> list[str]:
    """The executor backend's command line, from the pod's environment."""
    missing = [name for name in REQUIRED if not env.get(name)]
    if missing:
        raise NotAnExecutorPod(
            f"not started by Spark's Kubernetes scheduler: {', '.join(missing)} unset"
        )
    classpath = [env["SPARK_CONF_DIR"]] if env.get("SPARK_CONF_DIR") else []
    classpath.append(str(spark_home / "jars" / "*"))
    classpath += [p for p in env.get("SPARK_CLASSPATH", "").split(":") if p]
    memory = env["SPARK_EXECUTOR_MEMORY"]
    return [
        java,
        *java_options(env),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        ":".join(classpath),
        BACKEND,
        "--driver-url", env["SPARK_DRIVER_URL"],
        "--executor-id", env["SPARK_EXECUTOR_ID"],
        "--cores", env["SPARK_EXECUTOR_CORES"],
        "--app-id", env["SPARK_APPLICATION_ID"],
        "--hostname", env["SPARK_EXECUTOR_POD_IP"],
        "--resourceProfileId", env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
    ]  # fmt: skip


def environment(env: Mapping[str, str], spark_home: Path) -> dict[str, str]:
    """The executor's environment: Spark's home for its Python workers, and the pod's IP
    as the address Spark binds (an image may default SPARK_LOCAL_IP to loopback, right
    for local mode and wrong for an executor the driver must reach)."""
    return {
        **env,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": env["SPARK_EXECUTOR_POD_IP"],
    }


def workdir(env: Mapping[str, str]) -> Path:
    """Where the executor runs: it fetches the application's jars and files into its
    working directory, so that must be writable by the pod's user, which the image's
    WORKDIR is not. Spark's own local directory (an emptyDir it mounts, named in
    SPARK_EXECUTOR_DIRS) is; the temporary directory otherwise."""
    dirs = [d for d in env.get("SPARK_EXECUTOR_DIRS", "").split(os.pathsep) if d]
    return Path(dirs[0] if dirs else tempfile.gettempdir()) / "work"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m kgroups.spark.executor executor | COMMAND [ARG]...",
              file=sys.stderr)  # fmt: skip
        return 2
    if args[0] != "executor":
        os.execvp(args[0], args)
    home = spark_home()
    jdk = os.environ.get("JAVA_HOME")
    java = str(Path(jdk, "bin", "java")) if jdk else "java"
    try:
        argv_ = command(os.environ, home, java)
    except NotAnExecutorPod as e:
        print(f"kgroups.spark.executor: {e}", file=sys.stderr)
        return 2
    where = workdir(os.environ)
    where.mkdir(parents=True, exist_ok=True)
    os.chdir(where)
    os.execvpe(argv_[0], argv_, environment(os.environ, home))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
