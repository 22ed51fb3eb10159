"""A TF OD API CenterNet checkpoint (the TF2 zoo's centernet_resnet50_v1_fpn_512x512_kpts_coco17_
tpu-8) gives TF's own outputs in jaxdet: boxes, scores, classes, keypoints and keypoint scores.

The fixture (fixtures/make_tf_center_net_fixtures.py, run with the real TF OD API) holds the zoo
pipeline.config, TensorFlow's checkpoint index of that detector with seeded weights (the heads'
last convs calibrated so that the outputs are informative: many classes among the 100
detections, scores on both sides of 0.1, person keypoints that snap to a heatmap candidate and
others that keep their regressed position) and TF's outputs on a 512x512 test image. Here the
data shard is rebuilt from the seeds (CRC-checked against TensorFlow's), imported with
``weights.load_weights`` into the model of the hand-written jaxdet config ``jaxdet.yaml`` (the
shipped ``centernet_resnet50_v1_fpn_512`` plus the zoo config's keypoint task) and compared:

* raw head outputs at every 8th pixel: max abs difference <= 1e-4 x the output's largest value;
* the 100 detections: same classes, scores within 2e-4 (see SCORE_TOL), boxes within 1e-4
  (normalized);
* the person detections' 17 keypoints within 1e-4 (normalized) and their scores within 1e-4;
* the first conv: TF's caffe preprocessing (RGB -> BGR, BGR means) vs jaxdet's RGB
  normalization with the kernel's input channels reversed on import.

Padded inputs: TF masks the center heatmap with ``mask_from_true_image_shape`` before the top-k,
which compares output-map indices with the true image size in input pixels, so it masks
nothing unless the true image is narrower (or shorter) than the output map (128 px here):
jaxdet's predict applies the same mask (``tasks.center_net.task.true_image_mask``) and equals
TF for true images of 512x384 and 512x96 alike. CenterNet's padding is TF's too: it pads
before normalizing (``TaskFamily.pads_raw_pixels``), so padding is ``-mean / std``.
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
from jaxdet.config.loader import load_config
from jaxdet.config.tfod import load_pipeline_config
from jaxdet.interop.tf_checkpoint import TfCheckpoint
from jaxdet.interop.tf_import import plan_tf_import
from jaxdet.interop.tfod_names import UnmappedModelError, tf_unapplied, variables_of
from jaxdet.jobs import runs
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks import tf_name_map as detector_map
from jaxdet.tasks import weights
from jaxdet.tasks.center_net import targets as cn
from jaxdet.tasks.center_net.build import build_center_net
from jaxdet.tasks.center_net.task import true_image_mask
from jaxdet.tasks.center_net.tf_names import center_net_detector_map

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "tf_centernet_resnet50_v1_fpn_512x512_kpts_coco17_tpu-8"
sys.path.insert(0, str(FIXTURES))
from tf_fixture_values import rebuild_data  # noqa: E402

PERSON = 0  # TF's class_id of the keypoint task: label map id 1 - 1
PADDED = (512, 384)  # a 512x384 image in the 512x512 input
# The fixture's center logits are small differences of large numbers (each class's bias, up to
# ~400, offsets a W h of the same size; fixtures/make_tf_center_net_fixtures.py): their float32
# noise, TF vs jaxdet, is up to ~6e-4 (1.5e-6 of the bias), i.e. 1.3e-4 in score.
SCORE_TOL = 2e-4
RAW = {  # TF output in outputs.npz -> (jaxdet output, keypoint task output or None)
    "object_center": ("heatmap", None), "box_scale": ("size", None),
    "box_offset": ("offset", None), "keypoint_heatmap": ("keypoints", "heatmap"),
    "keypoint_offset": ("keypoints", "offset"), "keypoint_regression": ("keypoints", "regression"),
}

pytestmark = pytest.mark.xdist_group("tf_detectors")


def _sample(config, image: np.ndarray) -> dict:
    """An RGB image through the config's eval transforms (resizer, normalization)."""
    sample = {"image": image, "boxes": np.zeros((0, 4), np.float32),
              "classes": np.zeros((0,), np.int32)}
    for op in tasks.transforms_of(config, training=False):
        sample = op(sample)
    return sample


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The imported model's raw outputs and predictions on input.png, as the whole image (row
    0) and as if its columns from 384 (row 1) or 96 (row 2) on were padding (true images
    512x384 and 512x96), from one compiled function."""
    prefix = rebuild_data(FIXTURE, tmp_path_factory.mktemp("ckpt") / "ckpt-0")
    config = load_config(FIXTURE / "jaxdet.yaml")
    task = tasks.build_task(config)
    report = weights.load_weights(task.model, config, prefix)
    _, params, stats = nnx.split(task.model, nnx.Param, nnx.BatchStat)
    params, stats = nnx.to_pure_dict(params), nnx.to_pure_dict(stats)
    image = np.asarray(Image.open(FIXTURE / "input.png").convert("RGB"), np.float32)
    main = _sample(config, image)
    images = jnp.asarray(np.stack([main["image"]] * 3))
    info = jnp.asarray([main["image_info"], [512, 384, 512, 384], [512, 96, 512, 96]],
                       jnp.float32)

    def run(params, stats, images, info):
        raw, _ = task.apply(params, stats, images, train=False)
        return raw, task.predict(params, stats, images, info)

    raw, det = jax.device_get(jax.jit(run)(params, stats, images, info))
    return {"config": config, "task": task, "report": report, "prefix": prefix, "image": image,
            "params": params, "main": main, "raw": raw, "det": det,
            "tf": dict(np.load(FIXTURE / "outputs.npz"))}


def test_every_tensor_is_restored(imported):
    """Every weight of TF's checkpoint has its place in jaxdet's model and every jaxdet
    variable gets one; nothing is left over."""
    report = imported["report"]
    values = json.loads((FIXTURE / "values.json").read_text())
    weights_in_tf = [k for k in [*values["generated"], *values["stored"]]
                     if k.endswith("/.ATTRIBUTES/VARIABLE_VALUE") and not k.startswith("save_")]
    assert len(report.restored) == len(weights_in_tf) == 368
    assert not report.reinitialized and report.unused == [] and report.unapplied == []
    ours = {"/".join(map(str, p)) for p in variables_of(imported["task"].model)}
    assert set(report.restored) == ours


def test_raw_outputs_equal_tf(imported):
    """Every head at every 8th pixel: within 1e-4 of the output's largest magnitude."""
    tf, raw = imported["tf"], imported["raw"]
    grid = np.ix_(tf["pixel_rows"], tf["pixel_cols"])
    for name, (ours, part) in RAW.items():
        out = raw[ours][0][part] if part else raw[ours]
        ours_at = np.asarray(out[0])[grid]
        scale = float(np.abs(tf[name]).max())
        np.testing.assert_allclose(ours_at, tf[name], rtol=0, atol=1e-4 * scale, err_msg=name)
    assert tf["object_center"].std() > 1.0  # the outputs are spread: a mix-up would show


