"""Faster R-CNN's first-stage targets against the TF OD API's own (fixture written by TF:
``fixtures/make_tf_rpn_matches.py``): the shipped C4 and FPN configs at three input sizes
build pixel anchors bit-equal to TF's, and every anchor is assigned as TF assigns it --
positive, negative or ignored, with the same forced match where a box smaller than the
anchors ties several of them, and with the anchors outside the image pruned as TF prunes them.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdet import tasks
from jaxdet.config.loader import load_config
from jaxdet.tasks.faster_rcnn.build import build_anchors

FIXTURE = Path(__file__).parent / "fixtures" / "tf_rpn_matches.npz"

# fixture case -> (shipped config, overrides giving TF's input size and anchor handling)
CASES = {
    "grid_192_clip": ("faster_rcnn_resnet50_v1_640", [
        "data.resizer.min_dimension=192", "data.resizer.max_dimension=192"]),
    "grid_160x224_prune": ("faster_rcnn_resnet50_v1_640", [
        "data.resizer={name: fixed_shape, height: 160, width: 224}",
        "model.clip_anchors_to_image=false"]),
    "fpn_128x160_clip": ("faster_rcnn_resnet50_v1_fpn_640", [
        "data.resizer={name: fixed_shape, height: 128, width: 160}"]),
}


@pytest.fixture(scope="module")
def fixture() -> dict:
    return dict(np.load(FIXTURE))


def _config(case: str):
    name, overrides = CASES[case]
    return load_config(name, overrides)


@pytest.mark.parametrize("case", CASES)
def test_first_stage_anchors_are_tfs_to_the_bit(case, fixture):
    anchors = build_anchors(_config(case))
    kept = fixture[f"{case}/kept"]
    np.testing.assert_array_equal(anchors.pixels, fixture[f"{case}/anchors"])
    if anchors.valid is None:
        assert kept.all()
    else:
        np.testing.assert_array_equal(anchors.valid > 0, kept)


@pytest.mark.parametrize("case", CASES)
def test_every_anchor_is_assigned_as_tf_assigns_it(case, fixture):
    """The task's own ``prepare`` (ground truth normalized, as the loader gives it): TF's
    match per kept anchor -- a row (positive), -1 (negative) or -2 (ignored) -- gives its
    objectness, weight and box weight; the box targets agree to float32 rounding."""
    task = tasks.build_task(_config(case))
    boxes = fixture[f"{case}/boxes"]
    n = boxes.shape[:2]
    batch = {"boxes": jnp.asarray(boxes), "valid": jnp.ones(n, bool),
             "ignore": jnp.zeros(n, bool)}
    t = jax.jit(task.prepare)(batch)
    kept = fixture[f"{case}/kept"]
    match = fixture[f"{case}/match"]
    np.testing.assert_array_equal(np.asarray(t["box_weights"])[:, kept], match >= 0)
    np.testing.assert_array_equal(np.asarray(t["objectness"])[:, kept], match >= 0)
    np.testing.assert_array_equal(np.asarray(t["weight"])[:, kept], match != -2)
    assert np.all(np.asarray(t["weight"])[:, ~kept] == 0)
    np.testing.assert_allclose(np.asarray(t["box_targets"])[:, kept],
                               fixture[f"{case}/box_targets"], rtol=1e-5, atol=2e-5)
