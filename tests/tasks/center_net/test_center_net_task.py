"""CenterNet on the task seam: the generic train step, gradient accumulation (with the task's
own normalizer) and predict work on a second meta-architecture unchanged. A tiny CenterNet
(ResNet-18 x0.25 + FPN read at stride 4) learns two images by heart and finds their boxes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxdet.core.box_ops import iou
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import BatchNormParams
from jaxdet.models.necks.fpn import FPN
from jaxdet.tasks.center_net import CenterNet, CenterNetTask
from jaxdet.train.accumulate import loss_and_grads
from jaxdet.train.step import init_train_state, make_train_step

SIZE, STRIDE, CLASSES = 64, 4, 3


def _task(frozen: bool = False) -> CenterNetTask:
    rngs = nnx.Rngs(0)
    # moving statistics that follow the batch within a few dozen steps: predict (eval mode)
    # sees what training saw
    bn = BatchNormParams(momentum=0.8, epsilon=1e-3, frozen=frozen)
    backbone = ResNet(18, batch_norm=bn, width_multiplier=0.25, rngs=rngs)
    neck = FPN(backbone.out_channels, 2, 5, 16, batch_norm=bn, rngs=rngs)
    model = CenterNet(backbone, neck, level=2, channels=16, num_classes=CLASSES, head_depth=16,
                      rngs=rngs)
    return CenterNetTask(model, (SIZE, SIZE), STRIDE, CLASSES, max_boxes=4, max_detections=10)


def _batch() -> dict:
    """Two 64x64 images: bright rectangles on dark, their boxes (padded to 4)."""
    images = np.full((2, SIZE, SIZE, 3), -1.0, np.float32)
    boxes = np.zeros((2, 4, 4), np.float32)
    classes = np.zeros((2, 4), np.int32)
    valid = np.zeros((2, 4), bool)
    for i, rects in enumerate([[(8, 8, 32, 40, 0), (36, 20, 60, 44, 2)], [(16, 30, 48, 58, 1)]]):
        for j, (y0, x0, y1, x1, c) in enumerate(rects):
            images[i, y0:y1, x0:x1, c] = 1.0
            boxes[i, j] = np.array([y0, x0, y1, x1], np.float32) / SIZE
            classes[i, j], valid[i, j] = c, True
    return {"images": images, "boxes": boxes, "classes": classes, "valid": valid,
            "ignore": np.zeros((2, 4), bool),
            "image_info": np.tile(np.float32([SIZE, SIZE, SIZE, SIZE]), (2, 1))}


def test_the_heatmap_loss_counts_inside_the_content_only():
    """A letterboxed image's padding is no negative for the center heatmap (TF's valid anchor
    weights): output rows >= ceil(content height / stride) and columns >= ceil(content width /
    stride) do not count, whatever the logits there."""
    task = _task()
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    # image 0: content 40 x 64 (rows >= ceil(40 / 4) = 10 are padding); image 1: 64 x 50
    # (columns >= ceil(12.5) = 13)
    batch["image_info"] = jnp.asarray([[80, 128, 40, 64], [64, 50, 64, 50]], jnp.float32)
    prepared = task.prepare(batch)
    pixels = np.asarray(prepared["pixels"][..., 0])
    assert pixels[0, :10].all() and not pixels[0, 10:].any()
    assert pixels[1, :, :13].all() and not pixels[1, :, 13:].any()
    logits = jax.random.normal(jax.random.key(0), (2, 16, 16, CLASSES))
    out = {"heatmap": logits, "size": jnp.zeros((2, 16, 16, 2)),
           "offset": jnp.zeros((2, 16, 16, 2))}
    base = task._output_losses(out, prepared, 3.0)["heatmap_loss"]
    moved = logits.at[0, 12:].add(5.0).at[1, :, 14:].add(-3.0)
    assert float(task._output_losses({**out, "heatmap": moved}, prepared, 3.0)["heatmap_loss"]
                 ) == float(base)
    inside = logits.at[0, 3].add(5.0)
    assert float(task._output_losses({**out, "heatmap": inside}, prepared, 3.0)["heatmap_loss"]
                 ) > float(base)


@pytest.mark.slow
def test_targets_follow_the_boxes():
    task = _task()
    prepared = task.prepare({k: jnp.asarray(v) for k, v in _batch().items()})
    assert prepared["heatmap"].shape == (2, 16, 16, CLASSES)
    # image 0, box 0: rows 8..32, cols 8..40 of 64 -> center (5, 6) on the 16x16 map, class 0
    assert float(prepared["heatmap"][0, 5, 6, 0]) == 1.0
    assert prepared["pixel"][0, 0].tolist() == [5, 6]
    np.testing.assert_allclose(prepared["size"][0, 0], [6.0, 8.0])
    assert prepared["weight"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]
    assert float(task.loss_normalizer(prepared)) == 3.0


@pytest.mark.slow
def test_accumulated_step_equals_the_whole_batch():
    """With frozen BatchNorm an accumulated step (2 micro-batches, each divided by the whole
    batch's number of objects) equals the whole-batch step."""
    task = _task(frozen=True)
    params, stats = task.initial_variables()
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    key = jax.random.key(0)
    loss1, _, _, g1 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key))(params)
    loss2, _, _, g2 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key,
                                                       accumulate_steps=2))(params)
    np.testing.assert_allclose(loss2, loss1, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1), strict=True):
        scale = float(np.abs(b).max())  # float32 summation order: relative to the leaf
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale + 1e-7)


@pytest.mark.slow
def test_learns_two_images_and_finds_their_boxes():
    task = _task()
    tx = optax.adam(3e-3)
    step = make_train_step(task, tx, optax.constant_schedule(3e-3))
    state = init_train_state(task, tx, ema=False)
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    losses = []
    for _ in range(150):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.2 * losses[0]
    info = jnp.asarray([[SIZE, SIZE, SIZE, SIZE]] * 2, jnp.float32)
    det = jax.jit(task.predict)(state["params"], state["batch_stats"], batch["images"], info)
    assert det["boxes"].shape == (2, 10, 4) and det["scores"].shape == (2, 10)
    for i in range(2):
        gt = batch["boxes"][i][batch["valid"][i]] * SIZE
        for box, cls in zip(gt, batch["classes"][i][batch["valid"][i]], strict=True):
            # the best detection of that class overlaps the box well
            mask = det["classes"][i] == cls
            best = int(jnp.argmax(jnp.where(mask, det["scores"][i], -1.0)))
            assert float(det["scores"][i, best]) > 0.3
            assert float(iou(det["boxes"][i, best][None], box[None])[0, 0]) > 0.6
