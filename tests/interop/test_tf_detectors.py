"""TF OD API checkpoints give TF's own outputs in jaxdet.

Each fixture (fixtures/make_tf_detector_fixtures.py, run with the real TF OD API) holds a
zoo pipeline.config, TensorFlow's checkpoint index of that detector with seeded random weights,
and TF's outputs on a test image. Here the data shard is rebuilt from the seeds (every tensor's
CRC32C is checked against the one TensorFlow stored), the checkpoint is imported into the
model jaxdet builds from the same pipeline.config, and the outputs are compared: raw box
encodings and class logits (max abs difference <= 1e-4), anchors, the preprocessed image, and
the post-processed detections (boxes within 1e-3 normalized, same classes, scores within
1e-4)."""

from __future__ import annotations

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
from jaxdet.data import build as data_build
from jaxdet.interop.tf_checkpoint import TfCheckpoint
from jaxdet.interop.tf_import import plan_tf_import
from jaxdet.interop.tfod_names import tf_unapplied, variables_of
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks import tf_name_map as detector_map
from jaxdet.tasks.faster_rcnn.build import build_faster_rcnn
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.weights import load_tf_detection_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

NAMES = sorted(d.name.removeprefix("tf_") for d in FIXTURES.glob("tf_ssd_*")
               if (d / "ckpt-0.index").is_file())  # CenterNet's: test_tf_center_net.py
# TF computed the fixtures in float32 (the zoo configs train in bfloat16 on TPUs)
PLACEHOLDERS = ["data.train.input_path=unused", "data.eval.input_path=unused"]

pytestmark = pytest.mark.xdist_group("tf_detectors")


@pytest.fixture(scope="module", params=NAMES)
def imported(request, tmp_path_factory):
    fixture = FIXTURES / f"tf_{request.param}"
    prefix = rebuild_data(fixture, tmp_path_factory.mktemp("ckpt") / "ckpt-0")
    config = load_pipeline_config(fixture / "pipeline.config", PLACEHOLDERS)
    task = tasks.build_task(config)
    report = load_tf_detection_checkpoint(task.model, config, prefix)
    _, params, stats = nnx.split(task.model, nnx.Param, nnx.BatchStat)
    image = np.asarray(Image.open(fixture / "input.png").convert("RGB"), np.float32)
    sample = {"image": image, "boxes": np.zeros((0, 4), np.float32),
              "classes": np.zeros((0,), np.int32)}
    for op in data_build.build_transforms(config.data, training=False):
        sample = op(sample)
    params, stats = nnx.to_pure_dict(params), nnx.to_pure_dict(stats)
    images = jnp.asarray(sample["image"][None])
    height, width = task.input_size
    info = jnp.asarray([[height, width, height, width]], jnp.float32)

    def run(params, stats, images, info):
        (logits, encodings), _ = task.apply(params, stats, images, train=False)
        return logits, encodings, task.predict(params, stats, images, info)

    # the raw outputs and the detections from one compiled function (one compile, cached)
    logits, encodings, det = jax.device_get(jax.jit(run)(params, stats, images, info))
    return {"config": config, "task": task, "report": report, "fixture": fixture,
            "params": params, "stats": stats, "images": images, "logits": logits,
            "encodings": encodings, "det": det, "tf": dict(np.load(fixture / "outputs.npz"))}


def test_every_tensor_is_restored(imported):
    report = imported["report"]
    generated = len(__import__("json").loads(
        (imported["fixture"] / "values.json").read_text())["generated"])
    assert len(report.restored) + len(report.unapplied) == generated
    assert not report.reinitialized and report.unused == []


