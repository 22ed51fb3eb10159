"""Host-drawn initializers: the distributions Flax's would draw, fixed by the key, no compiles,
and Flax's own under tracing."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.models import initializers as I

SHAPE = (3, 3, 64, 128)  # HWIO: receptive field 9, fan_in 576, fan_out 1152


@pytest.mark.parametrize(
    "scale,mode,distribution,expected_std",
    [
        (2.0, "fan_out", "normal", np.sqrt(2.0 / 1152)),
        (1.0, "fan_in", "truncated_normal", np.sqrt(1.0 / 576)),
        (1.0, "fan_avg", "uniform", np.sqrt(1.0 / 864)),
    ],
)
def test_variance_scaling_std_matches_flax_and_the_formula(scale, mode, distribution, expected_std):
    ours = np.asarray(I.variance_scaling(scale, mode, distribution)(jax.random.key(0), SHAPE))
    flax = np.asarray(nnx.initializers.variance_scaling(scale, mode, distribution)(
        jax.random.key(0), SHAPE))
    assert ours.shape == SHAPE and ours.dtype == np.float32
    # 73728 draws: the sample std is within 1% of the true one.
    assert ours.std() == pytest.approx(expected_std, rel=0.01)
    assert flax.std() == pytest.approx(expected_std, rel=0.01)
    assert abs(ours.mean()) < 0.02 * expected_std  # 5 standard errors
    if distribution == "uniform":
        limit = np.sqrt(3.0) * expected_std
        assert ours.max() <= limit and ours.min() >= -limit
        assert ours.max() > 0.99 * limit
    if distribution == "truncated_normal":
        bound = 2.0 * expected_std / 0.87962566103423978
        assert np.abs(ours).max() <= bound
        assert np.abs(ours).max() > 0.99 * bound


def test_truncated_normal_and_normal_keep_flax_meaning_of_stddev():
    trunc = np.asarray(I.truncated_normal(0.03)(jax.random.key(1), (200, 500)))
    assert np.abs(trunc).max() <= 0.06
    # a unit normal truncated to [-2, 2] has std 0.8796
    assert trunc.std() == pytest.approx(0.03 * 0.87962566, rel=0.01)
    norm = np.asarray(I.normal(0.01)(jax.random.key(1), (200, 500)))
    assert norm.std() == pytest.approx(0.01, rel=0.01)
    assert np.abs(norm).max() > 0.03  # untruncated: 4-sigma draws exist in 1e5 samples


def test_values_are_fixed_by_the_key_and_differ_between_keys():
    init = I.variance_scaling(2.0, "fan_out", "normal")
    a = np.asarray(init(jax.random.key(7), SHAPE))
    b = np.asarray(init(jax.random.key(7), SHAPE))
    c = np.asarray(init(jax.random.key(8), SHAPE))
    raw = np.asarray(init(jax.random.PRNGKey(7), SHAPE))  # raw uint32 key, same seed data
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, raw)
    assert not np.allclose(a, c)
    folded = np.asarray(init(jax.random.fold_in(jax.random.key(7), 1), SHAPE))
    assert not np.allclose(a, folded)


def test_constants_and_dtype():
    x = I.constant(-4.595)(jax.random.key(0), (5, 2), jnp.bfloat16)
    assert x.dtype == jnp.bfloat16 and x.shape == (5, 2)
    np.testing.assert_array_equal(np.asarray(x, np.float32),
                                  np.full((5, 2), np.float32(jnp.bfloat16(-4.595))))
    np.testing.assert_array_equal(np.asarray(I.zeros_init()(jax.random.key(0), (3,))), 0.0)
    np.testing.assert_array_equal(np.asarray(I.ones_init()(jax.random.key(0), (3,))), 1.0)


def test_no_compile_per_shape(caplog):
    init = I.variance_scaling(2.0, "fan_out", "normal")
    key = jax.random.key(0)
    init(key, (1, 1, 8, 8))  # warm anything shape-independent
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax"):
        for c in range(9, 15):
            init(key, (3, 3, c, 2 * c))
    assert not [r for r in caplog.records if "Finished XLA compilation" in r.getMessage()]


def test_traced_keys_use_flax_initializer():
    init = I.variance_scaling(2.0, "fan_out", "normal")
    out = jax.eval_shape(lambda k: init(k, SHAPE), jax.random.key(0))
    assert out.shape == SHAPE and out.dtype == jnp.float32
    jitted = np.asarray(jax.jit(lambda k: init(k, SHAPE))(jax.random.key(0)))
    flax = np.asarray(nnx.initializers.variance_scaling(2.0, "fan_out", "normal")(
        jax.random.key(0), SHAPE))
    np.testing.assert_allclose(jitted, flax, rtol=1e-6)


def test_bad_mode_and_distribution_are_named():
    with pytest.raises(ValueError, match="fan_in, fan_out or fan_avg"):
        I.variance_scaling(1.0, "fan_max", "normal")
    with pytest.raises(ValueError, match="normal, truncated_normal or uniform"):
        I.variance_scaling(1.0, "fan_in", "cauchy")


def test_uniform_limit():
    x = np.asarray(I.uniform(0.5)(jax.random.key(3), (300, 300)))
    assert x.min() >= -0.5 and x.max() < 0.5 and x.max() > 0.49
    assert x.std() == pytest.approx(0.5 / np.sqrt(3.0), rel=0.01)
    traced = jax.jit(lambda k: I.uniform(0.5)(k, (4, 4)))(jax.random.key(3))
    assert float(jnp.max(jnp.abs(traced))) <= 0.5
