"""A TF OD API Faster R-CNN checkpoint (the TF2 zoo's faster_rcnn_resnet50_v1_640x640_coco17_
tpu-8) gives TF's own outputs in jaxdet, stage by stage.

The fixture (fixtures/make_tf_detector_fixtures.py, run with the real TF OD API) holds the zoo
pipeline.config, TensorFlow's checkpoint index of that detector with seeded weights (the RPN's
3x3 conv and the box classifier's dense predictors calibrated on the test image, see
``_calibrate_faster_rcnn`` there) and TF's outputs on a 640x640 test image. Here the data shard
is rebuilt from the seeds (CRC-checked against TensorFlow's), imported with
``weights.load_weights`` into the model jaxdet builds from the same pipeline.config, and
compared:

* the RPN's box encodings and objectness logits at 600 anchors spread over all 19,200, and
  the anchors themselves (clipped to the image, as TF's inference does);
* the 300 proposals after the first-stage NMS (normalized), in TF's order;
* the second stage on TF's own proposals: class logits (background first) and box encodings;
* the 300 post-processed detections: same classes, scores within 1e-4, boxes within 1e-4
  (normalized), matched as sets (scores of detections lie as close as 4e-8);
* resizing (keep-aspect-ratio, padded to 640x640) and normalization of a 97x131 image, the
  padding normalized like black pixels (TF pads before its mean subtraction).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from PIL import Image

from jaxdet import tasks
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.tfod_names import variables_of
from jaxdet.tasks import weights

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "tf_faster_rcnn_resnet50_v1_640x640_coco17_tpu-8"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]
ATOL = 1e-4

pytestmark = pytest.mark.xdist_group("tf_detectors")


def _sample(config, image: np.ndarray) -> dict:
    sample = {"image": image, "boxes": np.zeros((0, 4), np.float32),
              "classes": np.zeros((0,), np.int32)}
    for op in tasks.transforms_of(config, training=False):  # TF pads raw pixels
        sample = op(sample)
    return sample


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    prefix = rebuild_data(FIXTURE, tmp_path_factory.mktemp("ckpt") / "ckpt-0")
    config = load_pipeline_config(FIXTURE / "pipeline.config", PLACEHOLDERS)
    task = tasks.build_task(config)
    report = weights.load_weights(task.model, config, prefix)
    _, params, stats = nnx.split(task.model, nnx.Param, nnx.BatchStat)
    params, stats = nnx.to_pure_dict(params), nnx.to_pure_dict(stats)
    image = np.asarray(Image.open(FIXTURE / "input.png").convert("RGB"), np.float32)
    images = jnp.asarray(_sample(config, image)["image"][None])
    tf = dict(np.load(FIXTURE / "outputs.npz"))
    h, w = task.input_size

    def run(params, stats, images, tf_proposals):
        model = task._merge(params, stats, train=False)
        features, objectness, encodings = model.first_stage(images)
        logits, codes, _ = task._second_stage(model, features, tf_proposals)
        info = jnp.asarray([[h, w, h, w]], jnp.float32)
        return {"objectness": objectness, "encodings": encodings, "logits": logits,
                "codes": codes, "det": task.predict(params, stats, images, info)}

    out = jax.device_get(jax.jit(run)(params, stats, images,
                                      jnp.asarray(tf["proposal_boxes_normalized"][None])))
    return {"config": config, "task": task, "report": report, "tf": tf, **out}


def test_every_tensor_is_restored(imported):
    report = imported["report"]
    values = json.loads((FIXTURE / "values.json").read_text())
    assert len(report.restored) == len(values["generated"]) == 275
    assert not report.reinitialized and report.unused == [] and report.unapplied == []
    ours = {"/".join(map(str, p)) for p in variables_of(imported["task"].model)}
    assert set(report.restored) == ours


def test_first_stage_equals_tf(imported):
    tf, index = imported["tf"], imported["tf"]["anchor_index"]
    assert imported["encodings"].shape[1] == int(tf["num_anchors"]) == 19200
    np.testing.assert_allclose(imported["encodings"][0][index], tf["rpn_box_encodings"],
                               rtol=0, atol=ATOL)
    np.testing.assert_allclose(imported["objectness"][0][index],
                               tf["rpn_objectness_predictions_with_background"],
                               rtol=0, atol=ATOL)
    assert tf["rpn_objectness_predictions_with_background"].std() > 0.3
    h, w = imported["task"].input_size
    anchors = np.clip(np.asarray(imported["task"].anchors)[index], 0.0, 1.0) * [h, w, h, w]
    np.testing.assert_allclose(anchors, tf["anchors"], rtol=0, atol=1e-3)  # pixels


def test_proposals_equal_tf(imported):
    det, tf = imported["det"], imported["tf"]
    assert int(det["num_proposals"][0]) == int(tf["num_proposals"]) == 300
    np.testing.assert_allclose(det["proposals"][0], tf["proposal_boxes_normalized"],
                               rtol=0, atol=ATOL)


def test_second_stage_on_tfs_proposals_equals_tf(imported):
    tf = imported["tf"]
    np.testing.assert_allclose(imported["logits"][0], tf["class_predictions_with_background"],
                               rtol=0, atol=ATOL)
    np.testing.assert_allclose(imported["codes"][0], tf["refined_box_encodings"],
                               rtol=0, atol=ATOL)
    assert tf["class_predictions_with_background"].std() > 0.5


def test_detections_equal_tf(imported):
    """Every TF detection has a jaxdet one of the same class, score and box within 1e-4, and
    the other way round (matched as sets: near-equal scores may come in either order)."""
    det, tf, task = imported["det"], imported["tf"], imported["task"]
    n = int(det["num_detections"][0])
    assert n == int(tf["num_detections"]) == 300
    h, w = task.input_size
    classes = np.asarray(det["classes"][0, :n])
    scores = np.asarray(det["scores"][0, :n])
    boxes = np.asarray(det["boxes"][0, :n]) / [h, w, h, w]
    free = np.ones(n, bool)
    for cls, score, box in zip(tf["detection_classes"][:n].astype(int),
                               tf["detection_scores"][:n], tf["detection_boxes"][:n],
                               strict=True):
        ok = (free & (classes == cls) & (np.abs(scores - score) <= ATOL)
              & (np.abs(boxes - box).max(axis=1) <= ATOL))
        assert ok.any(), f"TF detection class {cls} score {score:.6f} box {box} has no match"
        free[np.flatnonzero(ok)[0]] = False
    assert len(np.unique(classes)) >= 3  # several classes: a class-index mix-up would show
    assert tf["detection_scores"][0] - tf["detection_scores"][n - 1] > 1e-2


def test_preprocessing_equals_tf(imported):
    """A 97x131 image resized (keep aspect ratio, padded to 640x640) and normalized as TF."""
    data = np.load(FIXTURE / "resize.npz")
    sample = _sample(imported["config"], data["image"].astype(np.float32))
    stride = int(data["stride"])
    np.testing.assert_allclose(sample["image"][::stride, ::stride], data["preprocessed"],
                               rtol=0, atol=1e-4)