def test_first_conv_takes_rgb_where_tf_takes_bgr(imported):
    """TF preprocesses with Keras' caffe mode (RGB -> BGR, then the BGR ImageNet means):
    jaxdet's RGB normalization (means 123.68, 116.779, 103.939, std 1) gives TF's input with
    the channels reversed, and the importer reverses the first kernel's input channels, so
    the first conv computes exactly TF's; without the reversal it would not."""
    tf = imported["tf"]
    ours = imported["main"]["image"]
    np.testing.assert_array_equal(ours[::8, ::8, ::-1], tf["preprocessed"])
    ckpt = TfCheckpoint(imported["prefix"])
    key = ckpt.variables()["model/_feature_extractor/_base_model/layer_with_weights-0/kernel"]
    tf_kernel = ckpt.read(key)
    conv1 = imported["params"]["backbone"]["conv1"]
    np.testing.assert_array_equal(conv1["kernel"], tf_kernel[:, :, ::-1, :])

    def first_conv(kernel):
        layer = nnx.clone(imported["task"].model.backbone.conv1)
        layer.kernel[...] = jnp.asarray(kernel)
        return np.asarray(layer(jnp.asarray(ours[None]))[0, ::8, ::8])

    scale = float(np.abs(tf["conv1"]).max())
    np.testing.assert_allclose(first_conv(conv1["kernel"]), tf["conv1"], rtol=0,
                               atol=1e-5 * scale)
    assert np.abs(first_conv(tf_kernel) - tf["conv1"]).max() > 0.1 * scale


def _match_detections(det: dict, tf: dict, row: int, prefix: str, size: tuple[int, int]
                      ) -> tuple[dict[int, int], list[int]]:
    """{TF index: jaxdet index} of the detections that agree (class, score within SCORE_TOL, box
    within 1e-4 normalized by the original image), and the unmatched jaxdet indices.
    Matched as sets: two scores closer than the tolerance may come in either order."""
    boxes = np.asarray(det["boxes"][row]) / np.array([*size, *size])
    scores, classes = np.asarray(det["scores"][row]), np.asarray(det["classes"][row])
    unmatched, pairs = list(range(len(scores))), {}
    for i, (cls, score, box) in enumerate(zip(
            tf[f"{prefix}detection_classes"].astype(int), tf[f"{prefix}detection_scores"],
            tf[f"{prefix}detection_boxes"], strict=True)):
        found = [j for j in unmatched if classes[j] == cls and abs(scores[j] - score) <= SCORE_TOL
                 and np.abs(boxes[j] - box).max() <= 1e-4]
        if found:
            pairs[i] = found[0]
            unmatched.remove(found[0])
    return pairs, unmatched


