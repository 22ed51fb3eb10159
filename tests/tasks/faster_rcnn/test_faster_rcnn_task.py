"""Faster R-CNN (C4 and FPN) on the task seam: the generic train step compiles once for any
number of boxes, runs the same jitted and eagerly, gradient accumulation divides by the whole
batch's normalizer (the batch size), and predict has static shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.train.accumulate import loss_and_grads
from jaxdet.train.step import init_train_state, make_train_step

MAX_BOXES = 4
VARIANTS = ["faster_rcnn_shapes_demo", "faster_rcnn_fpn_shapes_demo"]


def _task(size: int = 64, extra: tuple[str, ...] = (), name: str = "faster_rcnn_shapes_demo"):
    config = load_config(name, [
        f"data.resizer.height={size}", f"data.resizer.width={size}",
        f"data.max_number_of_boxes={MAX_BOXES}", "model.first_stage_box_predictor_depth=16",
        "model.first_stage_max_proposals=16", "model.second_stage_batch_size=8",
        "model.initial_crop_size=6", "model.second_stage_post_processing.max_total_detections=10",
        "model.second_stage_post_processing.max_detections_per_class=10", *extra])
    return tasks.build_task(config)


def _batch(task, counts, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    b, (h, w) = len(counts), task.input_size
    boxes = np.zeros((b, MAX_BOXES, 4), np.float32)
    valid = np.zeros((b, MAX_BOXES), bool)
    for i, n in enumerate(counts):
        tl = rng.uniform(0.0, 0.5, (n, 2))
        boxes[i, :n] = np.concatenate([tl, tl + rng.uniform(0.2, 0.5, (n, 2))], 1)
        valid[i, :n] = True
    return {"images": rng.normal(size=(b, h, w, 3)).astype(np.float32), "boxes": boxes,
            "classes": rng.integers(0, task.num_classes, (b, MAX_BOXES)).astype(np.int32),
            "valid": valid, "ignore": np.zeros((b, MAX_BOXES), bool),
            "image_info": np.tile(np.array([[h, w, h, w - 16]], np.float32), (b, 1))}


# FPN's step under -m exhaustive: compiled and run by the jitted-equals-eager check below and
# on a mesh, its predict by the mesh and export tests
@pytest.mark.parametrize("name", [VARIANTS[0],
                                  pytest.param(VARIANTS[1], marks=pytest.mark.exhaustive)])
@pytest.mark.slow
def test_layout_and_train_step_compiles_once_for_no_and_all_boxes(name):
    task = _task(name=name)
    layout = task.batch_layout()
    assert layout["image_info"].shape == (4,) and layout["boxes"].shape == (MAX_BOXES, 4)
    tx = optax.sgd(1e-3)
    step = make_train_step(task, tx, optax.constant_schedule(1e-3))
    state = init_train_state(task, tx, ema=False)
    for counts in ([0, 0], [MAX_BOXES, MAX_BOXES], [1, 0]):
        state, metrics = step(state, _batch(task, counts))
        assert np.isfinite(float(metrics["loss"]))
        for name in ("first_stage_objectness_loss", "first_stage_localization_loss",
                     "second_stage_classification_loss", "second_stage_localization_loss"):
            assert np.isfinite(float(metrics[name]))
    assert step._cache_size() == 1
    # predict: static shapes; boxes inside the content (the last 16 columns are padding)
    info = jnp.asarray(_batch(task, [1, 1])["image_info"])
    det = jax.jit(task.predict)(state["params"], state["batch_stats"],
                                jnp.asarray(_batch(task, [1, 1])["images"]), info)
    assert det["boxes"].shape == (2, 10, 4) and det["classes"].dtype == jnp.int32
    assert det["proposals"].shape == (2, 16, 4)
    assert float(jnp.max(det["boxes"][..., 3])) <= 64.0 + 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    # the eager step takes over a minute: both under -m exhaustive; make test keeps the RoI
    # ops eager = jitted = TF (core/test_roi_ops.py) and the other families' jit = eager
    pytest.param(VARIANTS[0], marks=pytest.mark.exhaustive),
    pytest.param(VARIANTS[1], marks=pytest.mark.exhaustive)])
def test_train_step_jitted_equals_eager(name):
    task = _task(size=32, name=name)
    tx = optax.sgd(1e-2)
    step = make_train_step(task, tx, optax.constant_schedule(1e-2))
    batch = _batch(task, [2])
    state = init_train_state(task, tx, ema=False)
    copy = jax.tree.map(jnp.copy, state)  # the jitted step donates its state
    jitted, m_jit = step(state, batch)
    with jax.disable_jit():
        eager, m_eager = step(copy, batch)
    for key in ("loss", "first_stage_objectness_loss", "second_stage_classification_loss",
                "second_stage_localization_loss", "num_proposals"):
        np.testing.assert_allclose(m_eager[key], m_jit[key], rtol=1e-4, atol=1e-6)
    for a, b in zip(jax.tree.leaves(eager["params"]), jax.tree.leaves(jitted["params"]),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_accumulated_step_equals_the_whole_batch():
    """With frozen BatchNorm and minibatches that take every candidate (so the random draw
    does not matter), 2 micro-batches each divided by the whole batch's normalizer (its size)
    give the whole batch's loss and gradients."""
    task = _task(extra=("model.backbone.batch_norm.frozen=true",
                        "model.first_stage_minibatch_size=1000",
                        "model.first_stage_positive_balance_fraction=1.0",
                        "model.second_stage_batch_size=16",
                        "model.second_stage_balance_fraction=1.0"))
    params, stats = task.initial_variables()
    batch = {k: jnp.asarray(v) for k, v in _batch(task, [2, 1, 0, 3]).items()}
    assert float(task.loss_normalizer(task.prepare(batch))) == 4.0
    key = jax.random.key(0)
    loss1, parts1, _, g1 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key))(params)
    loss2, parts2, _, g2 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key,
                                                            accumulate_steps=2))(params)
    np.testing.assert_allclose(loss2, loss1, rtol=1e-5)
    np.testing.assert_allclose(parts2["second_stage_classification_loss"],
                               parts1["second_stage_classification_loss"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1), strict=True):
        scale = float(np.abs(b).max())
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * scale + 1e-7)


def test_remat_levels_fingerprint_and_refusals():
    """``train.remat`` marks the ResNet's levels (5: the box classifier), refuses the parts
    faster_rcnn has not by name; the fingerprint holds the tensors' shape-fixing fields."""
    from jaxdet import tasks

    config = load_config("faster_rcnn_shapes_demo", ["train.remat=[backbone.level5]"])
    task = tasks.build_task(config)
    blocks = task.model.backbone.blocks_by_level()
    assert all(getattr(b, "remat", False) for b in blocks[5])
    assert not any(getattr(b, "remat", False) for b in blocks[4])
    with pytest.raises(ValueError, match="faster_rcnn can recompute.*not neck"):
        tasks.build_task(load_config("faster_rcnn_shapes_demo", ["train.remat=[neck]"]))
    fields = tasks.fingerprint_fields(config)
    assert fields["input_size"] == [128, 128]
    assert fields["model"]["type"] == "faster_rcnn"
    assert fields["model"]["first_stage_anchor_generator"]["height"] == 64.0
    with pytest.raises(ValueError, match="second_stage_batch_size"):
        load_config("faster_rcnn_shapes_demo", ["model.second_stage_batch_size=100"])
    with pytest.raises(ValueError, match="resnet18"):
        load_config("faster_rcnn_shapes_demo", ["model.backbone.name=mobilenet_v2"])
