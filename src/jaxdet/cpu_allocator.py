"""Huge pages for XLA:CPU's buffers: one setting, ~2x on a MobileNet SSD train step.

XLA:CPU allocates every executable's temporary buffers afresh at each call. Buffers that large
are mmap'ed by glibc and unmapped on free, so each call faults in and zeroes every 4 KiB page
again: measured on the 2-core CPU machine, 558,000 page faults per SSD-MobileNetV2 train step
(batch 8, 2.2 GB), about half of the step. With ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``
(glibc >= 2.35) malloc asks the kernel for transparent huge pages (``madvise``), and the same
step takes 1,600 faults. The setting is read when a process starts, so the ``jaxdet`` command
and the throughput and profile benchmarks start themselves again with it
(:func:`reexec_with_huge_pages`); ``JAXDET_HUGE_PAGES=0`` turns that off. In one's own
Python process, export the variable before starting Python; :func:`hint` says so once when it
is missing.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb=1"
OPT_OUT = "JAXDET_HUGE_PAGES"
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


def reexec_with_huge_pages() -> None:
    """Replace this process by the same command with the tunable set, when that helps (see
    :func:`environment_with_huge_pages`); otherwise return. Call it first thing in an entry
    point, before any work: the process image is replaced."""
    env = environment_with_huge_pages(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)


_hinted = [False]


def hint() -> None:
    """Log once, on the CPU backend, how to get huge pages when this process runs without."""
    if _hinted[0] or environment_with_huge_pages(os.environ) is None:
        return
    _hinted[0] = True
    log.info("CPU steps run faster with huge pages: export GLIBC_TUNABLES=%s before starting "
             "Python (the jaxdet command does this itself).", TUNABLE)