def test_detections_equal_tf(imported):
    """TF's 100 detections (its top 100 center peaks, no NMS) are jaxdet's: class, score and
    box, in the same order up to near-ties."""
    det, tf = imported["det"], imported["tf"]
    n = int(tf["num_detections"])
    assert int(det["num_detections"][0]) == n == 100
    pairs, unmatched = _match_detections(det, tf, 0, "", (512, 512))
    assert len(pairs) == n and not unmatched
    assert sum(i == j for i, j in pairs.items()) >= n - 4
    scores, classes = tf["detection_scores"], tf["detection_classes"]
    assert scores.min() < 0.1 < scores.max() and len(np.unique(classes)) > 20  # informative


def test_person_keypoints_equal_tf(imported):
    """TF gives keypoints to the person detections only (``_postprocess_keypoints_multi_class``;
    the rest are zeros); jaxdet gives every detection the task's keypoints. For each person
    detection the 17 keypoints (snapped to a heatmap candidate, or the regressed position
    scored ``unmatched_keypoint_score`` 0.1) and their scores are TF's."""
    det, tf = imported["det"], imported["tf"]
    pairs, _ = _match_detections(det, tf, 0, "", (512, 512))
    persons = np.flatnonzero(tf["detection_classes"] == PERSON)
    assert len(persons) >= 8
    others = np.flatnonzero(tf["detection_classes"] != PERSON)
    assert not tf["detection_keypoints"][others].any()
    assert not tf["detection_keypoint_scores"][others].any()
    tf_points = tf["detection_keypoints"][persons]
    tf_scores = tf["detection_keypoint_scores"][persons]
    ours = [pairs[i] for i in persons]
    points = np.asarray(det["keypoints"][0])[ours] / 512.0
    scores = np.asarray(det["keypoint_scores"][0])[ours]
    np.testing.assert_allclose(points, tf_points, rtol=0, atol=1e-4)
    np.testing.assert_allclose(scores, tf_scores, rtol=0, atol=1e-4)
    snapped = tf_scores != np.float32(0.1)
    assert 0.2 < snapped.mean() < 0.8  # both kinds are compared


def test_a_true_image_of_384_columns_is_not_masked(imported):
    """TF's ``mask_from_true_image_shape`` compares output-map indices (0..127) with the true
    image's size in input pixels (512x384), so it masks nothing here; jaxdet, which has no
    mask, gives TF's detections, normalized by the true image, and the persons' keypoints."""
    det, tf = imported["det"], imported["tf"]
    true = (512, 384)
    pairs, unmatched = _match_detections(det, tf, 1, "true384_", true)
    assert len(pairs) == 100 and not unmatched
    persons = np.flatnonzero(tf["true384_detection_classes"] == PERSON)
    points = np.asarray(det["keypoints"][1])[[pairs[i] for i in persons]] / np.array(true)
    np.testing.assert_allclose(points, tf["true384_detection_keypoints"][persons], atol=1e-4)


def test_a_true_image_of_96_columns_is_masked_as_tf_masks_it(imported):
    pairs, unmatched = _match_detections(imported["det"], imported["tf"], 2, "true96_",
                                         (512, 96))
    assert len(pairs) == 100 and not unmatched


def test_the_true_image_mask_is_tfs_and_matters(imported):
    """``true_image_mask`` keeps output columns < 96 (the true width in input pixels, as TF
    compares them) for the 512x96 true image; without it the top-k would not be TF's."""
    tf, task = imported["tf"], imported["task"]
    heatmap = jax.nn.sigmoid(jnp.asarray(imported["raw"]["heatmap"][2:3]))
    mask = np.asarray(true_image_mask(heatmap.shape, jnp.asarray([[512, 96, 512, 96]])))
    rows, cols = np.arange(heatmap.shape[1]), np.arange(heatmap.shape[2])
    expected = (rows[:, None] < 512) & (cols[None, :] < 96)
    np.testing.assert_array_equal(mask[0, :, :, 0], expected)
    unmasked, _, _, _ = cn.top_k_peaks(heatmap, task.max_detections, kernel=task.peak_kernel)
    assert np.abs(np.asarray(unmasked[0]) - tf["true96_detection_scores"]).max() > 0.01


