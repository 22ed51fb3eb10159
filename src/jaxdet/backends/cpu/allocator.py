"""How XLA:CPU's per-step buffers are allocated: two settings, ~1.2-2x on a CPU train step.

XLA:CPU allocates each executable's temporary buffer afresh at every call (2.3 GB for an
SSD-MobileNetV2 train step at batch 8, 3.4 GB for EfficientDet-D0 at batch 2) and frees it at
the end. glibc serves blocks that large with mmap and unmaps them on free, so the kernel faults
in and zeroes every page again at the next call:

1. **Huge pages.** With 4 KiB pages that is 558,000 page faults per MobileNet SSD step, about
   half of the step. ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35) makes malloc ask
   for transparent huge pages (``madvise``): 1,600 faults, but the kernel still zeroes 3.2 GB a
   step, 20-27% of the step's CPU time (``perf``: ``clear_page_erms``).
2. **A block cache** (``native/block_cache.c``, preloaded with ``LD_PRELOAD``) keeps freed
   blocks of 32 MiB and more mapped and hands them out again for the next request of the same
   size: no faults and no zeroing after the first steps. Steady train steps, 2-core Xeon:
   MobileNet SSD 785 -> 650 ms, EfficientDet-D0 1035 -> 830 ms, RetinaNet-R50 5.2 -> 4.9 s.
   It keeps at most 32 free blocks and half of physical memory. A request whose size's block
   is still in use waits up to 50 ms for it to come back (XLA frees a step's buffer just after
   the outputs are ready, often after the next step asked: a new 2.3 GB block, faulted and
   zeroed, had cost a random step of a run a second). ``JAXDET_BLOCK_CACHE=0`` turns it off,
   ``JAXDET_BLOCK_CACHE_BLOCKS`` / ``_MAX_MB`` / ``_MIN_MB`` / ``_WAIT_MS`` tune it. It is
   compiled once per machine with the system's C compiler into ``~/.cache/jaxdet``
   (``$XDG_CACHE_HOME``); without a compiler, or off glibc, only the huge pages apply (without
   a compiler, :func:`hint` says so once per machine: ``native_build.report_fallback``).

Both are read when a process starts, so the ``jaxdet`` command and the throughput and profile
benchmarks start themselves again with them (:func:`reexec_with_fast_allocator`);
``JAXDET_HUGE_PAGES=0`` turns the huge pages off. In one's own Python process, set the variables
before starting Python; :func:`hint` says how once when they are missing.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

from jaxdet.backends import native_build

TUNABLE = "glibc.malloc.hugetlb=1"
OPT_OUT = "JAXDET_HUGE_PAGES"
BLOCK_CACHE_OPT_OUT = "JAXDET_BLOCK_CACHE"
BLOCK_CACHE_SOURCE = Path(__file__).resolve().parent.parent / "native" / "block_cache.c"
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")

log = logging.getLogger(__name__)


def transparent_huge_pages_mode(setting: Path = THP_SETTING) -> str | None:
    """The kernel's transparent-huge-page mode (``always`` / ``madvise`` / ``never``): the
    bracketed word of ``setting``, or None where the file is absent (not Linux)."""
    try:
        text = setting.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def has_tunable(environ: Mapping[str, str]) -> bool:
    """Whether ``environ``'s GLIBC_TUNABLES already sets ``glibc.malloc.hugetlb``."""
    return any(item.split("=")[0] == "glibc.malloc.hugetlb"
               for item in environ.get("GLIBC_TUNABLES", "").split(":") if item)


def environment_with_huge_pages(environ: Mapping[str, str],
                                thp_mode: str | None = None) -> dict[str, str] | None:
    """A copy of ``environ`` with the tunable added to GLIBC_TUNABLES (other tunables kept), or
    None when a restart would gain nothing: already set, turned off by ``JAXDET_HUGE_PAGES=0``,
    not glibc, or the kernel's huge pages are ``never`` / absent."""
    if environ.get(OPT_OUT, "1") == "0" or has_tunable(environ):
        return None
    if platform.libc_ver()[0] != "glibc":
        return None
    mode = transparent_huge_pages_mode() if thp_mode is None else thp_mode  # "" = none
    if mode not in ("always", "madvise"):
        return None
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t]
    return {**environ, "GLIBC_TUNABLES": ":".join([*tunables, TUNABLE])}


