"""jaxdet's side of the TF-written train-step fixtures' start (tests/interop/fixtures/
make_tf_train_step_fixtures.py and make_tf_high_rate_fixture.py): the fixture's weights with
the class biases at the config's initial value, and its batch of generated images and boxes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.interop.tf_checkpoint import local_name
from jaxdet.tasks.weights import load_tf_detection_checkpoint
from jaxdet.train.optim import param_path

FIXTURES = Path(__file__).parent / "interop" / "fixtures"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import box_masks, rebuild_data  # noqa: E402
from tf_fixture_values import test_image as fixture_image  # noqa: E402

CLASS_BIAS = r"^head/.*class_predictor/.*bias$"


def class_bias(head) -> float:
    """The pipeline.config's class_prediction_bias_init, as the converted head holds it."""
    if head.name == "convolutional":
        return head.class_prediction_bias_init
    return float(np.log(head.prior_probability / (1 - head.prior_probability)))


def start_variables(task, config, fixture: Path, tmp: Path) -> tuple[dict, dict]:
    """(params, batch_stats) as pure dicts: the fixture's checkpoint (rebuilt under ``tmp``)
    loaded into ``task.model``; an SSD-family head's class predictor biases at the config's
    initial value as TF's fixture scripts set them (a step-0 head)."""
    load_tf_detection_checkpoint(task.model, config, rebuild_data(fixture, tmp / "ckpt-0"))
    _, params, stats = nnx.split(task.model, nnx.Param, nnx.BatchStat)
    params, stats = nnx.to_pure_dict(params), nnx.to_pure_dict(stats)
    if getattr(config.model, "head", None) is None:  # Faster R-CNN: its fixture's own biases
        return params, stats
    bias = class_bias(config.model.head)
    params = jax.tree_util.tree_map_with_path(
        lambda k, p: jnp.full_like(p, bias) if re.search(CLASS_BIAS, param_path(k)) else p,
        params)
    return params, stats


_HEAD = re.compile(r"^(model/_prediction_head_dict/)(.+?)(/\d+/layer_with_weights-\d+/.*)$")


def object_path(fixture_path: str) -> str:
    """A TF object path as the fixture scripts wrote it (local names joined by ``/``, a
    CenterNet head's ``box/scale`` as two) as jaxdet's readers and name maps write it (the head
    one local name, ``box.Sscale``: ``interop.tf_checkpoint.local_name``)."""
    match = _HEAD.match(fixture_path)
    if match is None:
        return fixture_path
    return match.group(1) + local_name(match.group(2)) + match.group(3)


def start_heads(params: dict, task, config, starts: list[dict]) -> dict:
    """``params`` with a TF fixture's ``head_starts`` made as TF's script made them (CenterNet:
    each listed head's last kernel times its float32 ``scale``, its bias filled with ``value``;
    ``kernel`` and ``bias`` are TF checkpoint keys). Returns the new pure dict."""
    from jaxdet import tasks

    names = tasks.tf_name_map(task.model, config)
    scales, fills = {}, {}
    for start in starts:
        kernel, bias = object_path(start["kernel"]), object_path(start["bias"])
        scales["/".join(map(str, names[kernel][0]))] = np.float32(start["scale"])
        fills["/".join(map(str, names[bias][0]))] = start["value"]
    assert len(scales) == len(fills) == len(starts)
    done = []

    def one(path, p):
        key = param_path(path)
        if key in scales:
            done.append(key)
            return p * scales[key]
        if key in fills:
            done.append(key)
            return jnp.full_like(p, fills[key])
        return p

    params = jax.tree_util.tree_map_with_path(one, params)
    assert len(done) == 2 * len(starts), sorted({*scales, *fills} - set(done))
    return params


def fixture_batch(task, tf: dict) -> dict:
    """The fixture's raw batch (``tf``: its JSON with ``size``, ``image_seeds``, normalized
    ``boxes`` and 0-based ``classes`` per image): float32 pixels [B, size, size, 3], boxes and
    classes padded to ``task.max_boxes``, ``valid``, ``ignore`` and ``image_info``; with
    ``masks`` true, the masks TF was given (``box_masks``) as uint8 ``masks [B, N, size,
    size]`` (the config's ``data.mask_stride`` must be 1); with ``keypoints`` (per image, per
    box, normalized (y, x) of each keypoint) and ``keypoint_visibility`` (0 / 1), CenterNet's
    ``keypoints f32[B, N, K, 2]`` and ``keypoint_visibility i32[B, N, K]``."""
    size, count, n = tf["size"], len(tf["image_seeds"]), task.max_boxes
    images = np.stack([fixture_image(size, size, s) for s in tf["image_seeds"]])
    boxes = np.zeros((count, n, 4), np.float32)
    classes = np.zeros((count, n), np.int32)
    valid = np.zeros((count, n), bool)
    for i, (b, c) in enumerate(zip(tf["boxes"], tf["classes"], strict=True)):
        boxes[i, :len(b)], classes[i, :len(c)], valid[i, :len(c)] = b, c, True
    batch = {"images": jnp.asarray(images, jnp.float32), "boxes": jnp.asarray(boxes),
             "classes": jnp.asarray(classes), "valid": jnp.asarray(valid),
             "ignore": jnp.zeros((count, n), bool),
             "image_info": jnp.asarray([[size, size, size, size]] * count, jnp.float32)}
    if tf.get("masks"):
        masks = np.zeros((count, n, size, size), np.uint8)
        for i, b in enumerate(tf["boxes"]):
            masks[i, :len(b)] = box_masks(b, size)
        batch["masks"] = jnp.asarray(masks)
    if "keypoints" in tf:
        k = len(tf["keypoints"][0][0])
        points = np.zeros((count, n, k, 2), np.float32)
        visible = np.zeros((count, n, k), np.int32)
        for i, (p, v) in enumerate(zip(tf["keypoints"], tf["keypoint_visibility"],
                                       strict=True)):
            points[i, :len(p)], visible[i, :len(v)] = p, v
        batch["keypoints"], batch["keypoint_visibility"] = jnp.asarray(points), jnp.asarray(
            visible)
    return batch
