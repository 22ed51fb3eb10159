"""CenterNet keypoint tasks on the task seam: the batch layout grows keypoint fields, the
targets follow the keypoints, an accumulated step equals the whole batch (each keypoint loss
divided by the whole batch's count), and a tiny CenterNet learns two images by heart and puts
every keypoint of every object where it belongs (TF's grouping of candidates to objects)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import BatchNormParams
from jaxdet.models.necks.fpn import FPN
from jaxdet.tasks.center_net import CenterNet, CenterNetTask
from jaxdet.tasks.center_net.keypoints import KeypointTask
from jaxdet.train.accumulate import loss_and_grads
from jaxdet.train.step import init_train_state, make_train_step

SIZE, STRIDE, CLASSES = 64, 4, 3
# class 0 has two keypoints (slots 0, 1: its box's top-left and bottom-right quarter points),
# class 1 one (slot 2: its box's centre); class 2 none
TASKS = (KeypointTask("corners", slots=(0, 1), std_dev=(1.0, 1.0), offset_peak_radius=1,
                      per_keypoint_offset=True, regression_weight=0.1),
         KeypointTask("centre", slots=(2,), std_dev=(1.0,)))


def _task(frozen: bool = False) -> CenterNetTask:
    rngs = nnx.Rngs(0)
    bn = BatchNormParams(momentum=0.8, epsilon=1e-3, frozen=frozen)
    backbone = ResNet(18, batch_norm=bn, width_multiplier=0.25, rngs=rngs)
    neck = FPN(backbone.out_channels, 2, 5, 16, batch_norm=bn, rngs=rngs)
    model = CenterNet(backbone, neck, level=2, channels=16, num_classes=CLASSES, head_depth=16,
                      keypoint_tasks=((2, True, -2.19), (1, False, -2.19)), rngs=rngs)
    return CenterNetTask(model, (SIZE, SIZE), STRIDE, CLASSES, max_boxes=4, max_detections=10,
                         keypoint_tasks=TASKS, num_keypoints=3)


def _batch() -> dict:
    """Two 64x64 images of bright rectangles, their boxes and keypoints (padded to 4)."""
    images = np.full((2, SIZE, SIZE, 3), -1.0, np.float32)
    boxes = np.zeros((2, 4, 4), np.float32)
    classes = np.zeros((2, 4), np.int32)
    valid = np.zeros((2, 4), bool)
    keypoints = np.zeros((2, 4, 3, 2), np.float32)
    visibility = np.zeros((2, 4, 3), np.int32)
    for i, rects in enumerate([[(8, 8, 32, 40, 0), (36, 20, 60, 44, 1)],
                               [(16, 30, 48, 58, 0), (40, 4, 60, 24, 2)]]):
        for j, (y0, x0, y1, x1, c) in enumerate(rects):
            images[i, y0:y1, x0:x1, c] = 1.0
            box = np.array([y0, x0, y1, x1], np.float32) / SIZE
            boxes[i, j], classes[i, j], valid[i, j] = box, c, True
            quarter = (box[2:] - box[:2]) / 4
            if c == 0:
                keypoints[i, j, 0] = box[:2] + quarter
                keypoints[i, j, 1] = box[2:] - quarter
                visibility[i, j, :2] = 2
            elif c == 1:
                keypoints[i, j, 2] = (box[:2] + box[2:]) / 2
                visibility[i, j, 2] = 2
    return {"images": images, "boxes": boxes, "classes": classes, "valid": valid,
            "ignore": np.zeros((2, 4), bool), "keypoints": keypoints,
            "keypoint_visibility": visibility,
            "image_info": np.tile(np.float32([SIZE, SIZE, SIZE, SIZE]), (2, 1))}


@pytest.mark.slow
def test_layout_and_targets_follow_the_keypoints():
    task = _task()
    layout = task.batch_layout()
    assert layout["keypoints"].shape == (4, 3, 2)
    assert layout["keypoint_visibility"].shape == (4, 3)
    prepared = jax.jit(task.prepare)({k: jnp.asarray(v) for k, v in _batch().items()})
    corners, centre = prepared["keypoints"]
    assert corners["heatmap"].shape == (2, 16, 16, 2) and centre["heatmap"].shape == (2, 16, 16, 1)
    # image 0, object 0 (rows 8..32, cols 8..40): top-left quarter point (14, 16) px -> (3, 4)
    assert float(corners["heatmap"][0, 3, 4, 0]) == 1.0
    # image 0, object 1 (class 1, rows 36..60, cols 20..44): centre (48, 32) px -> (12, 8)
    assert float(centre["heatmap"][0, 12, 8, 0]) == 1.0
    # two labelled corner keypoints per image, one centre in image 0 only
    np.testing.assert_array_equal(corners["num_instances"], [[1, 1], [1, 1]])
    np.testing.assert_array_equal(centre["num_instances"], [[1], [0]])
    # the class-0 boxes black out nothing of their own task; the class-1 box blacks out the
    # corners task inside it (its slots are unlabelled), as TF does
    assert float(corners["valid_mask"][0, 12, 8, 0]) == 0.0
    assert float(corners["valid_mask"][0, 3, 4, 0]) == 1.0
    norm = task.loss_normalizer(prepared)
    assert float(norm["objects"]) == 4.0
    assert float(norm["keypoints"][0]["heatmap"]) == 4.0


@pytest.mark.slow
def test_accumulated_step_equals_the_whole_batch():
    task = _task(frozen=True)
    params, stats = task.initial_variables()
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    key = jax.random.key(0)
    loss1, parts1, _, g1 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key))(params)
    loss2, parts2, _, g2 = jax.jit(lambda p: loss_and_grads(task, p, stats, batch, key,
                                                            accumulate_steps=2))(params)
    assert "corners/keypoint_regression_loss" in parts1
    np.testing.assert_allclose(loss2, loss1, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1), strict=True):
        scale = float(np.abs(b).max())
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale + 1e-7)


@pytest.mark.slow
def test_learns_two_images_and_puts_the_keypoints_on_their_objects():
    task = _task()
    tx = optax.adam(3e-3)
    step = make_train_step(task, tx, optax.constant_schedule(3e-3))
    state = init_train_state(task, tx, ema=False)
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    for _ in range(200):
        state, metrics = step(state, batch)
    info = jnp.asarray([[SIZE, SIZE, SIZE, SIZE]] * 2, jnp.float32)
    det = jax.jit(task.predict)(state["params"], state["batch_stats"], batch["images"], info)
    assert det["keypoints"].shape == (2, 10, 3, 2) and det["keypoint_scores"].shape == (2, 10, 3)
    for i in range(2):
        for j in np.nonzero(np.asarray(batch["valid"][i]))[0]:
            cls = int(batch["classes"][i, j])
            slots = {0: [0, 1], 1: [2], 2: []}[cls]
            if not slots:
                continue
            mask = det["classes"][i] == cls
            best = int(jnp.argmax(jnp.where(mask, det["scores"][i], -1.0)))
            assert float(det["scores"][i, best]) > 0.3
            want = np.asarray(batch["keypoints"][i, j, slots]) * SIZE
            got = np.asarray(det["keypoints"][i, best, slots])
            np.testing.assert_allclose(got, want, atol=2.0)  # original pixels
            assert np.all(np.asarray(det["keypoint_scores"][i, best, slots]) > 0.1)
