"""Shared helper for tests/parallel: leaf-by-leaf comparison of two pytrees."""

from __future__ import annotations

import jax
import numpy as np


def assert_trees_close(actual, expected, *, rtol: float, atol: float, what: str) -> None:
    """Same structure (leaf count), each leaf within ``rtol`` / ``atol``; a failure names
    ``what`` and the leaf's path."""
    flat_a = jax.tree_util.tree_leaves_with_path(actual)
    flat_e = jax.tree.leaves(expected)
    assert len(flat_a) == len(flat_e)
    for (path, a), e in zip(flat_a, flat_e, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol,
                                   err_msg=f"{what} {jax.tree_util.keystr(path)}")
