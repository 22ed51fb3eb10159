"""Schedules against hand-computed TF OD API values; optimizers against hand-computed steps."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdet.models.param_rules import ParamPattern
from jaxdet.train import optim
from random_arrays import normal, seeds


def _check(schedule, expected: dict[int, float]):
    jitted = jax.jit(schedule)
    for step, value in expected.items():
        assert float(schedule(step)) == pytest.approx(value, rel=1e-6, abs=1e-9), step
        assert float(jitted(jnp.int32(step))) == pytest.approx(value, rel=1e-6, abs=1e-9), step


def test_cosine_decay_with_warmup():
    s = optim.cosine_decay_with_warmup(0.1, total_steps=100, warmup_learning_rate=0.01,
                                       warmup_steps=10)
    _check(s, {
        0: 0.01, 5: 0.055, 9: 0.091,  # linear warmup 0.01 -> 0.1
        10: 0.1,  # cos(0)
        55: 0.05,  # cos(pi/2)
        82: 0.05 * (1 + math.cos(math.pi * 72 / 90)),
        100: 0.0,  # cos(pi)
        101: 0.0, 10_000: 0.0,  # zero after total_steps
    })


def test_cosine_decay_with_hold_and_no_warmup():
    s = optim.cosine_decay_with_warmup(0.2, total_steps=100, warmup_learning_rate=0.0,
                                       warmup_steps=10, hold_base_rate_steps=20)
    _check(s, {0: 0.0, 5: 0.1, 10: 0.2, 20: 0.2, 30: 0.2,  # hold includes step 30
               31: 0.1 * (1 + math.cos(math.pi / 70)), 65: 0.1, 100: 0.0, 101: 0.0})
    s = optim.cosine_decay_with_warmup(1.0, total_steps=4)
    _check(s, {0: 1.0, 1: 0.5 * (1 + math.cos(math.pi / 4)), 2: 0.5, 4: 0.0, 5: 0.0})


def test_cosine_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        optim.cosine_decay_with_warmup(0.1, total_steps=5, warmup_steps=10)
    with pytest.raises(ValueError, match="warmup_learning_rate"):
        optim.cosine_decay_with_warmup(0.1, 100, warmup_learning_rate=0.2, warmup_steps=10)


def test_manual_stepping():
    s = optim.manual_stepping([5, 10], [0.1, 0.01, 0.001])
    _check(s, {0: 0.1, 4: 0.1, 5: 0.01, 9: 0.01, 10: 0.001, 100_000: 0.001})
    _check(optim.manual_stepping([], [0.3]), {0: 0.3, 7: 0.3})


def test_manual_stepping_with_warmup():
    # the TF OD API's own test case
    s = optim.manual_stepping([4, 6, 8], [0.02, 0.10, 0.01, 0.001], warmup=True)
    expected = [0.02, 0.04, 0.06, 0.08, 0.10, 0.10, 0.01, 0.01, 0.001, 0.001]
    _check(s, dict(enumerate(expected)))


def test_manual_stepping_rejects_bad_arguments():
    with pytest.raises(ValueError, match="increasing"):
        optim.manual_stepping([5, 5], [0.1, 0.01, 0.001])
    with pytest.raises(ValueError, match="len\\(boundaries\\) \\+ 1"):
        optim.manual_stepping([5], [0.1])
    with pytest.raises(ValueError, match="zero"):
        optim.manual_stepping([0, 5], [0.1, 0.01, 0.001])


def test_exponential_decay_with_burnin():
    # the TF OD API's own test case
    s = optim.exponential_decay(1.0, decay_steps=3, decay_factor=0.1, burnin_learning_rate=0.5,
                                burnin_steps=2, min_learning_rate=0.05)
    expected = [0.5, 0.5, 1, 1, 1, 0.1, 0.1, 0.1, 0.05]
    _check(s, dict(enumerate(expected)))


def test_exponential_decay_smooth_and_default_burnin():
    s = optim.exponential_decay(0.4, decay_steps=10, decay_factor=0.5, staircase=False)
    _check(s, {0: 0.4, 5: 0.4 * 0.5**0.5, 10: 0.2, 25: 0.4 * 0.5**2.5})
    s = optim.exponential_decay(0.4, decay_steps=10, decay_factor=0.5, burnin_steps=3)
    _check(s, {0: 0.4, 2: 0.4, 3: 0.4, 12: 0.4, 13: 0.2})  # burn-in rate 0 -> base rate


def test_constant():
    _check(optim.constant(0.004), {0: 0.004, 123456: 0.004})


# --------------------------------------------------------------------------- optimizers

def _run(tx, params, grads, steps):
    @jax.jit
    def step(params, state):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    state = tx.init(params)
    for _ in range(steps):
        params, state = step(params, state)
    return params


def test_momentum_with_decay_and_clipping_by_hand():
    """Coupled decay joins the gradient before clipping, as TF's regularization loss does."""
    params = {"w": jnp.array([[3.0, 4.0]]), "b": jnp.array([1.0])}
    grads = {"w": jnp.array([[6.0, 8.0]]), "b": jnp.array([0.0])}
    tx = optim.make_optimizer("momentum", optim.constant(0.1), momentum=0.9,
                              weight_decay=0.1, clip_gradient_norm=5.0)
    # step 1: + 0.1 * w -> [6.3, 8.4] (global norm 10.5; b is 1-d, not decayed)
    #         clip to norm 5 -> [3, 4]; trace = [3, 4]; w = [3, 4] - 0.1 * trace
    p1 = _run(tx, params, grads, 1)
    np.testing.assert_allclose(p1["w"], [[2.7, 3.6]], rtol=1e-6)
    np.testing.assert_allclose(p1["b"], [1.0])
    # step 2: g = [6, 8] + 0.1 * [2.7, 3.6] = [6.27, 8.36] (norm 10.45) -> clipped [3, 4]
    #         trace = [3, 4] + 0.9 * [3, 4] = [5.7, 7.6]; w = p1 - 0.1 * trace
    p2 = _run(tx, params, grads, 2)
    np.testing.assert_allclose(p2["w"], [[2.7 - 0.57, 3.6 - 0.76]], rtol=1e-6)
    np.testing.assert_allclose(p2["b"], [1.0])


