"""A real PostgreSQL server for tests and benchmarks: Debian's programs, our own cluster.

`initdb` and `pg_ctl` from tools/postgresql/install.sh, a cluster in a fresh temporary
directory, listening on a free loopback port only (and a socket in that directory), with
password (SCRAM) authentication over TCP as a production server would have. PostgreSQL
refuses to run as root, so as root the programs run as the `postgres` user Debian's
package creates. `stop` removes everything; nothing of the host is changed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
USER = "kgroups"
PASSWORD = "kgroups-test-password"


@functools.cache
def bindir() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "postgresql" / "install.sh")],
        check=True, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return Path(out.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1:`port`; `fsync` off unless asked (tests crash
    processes, never the machine)."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.fsync = fsync
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kgroups-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self._as = {"user": account.pw_uid, "group": account.pw_gid}

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run([str(bindir() / args[0]), *args[1:]], check=True, timeout=timeout,
                       capture_output=True, cwd=self.dir, **self._as)  # fmt: skip

    def start(self) -> PostgresServer:
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        self._run("initdb", "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}",
                  "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
                  "--locale=C.UTF-8", "--no-sync", timeout=120)  # fmt: skip
        pwfile.unlink()
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.dir} -c fsync={'on' if self.fsync else 'off'} "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        self._run("pg_ctl", action, "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "60", "-o", options, *extra, timeout=90)  # fmt: skip

    def pid(self) -> int:
        """The postmaster's process id (its backends are its children)."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def url(self, database: str = "postgres", *, password: bool = True) -> str:
        secret = f":{PASSWORD}" if password else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh, empty database; its URL (with the password)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restart(self, *, mode: str = "fast") -> None:
        """`immediate` is a crash (no checkpoint, WAL replayed at start)."""
        self._pg_ctl("restart", "-m", mode)

    def stop(self, *, mode: str = "fast") -> None:
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", timeout=90)

    def start_again(self) -> None:
        self._pg_ctl("start")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop(mode="immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
