"""Shared helper for tests/core: run a function eagerly and under ``jax.jit``."""

import functools

import jax
import numpy as np
import pytest


@pytest.fixture(params=["eager", "jit"])
def run(request):
    """``run(fn, *arrays, **static)``: ``fn(*arrays, **static)`` eagerly or jitted.

    Eager mode runs under ``jax.disable_jit()`` (loops run as Python, every op dispatched
    one by one); jit mode closes the keyword arguments over as static values. Outputs come
    back as numpy (pytrees preserved).
    """

    def _run(fn, *args, **static):
        if request.param == "jit":
            out = jax.jit(functools.partial(fn, **static))(*args)
        else:
            with jax.disable_jit():
                out = fn(*args, **static)
        return jax.tree.map(np.asarray, out)

    _run.mode = request.param
    return _run
