"""What a process running XLA:CPU sets up before jax starts: the block-cache allocator and
huge pages (``backends.cpu.allocator``). Imports no jax, so the ``jaxdet`` command can call
it first.
"""

from __future__ import annotations

from jaxdet.backends.cpu.allocator import hint as allocator_hint
from jaxdet.backends.cpu.allocator import reexec_with_fast_allocator

__all__ = ["allocator_hint", "reexec_with_fast_allocator"]
