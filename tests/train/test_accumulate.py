"""Gradient accumulation (train.accumulate_steps): k micro-batches give the large-batch step.

BatchNorm is frozen (its statistics are per micro-batch by design), so the equivalence is exact
up to float summation order: same loss, loss parts, gradients and parameters after one step.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.tasks.ssd.loss import DetectionLossParams, detection_loss, loss_normalizer
from jaxdet.train.accumulate import split_micro_batches
from jaxdet.train.step import init_train_state, make_train_step

LR = 0.5
BATCH = 4
EPS32 = float(np.finfo(np.float32).eps)


def _batch(task, *, seed: int, empty_rows=()) -> dict:
    """A batch of BATCH noise images with 1-3 boxes each (none in ``empty_rows``)."""
    rng = np.random.default_rng(seed)
    h, w = task.input_size
    boxes = np.zeros((BATCH, 8, 4), np.float32)
    valid = np.zeros((BATCH, 8), bool)
    for i in range(BATCH):
        if i in empty_rows:
            continue
        n = 1 + i % 3
        y0, x0 = rng.uniform(0.0, 0.5, (2, n))
        boxes[i, :n] = np.stack([y0, x0, y0 + rng.uniform(0.2, 0.5, n),
                                 x0 + rng.uniform(0.2, 0.5, n)], -1)
        valid[i, :n] = True
    return {
        "images": rng.normal(size=(BATCH, h, w, 3)).astype(np.float32),
        "boxes": boxes,
        "classes": rng.integers(0, 3, (BATCH, 8)).astype(np.int32),
        "valid": valid,
        "ignore": np.zeros((BATCH, 8), bool),
    }


@pytest.fixture(scope="module")
def frozen_task(tiny_overrides):
    config = load_config("shapes_demo", tiny_overrides + [
        "model.backbone.batch_norm.frozen=true",
        "model.head.batch_norm.frozen=true",
    ])
    return tasks.build_task(config)


def test_split_micro_batches_is_strided():
    x = jnp.arange(12).reshape(6, 2)
    micro = split_micro_batches(x, 3)
    assert micro.shape == (3, 2, 2)
    np.testing.assert_array_equal(micro[1], [[2, 3], [8, 9]])  # rows 1 and 4
    with pytest.raises(ValueError, match="does not split"):
        split_micro_batches(x, 4)


def test_normalizer_override():
    """A given normalizer replaces the batch's own: loss * own / given."""
    rng = np.random.default_rng(0)
    targets = {
        "cls_targets": np.eye(3, dtype=np.float32)[rng.integers(0, 3, (2, 5))],
        "cls_weights": np.ones((2, 5), np.float32),
        "box_targets": rng.normal(size=(2, 5, 4)).astype(np.float32),
        "box_weights": np.array([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0]], np.float32),
    }
    logits, codes = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 4))
    for normalize in (True, False):
        p = DetectionLossParams(normalize_by_num_matches=normalize)
        own = float(loss_normalizer(targets["box_weights"], p))
        assert own == (3.0 if normalize else 2.0)
        total, parts = detection_loss(logits, codes, targets, p)
        total7, parts7 = detection_loss(logits, codes, targets, p, normalizer=jnp.float32(7.0))
        np.testing.assert_allclose(total7, total * own / 7.0, rtol=1e-6)
        assert float(parts7["num_positives"]) == 3.0
    p = DetectionLossParams()
    assert float(loss_normalizer(np.zeros((2, 5), np.float32), p)) == 1.0  # max(1, 0)


@pytest.fixture(scope="module")
def one_step(frozen_task):
    """k -> (batch -> (metrics, params before, params after, batch_stats after))."""
    tx = optax.sgd(LR)
    state0 = jax.device_get(init_train_state(frozen_task, tx, ema=False))
    steps = {}

    def run(k: int, batch: dict):
        if k not in steps:
            steps[k] = make_train_step(frozen_task, tx, optax.constant_schedule(LR),
                                       accumulate_steps=k)
        state = jax.tree.map(jnp.asarray, state0)
        new, metrics = steps[k](state, batch)
        return jax.device_get(metrics), state0["params"], jax.device_get(new)

    return run


def _assert_same_step(ref, got):
    (m1, before, s1), (mk, _, sk) = ref, got
    assert set(mk) == set(m1)
    for key in ("loss", "classification_loss", "localization_loss", "num_positives",
                "grad_norm"):
        np.testing.assert_allclose(mk[key], m1[key], rtol=1e-5, err_msg=key)
    # SGD: params_after - params_before = -LR * grads, so this compares the gradients.
    d1 = jax.tree.map(lambda a, b: a - b, s1["params"], before)
    dk = jax.tree.map(lambda a, b: a - b, sk["params"], before)
    for (path, a), b, p in zip(jax.tree_util.tree_leaves_with_path(dk), jax.tree.leaves(d1),
                               jax.tree.leaves(before), strict=True):
        # the difference of two float32 params carries their rounding (a few ulps of |p|)
        atol = max(1e-5 * float(np.max(np.abs(b))), 4 * EPS32 * float(np.max(np.abs(p))))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol,
                                   err_msg=jax.tree_util.keystr(path))
    assert any(np.any(x != 0) for x in jax.tree.leaves(d1))
    for a, b in zip(jax.tree.leaves(sk["batch_stats"]), jax.tree.leaves(s1["batch_stats"]),
                    strict=True):
        np.testing.assert_array_equal(a, b)  # frozen
    assert int(sk["step"]) == int(s1["step"]) == 1


@pytest.mark.parametrize("k", [2, pytest.param(4, marks=pytest.mark.exhaustive)])
@pytest.mark.slow
def test_accumulated_step_equals_large_batch_step(one_step, frozen_task, k):
    batch = _batch(frozen_task, seed=0)
    _assert_same_step(one_step(1, batch), one_step(k, batch))


@pytest.mark.slow
def test_whole_batch_normalizer_with_uneven_positives(one_step, frozen_task):
    """Micro-batch 0 of k=2 (rows 0 and 2) has no boxes at all: dividing each micro-batch by
    its own positives (or averaging micro-batch losses) would not give the large-batch loss."""
    batch = _batch(frozen_task, seed=1, empty_rows=(0, 2))
    ref = one_step(1, batch)
    _assert_same_step(ref, one_step(2, batch))

    params, stats = ref[1], jax.device_get(frozen_task.initial_variables()[1])
    loss = jax.jit(lambda b: frozen_task.loss(params, stats, b)[0])
    micro = [jax.tree.map(lambda x, m=m: x[m::2], batch) for m in range(2)]
    per_micro = [float(loss(b)) for b in micro]
    # the usual "mean of micro-batch losses, each over its own positives" is off by ~2x here
    assert per_micro[0] < 0.1 * per_micro[1]
    np.testing.assert_allclose(sum(per_micro) / 2, float(ref[0]["loss"]) / 2, rtol=0.05)
