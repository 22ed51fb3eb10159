"""One training run per workdir: an advisory lock on a file in it.

``jaxdet train`` holds ``WORKDIR/.jaxdet-train.lock`` (``fcntl.flock``) from before it touches
the workdir until it returns. The kernel releases the lock when the process ends in any way,
SIGKILL included, so a crashed run never leaves a stale lock. The file names the holder (process
id, host, start time, command) for the refusal message; it is left in place (an empty or stale
file means nothing: only the kernel's lock counts). Readers (``eval``, ``predict``, ``export``)
take no lock: they read the newest complete checkpoint, which orbax only ever renames into place.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".jaxdet-train.lock"


class WorkdirBusy(RuntimeError):
    """Another process is training in this workdir."""


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another process"
    return (f"process {info.get('pid')} on {info.get('host')} (since {info.get('since')}: "
            f"{info.get('command')})")


@contextlib.contextmanager
def hold_workdir(workdir: str | Path) -> Iterator[Path]:
    """Hold ``workdir``'s training lock for the ``with`` block; yields the lock file's path.

    Raises :class:`WorkdirBusy` naming the holder (process id, host, since when, command) when
    another process holds it."""
    path = Path(workdir) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkdirBusy(
                f"{workdir} is already being trained by {_holder(path)}; wait for that run, "
                "stop it (SIGTERM checkpoints and exits), or train in another --workdir"
            ) from None
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.datetime.now().isoformat(timespec="seconds"),
                "command": " ".join(os.path.basename(a) if i == 0 else a
                                    for i, a in enumerate(sys.argv))[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = ["LOCK_NAME", "WorkdirBusy", "hold_workdir"]
