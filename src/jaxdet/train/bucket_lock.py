"""One training run per workdir in a bucket: a lock object that machines sharing no disk
agree on.

``jaxdet train --workdir gs://bucket/run`` holds ``gs://bucket/run/.jaxdet-train.lock``
(process 0 of the run) from before it writes anything until it returns. The object is
created only if absent (GCS's ``ifGenerationMatch=0``), so of two jobs started on one
workdir the second is refused with one line naming the first (process, host, since when,
command). While the run lives, a background thread rewrites the object's ``heartbeat`` every
quarter of the stale time, each write conditional on the generation it wrote last. On exit
the run marks the object released (a conditional write too); a run that never got to exit
(SIGKILL, a lost VM) leaves it held, and the next run takes it over:

* at once when the holder was on the same host and its process is gone;
* otherwise once its heartbeat is older than the stale time (``$JAXDET_BUCKET_LOCK_STALE_S``,
  default 120 s), as on a preempted TPU VM's replacement.

Two jobs taking over the same stale lock race on its generation: one wins, the other is
refused. A run whose lock was taken over (its heartbeat stalled past the stale time) says so
in one error line.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator

from jaxdet.files import exclusive, join
from jaxdet.train.workdir_lock import LOCK_NAME, WorkdirBusy

DEFAULT_STALE_S = 120.0
log = logging.getLogger("jaxdet")


def stale_after_s() -> float:
    """Seconds without a heartbeat after which another run takes a lock over."""
    return float(os.environ.get("JAXDET_BUCKET_LOCK_STALE_S", DEFAULT_STALE_S))


def _record(*, released: bool = False) -> bytes:
    return json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(),
        "since": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(os.path.basename(a) if i == 0 else a
                            for i, a in enumerate(sys.argv))[:300],
        "heartbeat": time.time(), "released": released}).encode()


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    return False


def why_free(info: dict, stale_s: float) -> str | None:
    """Why a lock object's holder (its record, ``info``) no longer holds it, or None while it
    does: released, its process gone from this host, or no heartbeat for ``stale_s``."""
    if not info or info.get("released"):
        return "released"
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int) \
            and _process_gone(info["pid"]):
        return f"its process {info['pid']} on this host is gone"
    age = time.time() - float(info.get("heartbeat", 0))
    if age > stale_s:
        return f"no heartbeat for {age:.0f} s"
    return None


def _describe(info: dict) -> str:
    age = time.time() - float(info.get("heartbeat", 0))
    return (f"process {info.get('pid')} on {info.get('host')} (since {info.get('since')}: "
            f"{info.get('command')}; last heartbeat {age:.0f} s ago)")


class _Heartbeat(threading.Thread):
    """Rewrites the lock object every ``every`` seconds, each time on the condition that it
    is still at the generation written last."""

    def __init__(self, url: str, generation: str, every: float):
        super().__init__(name="jaxdet-bucket-lock", daemon=True)
        self.url, self.generation, self.every = url, generation, every
        self.stopped = threading.Event()
        self.lost = False

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                self.generation = exclusive.replace(self.url, _record(), self.generation)
            except FileExistsError:
                self.lost = True
                log.error("%s: this run's training lock was taken over by another job (its "
                          "heartbeat stalled past %.0f s); two runs now write this workdir",
                          self.url, stale_after_s())
                return
            except OSError as err:  # the store is unreachable: try again at the next beat
                log.warning("%s: heartbeat not written (%s)", self.url, err)


def _acquire(url: str, stale_s: float, workdir: str) -> str:
    try:
        return exclusive.create_new(url, _record())
    except FileExistsError:
        pass
    current = exclusive.read(url)
    try:
        info = json.loads(current.data or b"{}")
    except ValueError:
        info = {}
    reason = why_free(info, stale_s)
    if reason is None:
        raise WorkdirBusy(
            f"{workdir} is already being trained by {_describe(info)}; wait for that run, stop "
            "it (SIGTERM checkpoints and exits), or train in another --workdir (a run that "
            f"died leaves the lock, taken over {stale_s:.0f} s after its last heartbeat)")
    try:
        generation = exclusive.replace(url, _record(), current.generation)
    except FileExistsError:
        raise WorkdirBusy(f"{workdir}: another job took the workdir's lock at the same moment; "
                          "train in another --workdir or stop that job") from None
    if reason != "released":
        log.warning("%s: took over the training lock of %s (%s)", workdir, _describe(info),
                    reason)
    return generation


@contextlib.contextmanager
def hold_bucket_workdir(workdir: str) -> Iterator[str]:
    """Hold the training lock of the bucket workdir ``workdir`` (``gs://...``) for the
    ``with`` block; yields the lock object's URL.

    Raises:
      WorkdirBusy: another live run holds it (one line naming it)."""
    url = join(workdir, LOCK_NAME)
    stale_s = stale_after_s()
    generation = _acquire(url, stale_s, workdir)
    beat = _Heartbeat(url, generation, every=max(stale_s / 4, 0.5))
    beat.start()
    try:
        yield url
    finally:
        beat.stopped.set()
        beat.join()
        if not beat.lost:
            with contextlib.suppress(FileExistsError, OSError):
                exclusive.replace(url, _record(released=True), beat.generation)


__all__ = ["DEFAULT_STALE_S", "hold_bucket_workdir", "stale_after_s", "why_free"]
