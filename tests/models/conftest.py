"""Helpers for tests/models.

Building a model for real compiles one random-number program per parameter shape (or one
large init program under jit), which costs seconds per model on a small CPU. Tests that only
need *some* non-degenerate weights build the model abstractly (``nnx.eval_shape``) and fill
it from numpy with the ``build_fast`` fixture; tests about initial values build for real.
"""

import jax
import numpy as np
import pytest
from flax import nnx


def _build_fast(factory, seed: int = 0):
    """``factory()`` with host-side random weights: He-normal kernels, BatchNorm scale/var
    in [0.5, 1.5], bias/mean in [-0.1, 0.1]."""
    graphdef, state = nnx.split(nnx.eval_shape(factory))
    rng = np.random.default_rng(seed)
    for path, var in nnx.to_flat_state(state):
        shape, dtype = var.shape, var.dtype
        name = path[-1]
        if name == "kernel":
            fan_in = int(np.prod(shape[:-1]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif name in ("scale", "var", "edge_weights"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name in ("bias", "mean"):
            value = rng.uniform(-0.1, 0.1, shape)
        elif isinstance(var, nnx.RngKey):
            var.set_value(jax.random.key(seed))
            continue
        elif isinstance(var, nnx.RngCount):
            value = np.zeros(shape, dtype)
        else:
            raise AssertionError(f"build_fast does not know how to fill {path}")
        var.set_value(jax.numpy.asarray(value, dtype))
    return nnx.merge(graphdef, state)


@pytest.fixture(scope="session")
def build_fast():
    """The :func:`_build_fast` helper: ``build_fast(factory, seed=0) -> module``."""
    return _build_fast


def torch_deterministic_weights(shapes: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """The fixture generators' weight rule (make_fixtures.py, make_effdet_fixture.py), drawn
    from one ``default_rng(seed)`` in the fixture's key order: kernels (ndim >= 2, torch
    layout) normal * sqrt(1 / fan_in); running_var, 1-D ``.weight`` (norm scales) and
    ``edge_weights`` U(0.5, 1.5); running_mean and biases U(-0.1, 0.1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, shape in shapes.items():
        if len(shape) >= 2:
            value = rng.standard_normal(shape) * np.sqrt(1.0 / np.prod(shape[1:]))
        elif key.endswith(("running_var", "edge_weights", ".weight")):
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.uniform(-0.1, 0.1, shape)
        out[key] = value.astype(np.float32)
    return out
