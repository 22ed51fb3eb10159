"""fp16 dynamic loss scaling: the scale schedule by hand, and a forced overflow that skips a
train step (params bit-identical, scale halved) before a finite step updates again."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.train import build as train_build
from jaxdet.train import loss_scale as ls
from jaxdet.train.step import abstract_train_state, init_train_state


def test_scale_schedule_by_hand():
    p = ls.LossScaleParams(initial_scale=8.0, growth_interval=3, factor=2.0, min_scale=2.0)
    update = jax.jit(lambda s, f: ls.update_loss_scale(s, f, p))
    state = ls.init_loss_scale(p)
    finite = [True, True, True, True, False, True, False, False, False, True, True, True]
    want = [  # (scale, good_steps) after each step
        (8, 1), (8, 2), (16, 0),  # grows after 3 finite steps in a row
        (16, 1), (8, 0),          # overflow: shrink, count restarts
        (8, 1), (4, 0), (2, 0),   # shrink ...
        (2, 0),                   # ... but not below min_scale
        (2, 1), (2, 2), (4, 0),
    ]
    got = []
    for f in finite:
        state = update(state, jnp.asarray(f))
        assert state["scale"].dtype == jnp.float32 and state["good_steps"].dtype == jnp.int32
        got.append((float(state["scale"]), int(state["good_steps"])))
    assert got == want


def test_scale_does_not_grow_to_inf():
    p = ls.LossScaleParams(initial_scale=2.0**127, growth_interval=1)
    state = ls.update_loss_scale(ls.init_loss_scale(p), jnp.asarray(True), p)
    assert float(state["scale"]) == 2.0**127


def test_all_finite_and_unscale():
    tree = {"a": jnp.ones((2,), jnp.float16), "b": {"c": jnp.array([1.0, 2.0])}}
    assert bool(ls.all_finite(tree))
    assert not bool(ls.all_finite({**tree, "d": jnp.array([0.0, jnp.inf])}))
    assert not bool(ls.all_finite({**tree, "d": jnp.array([jnp.nan])}))
    assert bool(ls.all_finite({}))
    g = ls.unscale(tree, {"scale": jnp.float32(4.0)})
    assert g["a"].dtype == jnp.float32
    np.testing.assert_array_equal(g["b"]["c"], [0.25, 0.5])


def test_bad_params():
    with pytest.raises(ValueError, match="factor"):
        ls.LossScaleParams(factor=1.0)
    with pytest.raises(ValueError, match="min_scale"):
        ls.LossScaleParams(initial_scale=1.0, min_scale=2.0)


# one worker runs this file and test_precision.py: the second reads the float16 step that the
# first compiled (13 s on 2 CPU cores) from the persistent cache
pytestmark = pytest.mark.xdist_group("fp16")


@pytest.fixture(scope="module")
def fp16(tiny_overrides):
    # (test_precision.py trains with the same settings: one float16 compile in the cache)
    config = load_config("shapes_demo", tiny_overrides + [
        "precision=fp16", "train.ema_decay=0.9", "train.loss_scale.initial_scale=1024",
        "train.loss_scale.growth_interval=2",
    ])
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    scale = train_build.build_loss_scale(config)
    assert scale == ls.LossScaleParams(1024.0, 2, 2.0, 1.0)
    step = train_build.build_train_step(config, task, tx, schedule)
    state = jax.device_get(init_train_state(task, tx, ema=True, loss_scale=scale))
    return task, tx, scale, step, state


def test_state_carries_the_scale(fp16):
    task, tx, scale, _, state = fp16
    assert float(state["loss_scale"]["scale"]) == 1024.0
    abstract = abstract_train_state(task, tx, ema=True, loss_scale=scale)
    assert abstract["loss_scale"]["scale"].dtype == jnp.float32
    assert abstract["loss_scale"]["good_steps"].dtype == jnp.int32
    assert "loss_scale" not in abstract_train_state(task, tx, ema=True)


def _unchanged(before, after, keys=("params", "batch_stats", "opt_state", "ema_params")):
    for key in keys:
        for a, b in zip(jax.tree.leaves(before[key]), jax.tree.leaves(after[key]), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=key)


def test_overflow_skips_the_step_then_training_resumes(fp16, two_box_batch):
    task, _, _, step, state0 = fp16
    batch = two_box_batch(task)

    # 1. A scale of 2**40 overflows the float16 backward pass (65504 is fp16's largest value).
    huge = jax.tree.map(np.copy, state0)
    huge["loss_scale"]["scale"] = np.float32(2.0**40)
    new, m = step(jax.tree.map(jnp.asarray, huge), batch)
    new, m = jax.device_get((new, m))
    assert int(m["skipped"]) == 1 and float(m["loss_scale"]) == 2.0**40
    assert np.isfinite(m["loss"]) and m["loss"] > 0  # the forward pass (unscaled) is fine
    _unchanged(huge, new)
    assert float(new["loss_scale"]["scale"]) == 2.0**39
    assert int(new["loss_scale"]["good_steps"]) == 0
    assert int(new["step"]) == 1  # the loop/data position still advances

    # 2. An inf in the batch: skipped as well, scale halved.
    bad = {**batch, "images": batch["images"].copy()}
    bad["images"][1, 3, 5, 0] = np.inf
    s1, m1 = jax.device_get(step(jax.tree.map(jnp.asarray, state0), bad))
    assert int(m1["skipped"]) == 1
    _unchanged(state0, s1)
    assert float(s1["loss_scale"]["scale"]) == 512.0

    # 3. The next, finite batch trains: finite loss, params move, float32 kept; after
    #    growth_interval=2 good steps the scale doubles.
    s2, m2 = jax.device_get(step(jax.tree.map(jnp.asarray, s1), batch))
    assert int(m2["skipped"]) == 0 and np.isfinite(m2["loss"]) and np.isfinite(m2["grad_norm"])
    assert (float(s2["loss_scale"]["scale"]), int(s2["loss_scale"]["good_steps"])) == (512.0, 1)
    moved = [not np.array_equal(a, b) for a, b in
             zip(jax.tree.leaves(s1["params"]), jax.tree.leaves(s2["params"]), strict=True)]
    assert sum(moved) > len(moved) // 2
    assert all(x.dtype == np.float32 for x in jax.tree.leaves(s2["params"]))
    assert all(x.dtype == np.float32 for x in jax.tree.leaves(s2["ema_params"]))
    s3, m3 = jax.device_get(step(jax.tree.map(jnp.asarray, s2), two_box_batch(task, seed=1)))
    assert int(m3["skipped"]) == 0
    assert (float(s3["loss_scale"]["scale"]), int(s3["loss_scale"]["good_steps"])) == (1024.0, 0)
    assert int(s3["step"]) == 3