def test_raw_outputs_equal_tf(imported):
    tf = imported["tf"]
    logits, encodings = np.asarray(imported["logits"][0]), np.asarray(imported["encodings"][0])
    index = tf["anchor_index"]
    assert logits.shape[0] == int(tf["num_anchors"])
    tf_logits = tf["class_predictions_with_background"]
    if tf_logits.shape[1] == logits.shape[1] + 1:  # TF's background column, dropped by jaxdet
        tf_logits = tf_logits[:, 1:]
    np.testing.assert_allclose(encodings[index], tf["box_encodings"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(logits[index], tf_logits, rtol=0, atol=1e-4)
    assert tf_logits.std() > 0.3  # the logits are spread: a mix-up would show


def test_anchors_equal_tf(imported):
    tf = imported["tf"]
    anchors = ssd_build.build_anchors(imported["config"], imported["task"].model)
    np.testing.assert_allclose(anchors[tf["anchor_index"]], tf["anchors"], rtol=0, atol=1e-6)


def test_detections_equal_tf(imported):
    """Every TF detection has a jaxdet one of the same class, score within 1e-4 and box within
    1e-3, and the other way round. Matched as sets: two detections whose scores differ by less
    than the tolerance may legitimately come in either order."""
    task, tf, det = imported["task"], imported["tf"], imported["det"]
    height, width = task.input_size
    n = int(det["num_detections"][0])
    assert n == int(tf["num_detections"]) > 0
    ours = list(zip(np.asarray(det["classes"][0, :n]).tolist(),
                    np.asarray(det["scores"][0, :n]).tolist(),
                    (np.asarray(det["boxes"][0, :n]) / np.array([height, width] * 2)).tolist(),
                    strict=True))
    unmatched = list(range(n))
    for cls, score, box in zip(tf["detection_classes"][:n].astype(int).tolist(),
                               tf["detection_scores"][:n].tolist(),
                               tf["detection_boxes"][:n].tolist(), strict=True):
        found = [i for i in unmatched if ours[i][0] == cls and abs(ours[i][1] - score) <= 1e-4
                 and np.abs(np.subtract(ours[i][2], box)).max() <= 1e-3]
        assert found, f"TF detection class {cls} score {score:.6f} box {box} has no match"
        unmatched.remove(found[0])
    in_order = sum(a[0] == b for a, b in zip(ours, tf["detection_classes"][:n], strict=True))
    assert in_order >= n - 4  # at most a few near-ties swap places
    scores = tf["detection_scores"][:n]
    assert scores[0] - scores[-1] > 1e-3  # the scores differ: NMS is not deciding ties


def test_preprocessing_equals_tf(imported):
    """A 97x131 image resized and normalized as TF does (tf.compat.v1 bilinear resize)."""
    data = np.load(imported["fixture"] / "resize.npz")
    sample = {"image": data["image"].astype(np.float32), "boxes": np.zeros((0, 4), np.float32),
              "classes": np.zeros((0,), np.int32)}
    for op in data_build.build_transforms(imported["config"].data, training=False):
        sample = op(sample)
    stride = int(data["stride"])
    np.testing.assert_allclose(sample["image"][::stride, ::stride], data["preprocessed"],
                               rtol=0, atol=1e-5)


# the CenterNet ones (hourglass, DeepMAC) are checked in test_tf_center_net.py
NAMES_ONLY = sorted(d.name.removeprefix("tf_") for d in (FIXTURES / "tf_names").glob("tf_*")
                    if "center" not in d.name)


# D5-D7 (14-20 s each to build) under -m exhaustive: D1-D4 map the same BiFPN and heads
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.exhaustive) if n.startswith(
        ("ssd_efficientdet_d5", "ssd_efficientdet_d6", "ssd_efficientdet_d7")) else n
    for n in NAMES_ONLY])
def test_every_other_zoo_config_maps_onto_its_tf_checkpoint(name, tmp_path):
    """The other TF2 zoo SSD/EfficientDet configs, the ResNet-101/152 C4 Faster R-CNN ones
    (whose 1024x1024 and 800x1333 versions have the same variables), the ResNet-50 FPN
    Faster R-CNN one and the Inception-ResNet-v2 Mask R-CNN one: every tensor of TF's
    checkpoint of that architecture (its index and object graph, written by TensorFlow) has
    its place in the model jaxdet builds from the config, with the same shape, and nothing is
    left over."""
    fixture = FIXTURES / "tf_names" / f"tf_{name}"
    ckpt = TfCheckpoint(rebuild_data(fixture, tmp_path / "ckpt-0"))
    config = load_pipeline_config(fixture / "pipeline.config", PLACEHOLDERS)
    build = build_faster_rcnn if config.model.type == "faster_rcnn" else ssd_build.build_model
    model = abstract_build(lambda: build(config, seed=0))
    mapping = detector_map(model, config)
    plan = plan_tf_import(model, ckpt, mapping, unapplied=tf_unapplied(model))
    assert plan.mismatched == []
    assert plan.unused == []
    weights = [k for k in ckpt.keys() if k.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
               and not k.startswith("save_counter")]
    assert len(plan.tensors) + len(plan.unapplied) == len(weights)
    ours = {"/".join(map(str, p)) for p in variables_of(model)}
    assert {"/".join(map(str, t.path)) for t in plan.tensors} == ours  # every variable filled