def test_keras_momentum_carries_each_steps_rate_by_hand():
    """TF2's Keras SGD: v = m v - lr_t g, w += v; optax's: t = m t + g, w -= lr_t t. With a
    rate of 1, 2, 3 and a gradient of 1 at every step (m = 0.5): Keras moves by 1, 2.5, 4.25;
    optax by 1, 3, 5.25."""
    params, grads = {"w": jnp.zeros(())}, {"w": jnp.ones(())}
    rate = lambda count: count + 1.0  # noqa: E731
    keras = optim.make_optimizer("momentum", rate, momentum=0.5, momentum_form="keras")
    plain = optim.make_optimizer("momentum", rate, momentum=0.5)
    for steps, moved_keras, moved_optax in ((1, 1.0, 1.0), (2, 3.5, 4.0), (3, 7.75, 9.25)):
        np.testing.assert_allclose(_run(keras, params, grads, steps)["w"], -moved_keras)
        np.testing.assert_allclose(_run(plain, params, grads, steps)["w"], -moved_optax)


def test_weight_decay_rules_by_hand():
    """Each parameter's decay: the first matching rule's weight, else weight_decay on kernels
    (ndim > 1) only; a depthwise narrowing; a rule matching nothing refused."""
    params = {"backbone": {"dw": {"kernel": jnp.ones((3, 3, 1, 2))},
                           "se": {"kernel": jnp.ones((1, 1, 2, 2)), "bias": jnp.ones((2,))},
                           "pw": {"kernel": jnp.ones((1, 1, 2, 2)), "bias": jnp.ones((2,))}},
              "head": {"kernel": jnp.ones((3, 3, 2, 2)), "bias": jnp.ones((2,))}}
    rules = [(ParamPattern(r"^backbone/se/"), 1e-5),
             (ParamPattern(r"^backbone/", depthwise=True), 0.0),
             (ParamPattern(r"^backbone/.*kernel$"), 2e-5)]
    weights = optim.decay_weights(params, 4e-5, rules)
    assert weights == {"backbone": {"dw": {"kernel": 0.0},
                                    "se": {"kernel": 1e-5, "bias": 1e-5},
                                    "pw": {"kernel": 2e-5, "bias": 0.0}},
                       "head": {"kernel": 4e-5, "bias": 0.0}}
    # one momentum-SGD step: g + w * p, lr 0.5 (first step: the trace is the gradient)
    grads = jax.tree.map(jnp.zeros_like, params)
    tx = optim.make_optimizer("momentum", 0.5, weight_decay=4e-5, weight_decay_rules=rules)
    new = _run(tx, params, grads, 1)
    expected = jax.tree.map(lambda p, w: p - 0.5 * w * p, params, weights)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-7), new, expected)
    bad = optim.make_optimizer("momentum", 0.5, weight_decay_rules=[(ParamPattern("^neck/"), 1.0)])
    with pytest.raises(ValueError, match=r"weight_decay_rules\[0\]: params '\^neck/' matches no"):
        _run(bad, params, grads, 1)