def test_padding_is_tfs(imported):
    """A 512x384 image padded to the 512x512 input: TF's padding is 0 in pixels, so -mean/std
    after the normalization."""
    config = imported["config"]
    padded = _sample(config, imported["image"][:, :PADDED[1]])
    assert padded["image_info"].tolist() == [*PADDED, *PADDED]
    pad = padded["image"][:, PADDED[1]:]
    expected = -np.asarray(config.data.mean, np.float32) / np.asarray(config.data.std)
    np.testing.assert_allclose(pad, np.broadcast_to(expected, pad.shape), atol=1e-4)


def test_the_cli_path_loads_the_same_weights(imported):
    """``jaxdet predict --checkpoint ckpt-0`` loads through ``runs.load_for_inference``."""
    task, state, name = runs.load_for_inference(imported["config"], None,
                                                checkpoint=imported["prefix"])
    assert name == "ckpt-0"
    flat = jax.tree_util.tree_leaves_with_path(state["params"])
    ours = dict(jax.tree_util.tree_leaves_with_path(imported["params"]))
    assert len(flat) == len(ours)
    for path, value in flat:
        np.testing.assert_array_equal(value, ours[path])


def test_the_pipeline_config_converts_to_jaxdet_yaml(monkeypatch):
    """The hand-written jaxdet.yaml is what the pipeline.config converter gives (model,
    normalization and input size)."""
    monkeypatch.chdir(FIXTURE)  # keypoint_label_map_path is relative, as TF reads it
    converted = load_pipeline_config(FIXTURE / "pipeline.config", [
        "data.train.input_path=unused", "data.eval.input_path=unused"])
    ours = load_config(FIXTURE / "jaxdet.yaml")
    assert converted.model == ours.model
    assert (converted.data.mean, converted.data.std) == (ours.data.mean, ours.data.std)
    assert converted.data.resizer == ours.data.resizer


def test_mapping_is_the_checkpoints(imported):
    """The map covers the checkpoint exactly (names and shapes, as ``plan_tf_import`` sees)."""
    ckpt = TfCheckpoint(imported["prefix"])
    model = imported["task"].model
    plan = plan_tf_import(model, ckpt, detector_map(model, imported["config"]))
    assert plan.mismatched == [] and plan.unused == []


@pytest.mark.parametrize("name", ["centernet_hourglass104_512x512_coco17_tpu-8",
                                  "center_net_deepmac_512x512_voc_only_tpu-32"])
def test_other_zoo_configs_map_onto_their_tf_checkpoints(name, tmp_path):
    """Every tensor of TF's checkpoint of the zoo config's CenterNet (a names-only fixture:
    its index and object graph, written by TensorFlow) has its place in the model jaxdet
    builds from the config, with the same shape; every jaxdet variable gets one; nothing is
    left over. Hourglass-104: two stacks, heads on each; DeepMAC: its embedding heads and
    mask network too (its random-generator state is no weight: unapplied)."""
    fixture = FIXTURES / "tf_names" / f"tf_{name}"
    ckpt = TfCheckpoint(rebuild_data(fixture, tmp_path / "ckpt-0"))
    config = load_pipeline_config(fixture / "pipeline.config", [
        "data.train.input_path=unused", "data.eval.input_path=unused"])
    model = abstract_build(lambda: build_center_net(config, seed=0))
    plan = plan_tf_import(model, ckpt, detector_map(model, config),
                          unapplied=tf_unapplied(model))
    assert plan.mismatched == [] and plan.unused == []
    assert all(k.startswith("model/_self_supervised_rng/") for k in plan.unapplied)
    weights_in_tf = [k for k in ckpt.keys() if k.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
                     and not k.startswith("save_counter")]
    assert len(plan.tensors) + len(plan.unapplied) == len(weights_in_tf)
    ours = {"/".join(map(str, p)) for p in variables_of(model)}
    assert {"/".join(map(str, t.path)) for t in plan.tensors} == ours


@pytest.mark.parametrize("backbone, neck, message", [
    ("{name: resnet_v2_50}", "{name: center_net_deconv}", "feature extractor 'resnet_v2_50'"),
    ("{name: mobilenet_v2}", "{name: center_net_mobilenet_v2_fpn}",
     "feature extractor 'mobilenet_v2_fpn'"),
    ("{name: resnet50}", "{name: center_net_fpn}", "resnet_v1_50_fpn is tf.keras' ResNet"),
])
def test_unmapped_extractors_say_which(backbone, neck, message):
    """A CenterNet feature extractor without a TF name map: an error naming it as TF does
    (and a torchvision-style ResNet under the ResNet-v1 FPN: what to set)."""
    config = load_config("centernet_shapes_demo", [f"model.backbone={backbone}",
                                                    f"model.neck={neck}"])
    model = abstract_build(lambda: build_center_net(config, seed=0))
    with pytest.raises(UnmappedModelError, match=message):
        center_net_detector_map(model)
