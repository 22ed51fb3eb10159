"""Abstract builds: the key-only random streams give the shapes and dtypes of a real build."""

from __future__ import annotations

import jax
import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.models.abstract import abstract_build, model_rngs


def _shapes(module: nnx.Module) -> dict:
    flat = nnx.to_flat_state(nnx.state(module))
    return {path: (tuple(v.shape), str(v.dtype)) for path, v in flat}


@pytest.mark.parametrize("name", ["shapes_demo", "efficientdet_d0", "centernet_deepmac_shapes_demo",
                                  "mask_rcnn_shapes_demo", "unet3d_demo"])
@pytest.mark.slow
def test_abstract_build_equals_a_traced_build(name):
    """Every family's model, built inside ``abstract_build`` and by plain ``nnx.eval_shape``
    (real ``nnx.Rngs``): the same variables, shapes and dtypes, and no value computed."""
    config = load_config(name)

    def build():
        return tasks.build_task(config, seed=0).model

    fast = abstract_build(build)
    reference = nnx.eval_shape(build)
    assert _shapes(fast) == _shapes(reference)
    assert len(_shapes(fast)) > 10
    leaves = jax.tree.leaves(nnx.state(fast))
    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)


def test_model_rngs_are_real_outside_an_abstract_build():
    """Outside ``abstract_build`` builders draw from ``nnx.Rngs(seed)``: two draws differ, and
    the same seed repeats them."""
    a, b = model_rngs(3), model_rngs(3)
    first, second = a.params(), a.params()
    assert isinstance(a, nnx.Rngs)
    assert not bool((jax.random.key_data(first) == jax.random.key_data(second)).all())
    assert bool((jax.random.key_data(b.params()) == jax.random.key_data(first)).all())
