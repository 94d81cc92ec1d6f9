"""Files that readers see whole or not at all (the sidecar's assignment file, the Spark
members' staged output): write a temporary file beside the target, fsync, rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


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
