"""bf16 / fp16 compute keeps float32 parameters and optimizer state and a loss close to fp32's;
``allow_tf32: false`` traces train and predict with HIGHEST-precision convolutions and dots."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.eval.runner import make_predict_fn
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state

# The same settings as test_loss_scale.py's fp16 step, so the persistent compilation cache
# serves that (slow on CPU) float16 compile to both files.
SETTINGS = ["train.ema_decay=0.9", "train.loss_scale.initial_scale=1024",
            "train.loss_scale.growth_interval=2"]
pytestmark = pytest.mark.xdist_group("fp16")  # on one worker with test_loss_scale.py


def _one_step(overrides: list[str], make_batch):
    config = load_config("shapes_demo", overrides + SETTINGS)
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=True, loss_scale=train_build.build_loss_scale(config))
    before = jax.device_get(state["params"])
    new, metrics = train_build.build_train_step(config, task, tx, schedule)(state, make_batch(task))
    return before, jax.device_get(new), jax.device_get(metrics)


@pytest.fixture(scope="module")
def fp32_step(tiny_overrides, two_box_batch):
    return _one_step(tiny_overrides, two_box_batch)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_low_precision_step_keeps_float32_state(tiny_overrides, fp32_step, two_box_batch,
                                                precision):
    before, state, metrics = _one_step(tiny_overrides + [f"precision={precision}"], two_box_batch)
    for tree in (state["params"], state["opt_state"], state["batch_stats"], state["ema_params"]):
        floats = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
        assert floats and all(x.dtype == np.float32 for x in floats)
    ref = fp32_step[2]
    assert np.isfinite(metrics["loss"])
    np.testing.assert_allclose(metrics["loss"], ref["loss"], rtol=0.05)
    np.testing.assert_allclose(metrics["num_positives"], ref["num_positives"])
    # the update is in float32 and close to fp32's (same sign for the bulk of the weights)
    d, d32 = (np.concatenate([(a - b).ravel() for a, b in
                              zip(jax.tree.leaves(p), jax.tree.leaves(before), strict=True)])
              for p in (state["params"], fp32_step[1]["params"]))
    assert np.count_nonzero(d) > 0.5 * d.size
    assert np.mean(np.sign(d) == np.sign(d32)) > 0.8
    if precision == "fp16":
        assert int(metrics["skipped"]) == 0 and state["loss_scale"]["scale"].dtype == np.float32
    else:
        assert "skipped" not in metrics and "loss_scale" not in state


def _matmul_ops(hlo_text: str) -> list[str]:
    return [line for line in hlo_text.splitlines()
            if "stablehlo.convolution" in line or "stablehlo.dot_general" in line]


@pytest.mark.parametrize("allow_tf32", [True, False])
def test_tf32_switch_sets_matmul_precision(tiny_overrides, two_box_batch, allow_tf32):
    config = load_config("shapes_demo", tiny_overrides + [f"allow_tf32={allow_tf32}".lower()])
    task = tasks.build_task(config)
    tx, schedule = train_build.build_optimizer(config.train)
    state = jax.eval_shape(lambda: init_train_state(task, tx, ema=False))
    batch = jax.eval_shape(lambda: two_box_batch(task))
    step = train_build.build_train_step(config, task, tx, schedule)
    params, stats = task.abstract_variables()
    predict = make_predict_fn(task, allow_tf32=config.allow_tf32)
    info = jax.ShapeDtypeStruct((4, 4), jnp.float32)
    for text in (step.lower(state, batch).as_text(),
                 predict.lower(params, stats, batch["images"], info).as_text()):
        ops = _matmul_ops(text)
        convs = [op for op in ops if "convolution" in op]
        assert len(convs) > 10
        assert all("precision_config" in op or "precision =" in op for op in ops)
        if allow_tf32:  # the model's convolutions use the platform default (TF32 on GPU)
            assert not any("HIGHEST" in op for op in convs)
        else:
            assert all("HIGHEST" in op for op in ops)
