"""Files that readers see whole or not at all (the sidecar's assignment file, the Spark
members' staged output): write a temporary file beside the target, fsync, rename. And
files others rewrite under us (mounted Secrets): `Reloading`."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

log = logging.getLogger("kgroups.files")
T = TypeVar("T")


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never a torn write. The temporary file
    starts with "." so that nothing matching the target's own naming sees it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


TERMINATION_LOG = Path(os.environ.get("KGROUPS_TERMINATION_LOG", "/dev/termination-log"))
"""Where Kubernetes looks for why a container stopped (a container's default
terminationMessagePath): the pod's lastState and `kubectl describe pod` show it."""


def say_why_stopped(message: str) -> None:
    """Leave `message` where a kubelet reads it, if one made the file (in a pod)."""
    if TERMINATION_LOG.exists():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(message + "\n")


class Reloading(Generic[T]):
    """A value built from files (certificates, a credentials Secret, a token), rebuilt by
    `reload()` when their content changed. Kubernetes updates a mounted Secret by swapping
    a symlink, so content, not modification times, decides. A change that cannot be built
    (a half-written file, a key that does not match) keeps the last good value, and is
    reported once, not on every poll."""

    def __init__(self, what: str, paths: Sequence[Path], build: Callable[[], T]) -> None:
        """Build now: a first value that cannot be built raises (the caller's error).
        `build` refuses bad content with a ValueError (or OSError)."""
        self.what = what
        self._paths = tuple(paths)
        self._build = build
        self._digest = self._read_digest()
        self._refused: bytes | None = None
        self.value = build()
        self.reloads = 0

    def _read_digest(self) -> bytes:
        digest = hashlib.sha256()
        for path in self._paths:
            digest.update(path.read_bytes())
        return digest.digest()

    def reload(self) -> bool:
        """True if the files changed and the new value is in place."""
        try:
            digest = self._read_digest()
            if digest in (self._digest, self._refused):
                return False
            self._refused = digest
            value = self._build()
        except (OSError, ValueError) as exc:  # builders refuse with ValueError
            log.error(  # noqa: TRY400 - the reason is the message; no traceback wanted
                "%s changed but cannot be used, keeping the previous: %s", self.what, exc
            )
            return False
        self.value, self._digest, self._refused = value, digest, None
        self.reloads += 1
        log.info("%s reloaded", self.what)
        return True
