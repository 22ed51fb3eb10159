"""What a process running XLA:CPU sets up before jax starts: the block-cache allocator and
huge pages (``backends.cpu.allocator``). Imports no jax, so the ``jaxdet`` command can call
it first; :func:`fast_allocator_environment` gives the same settings to a child process (a
benchmark gives them to the framework it measures jaxdet against). And what its output goes
to: a terminal or a notebook, where progress bars redraw in place, or a file, which gets plain
lines instead.
"""

from __future__ import annotations

import sys

from jaxdet.backends.cpu.allocator import fast_allocator_environment, reexec_with_fast_allocator
from jaxdet.backends.cpu.allocator import hint as allocator_hint


def draws_progress_bars() -> bool:
    """Whether progress bars are worth drawing: stderr is a terminal, or this process is a
    Jupyter kernel (the bar redraws in its cell there). Output to a file or a
    pipe gets plain log lines instead of redraws."""
    if sys.stderr.isatty():
        return True
    shell = sys.modules.get("IPython")
    ipython = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    return ipython is not None and "IPKernelApp" in getattr(ipython, "config", {})


__all__ = ["allocator_hint", "draws_progress_bars", "fast_allocator_environment",
           "reexec_with_fast_allocator"]