def block_cache_library(cache_dir: Path | None = None, source: Path = BLOCK_CACHE_SOURCE,
                        compiler: str | None = None) -> Path | None:
    """The block-cache shim (``native/block_cache.c``) built for this machine: a shared library
    in ``cache_dir`` (default ``$XDG_CACHE_HOME/jaxdet``, else ``~/.cache/jaxdet``) named by the
    source's hash, compiled on the first call with ``compiler`` (default ``$CC``, ``cc``,
    ``gcc`` or ``clang``). Returns None where it cannot be had (not glibc Linux, no compiler, a
    failed build; the reason is logged at debug level)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return native_build.cached_library(
        source, "block_cache", compiler or native_build.compiler("block_cache"),
        ["-O2", "-shared", "-fPIC"], libraries=["-ldl", "-lpthread"], directory=cache_dir)


def environment_with_block_cache(environ: Mapping[str, str],
                                 library: Path | None) -> dict[str, str] | None:
    """A copy of ``environ`` with ``library`` first in LD_PRELOAD (other entries kept), or None
    when there is no library, it is already preloaded, or ``JAXDET_BLOCK_CACHE=0``."""
    if library is None or environ.get(BLOCK_CACHE_OPT_OUT, "1") == "0":
        return None
    preload = [p for p in environ.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p]
    if str(library) in preload:
        return None
    return {**environ, "LD_PRELOAD": ":".join([str(library), *preload])}


def fast_allocator_environment(environ: Mapping[str, str], thp_mode: str | None = None,
                               library: Path | None = None) -> dict[str, str] | None:
    """``environ`` with the huge-page tunable and the block cache added where each helps and
    is not turned off (``library`` default: :func:`block_cache_library`), or None when neither
    changes anything."""
    env = environment_with_huge_pages(environ, thp_mode) or dict(environ)
    if env.get(BLOCK_CACHE_OPT_OUT, "1") != "0":  # checked here too: no build when turned off
        env = environment_with_block_cache(env, library or block_cache_library()) or env
    return env if env != dict(environ) else None


def reexec_with_fast_allocator() -> None:
    """Replace this process by the same command with the huge pages and the block cache set,
    when that helps (see :func:`fast_allocator_environment`); otherwise return. Call it first
    thing in an entry point, before any work: the process image is replaced."""
    env = fast_allocator_environment(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


_hinted = [False]


def hint() -> None:
    """Log once, on the CPU backend, how to get huge pages and the block cache when this
    process runs without them; where the block cache cannot be built (no C compiler), the
    machine's one warning about native parts that fall back."""
    if _hinted[0]:
        return
    _hinted[0] = True
    if (os.environ.get(BLOCK_CACHE_OPT_OUT, "1") != "0" and platform.system() == "Linux"
            and platform.libc_ver()[0] == "glibc" and block_cache_library() is None):
        native_build.report_fallback("block_cache")
    env = fast_allocator_environment(os.environ)
    if env is None:
        return
    home = os.path.expanduser("~")
    wanted = " ".join(f"{k}={env[k]}".replace(home + os.sep, "~" + os.sep)
                      for k in ("LD_PRELOAD", "GLIBC_TUNABLES")
                      if env.get(k) != os.environ.get(k))
    # a notebook's kernel is started by Jupyter, not by its user: the hint is only noise there
    level = logging.DEBUG if "ipykernel" in sys.modules else logging.INFO
    log.log(level, "CPU steps run faster with XLA's buffers kept mapped: start Python with %s "
            "(the jaxdet command does this itself).", wanted)