def test_adamw_with_uniform_rules_matches_optax():
    keys = seeds(0, 4)
    params = {"conv": {"kernel": normal(keys[0], (3, 3, 2, 4)),
                       "bias": normal(keys[1], (4,))}}
    grads = {"conv": {"kernel": normal(keys[2], (3, 3, 2, 4)),
                      "bias": normal(keys[3], (4,))}}
    ours = _run(optim.make_optimizer("adamw", 1e-2, weight_decay=0.05,
                                     weight_decay_rules=[(ParamPattern("kernel$"), 0.05)]),
                params, grads, 3)
    mask = jax.tree.map(lambda p: p.ndim > 1, params)
    ref = _run(optax.adamw(1e-2, weight_decay=0.05, mask=mask), params, grads, 3)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), ours, ref)


def test_adamw_matches_optax():
    keys = seeds(0, 4)
    params = {"conv": {"kernel": normal(keys[0], (3, 3, 2, 4)),
                       "bias": normal(keys[1], (4,))}}
    grads = {"conv": {"kernel": normal(keys[2], (3, 3, 2, 4)),
                      "bias": normal(keys[3], (4,))}}
    lr = optim.cosine_decay_with_warmup(1e-2, total_steps=10, warmup_steps=2)
    ours = _run(optim.make_optimizer("adamw", lr, weight_decay=0.05, beta2=0.99), params, grads, 4)
    mask = jax.tree.map(lambda p: p.ndim > 1, params)
    ref = _run(optax.adamw(lr, b2=0.99, weight_decay=0.05, mask=mask), params, grads, 4)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), ours, ref)


@pytest.mark.parametrize("name", ["momentum", "sgd", "adam", "adamw", "rmsprop"])
def test_default_mask_excludes_1d_params(name):
    params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,)), "scale": jnp.ones((2,))}
    zeros = jax.tree.map(jnp.zeros_like, params)  # only weight decay moves params
    out = _run(optim.make_optimizer(name, 0.1, weight_decay=0.5), params, zeros, 1)
    assert float(out["kernel"][0, 0]) < 1.0
    np.testing.assert_array_equal(out["bias"], params["bias"])
    np.testing.assert_array_equal(out["scale"], params["scale"])
    # a custom mask replaces the default
    no_decay = lambda p: jax.tree.map(lambda _: False, p)
    out = _run(optim.make_optimizer(name, 0.1, weight_decay=0.5, decay_mask=no_decay),
               params, zeros, 1)
    np.testing.assert_array_equal(out["kernel"], params["kernel"])


def test_optimizers_jit_and_reject_unknown_name():
    params = {"w": jnp.ones((2, 3))}
    grads = {"w": jnp.full((2, 3), 0.5)}
    for name in optim.OPTIMIZER_NAMES:
        tx = optim.make_optimizer(name, optim.manual_stepping([2], [0.1, 0.01]),
                                  clip_gradient_norm=1.0, weight_decay=1e-4)
        state = tx.init(params)
        updates, _ = jax.jit(tx.update)(grads, state, params)
        assert np.all(np.asarray(updates["w"]) < 0), name
    with pytest.raises(ValueError, match="not one of"):
        optim.make_optimizer("lamb", 0.1)
