"""freeze_variables / update_trainable_variables (TF train_config) and a one-step tiny run
with hard example mining + weighted sigmoid loss and the backbone frozen."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdet import tasks
from jaxdet.config.loader import ConfigError, load_config
from jaxdet.train import build as train_build
from jaxdet.train import optim
from jaxdet.train.step import init_train_state, make_train_step


def _params():
    return {
        "backbone": {"layer": {0: {"kernel": jnp.ones((2, 2))}}},
        "head": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,))},
    }


def _step(tx, params):
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates)


def test_paths_and_mask():
    params = _params()
    paths = [optim.param_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    assert paths == ["backbone/layer/0/kernel", "head/bias", "head/kernel"]
    mask = optim.trainable_mask(params, freeze_variables=["^backbone/"])
    assert jax.tree.leaves(mask) == [False, True, True]
    mask = optim.trainable_mask(params, ["^backbone/"], update_trainable_variables=["kernel"])
    assert jax.tree.leaves(mask) == [False, False, True]


def test_frozen_params_keep_values_and_clipping_sees_trained_only():
    tx = optim.make_optimizer("momentum", 0.1, weight_decay=0.5, clip_gradient_norm=1.0,
                              freeze_variables=["^backbone/"])
    new = _step(tx, _params())
    np.testing.assert_array_equal(new["backbone"]["layer"][0]["kernel"], np.ones((2, 2)))
    # 6 trained gradient entries of 1; the 4 kernel ones gain 0.5 * 1 of decay first, then
    # all are clipped to global norm 1 together (norm sqrt(4 * 1.5**2 + 2) = sqrt(11))
    norm = math.sqrt(11)
    np.testing.assert_allclose(new["head"]["kernel"], 1 - 0.1 * 1.5 / norm, rtol=1e-6)
    np.testing.assert_allclose(new["head"]["bias"], 1 - 0.1 / norm, rtol=1e-6)  # no decay


def test_update_trainable_variables_only():
    tx = optim.make_optimizer("sgd", 0.1, update_trainable_variables=["^head/kernel$"])
    new = _step(tx, _params())
    np.testing.assert_array_equal(new["head"]["bias"], np.ones(2))
    np.testing.assert_array_equal(new["backbone"]["layer"][0]["kernel"], np.ones((2, 2)))
    np.testing.assert_allclose(new["head"]["kernel"], 0.9, rtol=1e-6)


def test_pattern_matching_nothing_is_an_error():
    tx = optim.make_optimizer("sgd", 0.1, freeze_variables=["FeatureExtractor"])
    with pytest.raises(ValueError, match="train.freeze_variables: 'FeatureExtractor' matches no"):
        tx.init(_params())


def test_bad_regex_is_a_config_error():
    with pytest.raises(ConfigError, match="freeze_variables"):
        load_config("shapes_demo", ["train.freeze_variables=['backbone[']"])


@pytest.mark.slow
def test_one_step_hard_mining_weighted_sigmoid_frozen_backbone(tiny_overrides,
                                                               two_box_batch):
    config = load_config("shapes_demo", tiny_overrides + [
        "model.loss.classification=weighted_sigmoid",
        "model.hard_example_miner.num_hard_examples=16",
        "model.hard_example_miner.max_negatives_per_positive=3",
        "model.hard_example_miner.min_negatives_per_image=2",
        "train.freeze_variables=['^backbone/']",
    ])
    task = tasks.build_task(config)
    assert task.loss_params.hard_example_miner.num_hard_examples == 16
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=False)
    before = jax.tree.map(np.asarray, jax.device_get(state["params"]))
    batch = two_box_batch(task)
    state, metrics = make_train_step(task, tx, schedule)(state, batch)
    assert np.isfinite(float(metrics["loss"])) and float(metrics["loss"]) > 0
    pos, neg = float(metrics["mined_positives"]), float(metrics["mined_negatives"])
    # per image at most max(2, 3 * its positives) negatives, 16 anchors in all
    assert 0 < neg <= 4 * 2 + 3 * pos and pos + neg <= 4 * 16
    after = jax.device_get(state["params"])
    for a, b in zip(jax.tree.leaves(before["backbone"]), jax.tree.leaves(after["backbone"]),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    changed = [not np.array_equal(a, b) for a, b in
               zip(jax.tree.leaves(before["head"]), jax.tree.leaves(after["head"]), strict=True)]
    assert any(changed)
