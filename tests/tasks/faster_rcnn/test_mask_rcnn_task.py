"""Mask R-CNN on the faster_rcnn task: the batch gains ``masks``, the generic train step
compiles once for no and all boxes with a finite mask loss, predict returns each detection's
own-class mask, and the config refuses masks without ground truth masks or a mask size the
conv5 map does not divide."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.train.step import init_train_state, make_train_step

from ..conftest import masked_box_batch

MAX_BOXES = 4
OVERRIDES = ["data.resizer.height=64", "data.resizer.width=64",
             f"data.max_number_of_boxes={MAX_BOXES}", "model.first_stage_box_predictor_depth=16",
             "model.first_stage_max_proposals=16", "model.second_stage_batch_size=8",
             "model.initial_crop_size=6", "model.mask_height=6", "model.mask_width=6",
             "model.mask_prediction_conv_depth=8",
             "model.second_stage_post_processing.max_total_detections=10",
             "model.second_stage_post_processing.max_detections_per_class=10"]


def _config(*extra: str):
    return load_config("mask_rcnn_shapes_demo", [*OVERRIDES, *extra])


def _batch(task, counts, seed=0) -> dict:
    """Random boxes whose masks fill each box (on the stride-2 mask grid)."""
    batch = masked_box_batch(task, counts, MAX_BOXES, seed=seed)
    b, (h, w) = len(counts), task.input_size
    batch["classes"] = batch.pop("rng").integers(0, task.num_classes,
                                                 (b, MAX_BOXES)).astype(np.int32)
    batch["image_info"] = np.tile(np.array([[h, w, h, w - 16]], np.float32), (b, 1))
    return batch


@pytest.mark.slow
def test_masks_in_the_layout_train_step_compiles_once_and_predict_gives_masks():
    task = tasks.build_task(_config())
    layout = task.batch_layout()
    assert layout["masks"].shape == (MAX_BOXES, 32, 32) and layout["masks"].dtype == jnp.uint8
    assert task.params.mask_slots() == 2  # floor(8 * 0.25) sampled positives at most
    tx = optax.sgd(1e-3)
    step = make_train_step(task, tx, optax.constant_schedule(1e-3))
    state = init_train_state(task, tx, ema=False)
    for counts in ([0, 0], [MAX_BOXES, MAX_BOXES], [1, 0]):
        state, metrics = step(state, _batch(task, counts))
        assert np.isfinite(float(metrics["loss"]))
        assert np.isfinite(float(metrics["second_stage_mask_loss"]))
        if counts == [0, 0]:
            assert float(metrics["second_stage_mask_loss"]) == 0.0
    assert step._cache_size() == 1
    batch = _batch(task, [2, 1])
    det = jax.jit(task.predict)(state["params"], state["batch_stats"],
                                jnp.asarray(batch["images"]), jnp.asarray(batch["image_info"]))
    assert det["masks"].shape == (2, 10, 6, 6) and det["masks"].dtype == jnp.float32
    masks = np.asarray(det["masks"])
    assert masks.min() >= 0.0 and masks.max() <= 1.0
    live = np.arange(10)[None] < np.asarray(det["num_detections"])[:, None]
    assert np.all(masks[~live] == 0.0)


@pytest.mark.slow
def test_the_mask_loss_trains_the_mask_head_only_through_positives(monkeypatch):
    """With the ground-truth boxes as the proposals (an untrained RPN rarely reaches IoU 0.5)
    every box is a sampled positive: the mask loss is TF's per-pixel mean over them times its
    weight 4 (a fresh head's logits are ~0: ~log 2 a pixel), its gradient reaches the mask
    head; with no boxes it is 0 and leaves the head untouched."""
    task = tasks.build_task(_config())
    p_max = task.params.first_stage_max_proposals

    traced = {}  # the batch being traced: the proposals are its boxes

    def gt_proposals(objectness, encodings, image_info, *, train):
        boxes = jnp.pad(traced["boxes"], ((0, 0), (0, p_max - MAX_BOXES), (0, 0)))
        valid = jnp.pad(traced["valid"], ((0, 0), (0, p_max - MAX_BOXES)))
        return {"boxes": boxes, "scores": valid.astype(jnp.float32), "valid": valid}

    monkeypatch.setattr(task, "_proposals", gt_proposals)
    params, stats = task.initial_variables()

    def mask_part(p, b):
        traced.update(b)
        parts = task.loss(p, stats, b, jax.random.key(0))[1][0]
        return parts["second_stage_mask_loss"], parts["num_sampled_positives"]

    # jitted (one compile for both batches): eagerly, the two passes took half a minute
    value_and_grad = jax.jit(jax.value_and_grad(mask_part, has_aux=True))
    batch = {k: jnp.asarray(v) for k, v in _batch(task, [2, 1]).items()}
    (value, positives), grads = value_and_grad(params, batch)
    assert float(positives) == 3.0  # every box: the 2 slots per image hold them all
    assert 4 * 0.6 < float(value) < 4 * 0.8
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads["mask_head"]))
    batch = {k: jnp.asarray(v) for k, v in _batch(task, [0, 0]).items()}
    (value, _), grads = value_and_grad(params, batch)
    assert float(value) == 0.0
    assert all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(grads["mask_head"]))


def test_refusals_fingerprint_and_summary():
    with pytest.raises(ValueError, match="predict_instance_masks.*data.load_masks"):
        tasks.build_task(_config("data.load_masks=false"))
    with pytest.raises(ValueError, match="convolve_then_upsample.*multiples"):
        tasks.build_task(_config("model.convolve_then_upsample=true", "model.mask_height=5"))
    # crop 6 -> pool 3 -> conv5 2x2: a 6x6 mask is 3x upsampling
    task = tasks.build_task(_config("model.convolve_then_upsample=true"))
    assert task.model.mask_head.upsample == (3, 3)
    auto = tasks.build_task(_config("model.mask_prediction_conv_depth=0"))
    # conv5 of ResNet-18 x0.25: 128 channels, 3 classes -> 2^round((14 + 3 log2 3) / 5) = 16
    assert auto.model.mask_head.convs[0].out_features == 16
    fields = tasks.fingerprint_fields(_config())["model"]
    assert fields["predict_instance_masks"] is True
    assert fields["mask_prediction_conv_depth"] == 8
    plain = tasks.fingerprint_fields(load_config("faster_rcnn_shapes_demo"))["model"]
    assert "predict_instance_masks" not in plain and "mask_prediction_conv_depth" not in plain
    from jaxdet.tasks.faster_rcnn.build import faster_rcnn_summary, format_faster_rcnn_summary

    info = faster_rcnn_summary(_config())
    p = info["parameters"]
    # one 3x3 conv 128 -> 8 and the last 3x3 conv 8 -> 3 classes, with biases
    assert p["mask_head"] == 9 * 128 * 8 + 8 + 9 * 8 * 3 + 3
    assert p["total"] == sum(v for k, v in p.items() if k != "total")
    assert "mask head" in format_faster_rcnn_summary(info)
