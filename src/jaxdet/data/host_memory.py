"""Keep the input pipeline's image buffers mapped between samples (glibc's ``mallopt``).

Every sample allocates a few image-sized arrays (the decoded image, the resized canvas, the
batch): 0.5 to 10 MB each. glibc serves blocks above its mmap threshold (128 KiB, raised only
to the size of the last such block freed) with a fresh mapping and unmaps them on free, so the
kernel faults in and zeroes every page of every image again: about 5% of the loader's CPU time
on the zoo's configs. :func:`keep_buffers_mapped` raises the threshold to 64 MiB and the trim
threshold to 256 MiB once per process (the loader's threads and worker processes call it), so
those blocks are reused from malloc's arenas. The blocks XLA allocates for a train step are far
larger and go to ``jaxdet.backends.cpu.allocator``'s block cache or to mmap as before.

Only on glibc; ``JAXDET_MALLOC_TUNING=0`` leaves malloc as it is. The cost: freed memory up to
those sizes stays with the process instead of going back to the system.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger("jaxdet.data")

OPT_OUT = "JAXDET_MALLOC_TUNING"
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_done: list[int] = []  # the pid that tuned malloc (a forked child tunes its own again)


def keep_buffers_mapped() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True when they are set."""
    pid = os.getpid()
    if _done and _done[0] == pid:
        return True
    _done[:] = [pid]
    if os.environ.get(OPT_OUT, "1") == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
              and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    except (OSError, AttributeError) as err:
        log.debug("mallopt is not available: %s", err)
        return False
    return ok


__all__ = ["keep_buffers_mapped"]
