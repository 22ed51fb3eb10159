"""jaxdet's retinanet_resnet50_fpn_torchvision config is torchvision's
``retinanet_resnet50_fpn``: the same parameters one-to-one (current and pre-0.13 key names), and
for the same weights and input the same FPN outputs, raw head outputs, anchors and
detections. The reference comes from
``tests/models/fixtures/make_torchvision_retinanet_fixture.py`` (run offline with torchvision;
the suite never imports torch): the weights are drawn again here by the fixture's rule from its
key / shape list, written to a ``.safetensors`` file and loaded through
``weights.load_weights``, as ``jaxdet predict --checkpoint FILE`` does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxdet.config.loader import load_config
from jaxdet.core.nms import batched_nms
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.torch_names import torch_shape_to_ours
from jaxdet.models.abstract import abstract_build
from jaxdet.results.labels import class_labels
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.tasks.ssd.model import concat_levels
from jaxdet.tasks.ssd.torchvision_names import (
    current_names,
    torchvision_retinanet_state_dict_map,
)
from jaxdet.tasks.weights import load_weights
from torch_weights import torch_deterministic_weights

FIXTURES = Path(__file__).parents[2] / "models" / "fixtures"
FIXTURE = json.loads((FIXTURES / "torchvision_retinanet.json").read_text())
HEIGHT, WIDTH = FIXTURE["image_size"]
LEVELS = (3, 4, 5, 6, 7)

pytestmark = pytest.mark.xdist_group("torchvision_retinanet")


def _config(extra=()):
    return load_config("retinanet_resnet50_fpn_torchvision", [
        *extra, f"data.resizer={{name: fixed_shape, height: {HEIGHT}, width: {WIDTH}}}"])


def _legacy(key: str) -> str:
    """A current key under the names torchvision wrote before 0.13 (the COCO checkpoint's)."""
    key = re.sub(r"^(backbone\.fpn\.(?:inner|layer)_blocks\.\d+)\.0\.", r"\1.", key)
    return re.sub(r"^(head\.\w+_head\.conv)\.(\d+)\.0\.",
                  lambda m: f"{m.group(1)}.{2 * int(m.group(2))}.", key)


@pytest.fixture(scope="module")
def weights() -> dict[str, np.ndarray]:
    return torch_deterministic_weights(FIXTURE["shapes"])


def _write(path: Path, state: dict[str, np.ndarray]) -> Path:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_numpy.save_file(state, str(path))
    return path


@pytest.fixture(scope="module")
def retinanet_file(weights, tmp_path_factory) -> Path:
    """The state dict as ``retinanet_resnet50_fpn(weights=None)`` saves it: current names and a
    ``num_batches_tracked`` beside every (non-frozen) BatchNorm."""
    state = dict(weights)
    for key in list(state):
        if key.endswith("running_var"):
            state[key.replace("running_var", "num_batches_tracked")] = np.array(3, np.int64)
    return _write(tmp_path_factory.mktemp("tv") / "retinanet.safetensors", state)


@pytest.fixture(scope="module")
def detector(retinanet_file, build_fast):
    config = _config()
    model = build_fast(lambda: ssd_build.build_model(config), seed=1)
    report = load_weights(model, config, retinanet_file, format="torch")
    assert len(report.restored) == len(FIXTURE["shapes"])
    assert report.reinitialized == [] and report.unused == []
    model.eval()
    return model


def _flat(module) -> dict[str, np.ndarray]:
    state = nnx.state(module, (nnx.Param, nnx.BatchStat))
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(state)}


def test_parameters_map_one_to_one_with_torchvision():
    model = abstract_build(lambda: ssd_build.build_model(_config()))
    mapping = torchvision_retinanet_state_dict_map(model)
    assert set(mapping) == set(FIXTURE["shapes"])
    ours = dict(nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat))))
    assert len({path for path, _ in mapping.values()}) == len(ours) == len(mapping)
    for key, shape in FIXTURE["shapes"].items():
        path, transform = mapping[key]
        assert tuple(ours[path].shape) == torch_shape_to_ours(transform, tuple(shape)), key
    # (torchvision's FrozenBatchNorm2d holds its scale and bias as buffers, not parameters)
    counts = {name: sum(int(np.prod(v.shape)) for _, v in
                        nnx.to_flat_state(nnx.state(getattr(model, name), nnx.Param)))
              for name in ("neck", "head")}
    assert counts == {"neck": FIXTURE["num_params"]["fpn"], "head": FIXTURE["num_params"]["head"]}
    assert mapping["backbone.fpn.extra_blocks.p7.weight"] == (("neck", "extra", 1, "conv",
                                                               "kernel"), "conv")
    assert mapping["head.regression_head.bbox_reg.bias"] == (("head", "box_predictor", "bias"),
                                                             "box_bias_xywh")
    # the pre-0.13 names (inner_blocks.{i}.weight, conv.{2 j}.weight) come back to these
    legacy = [_legacy(k) for k in FIXTURE["shapes"]]
    assert "head.classification_head.conv.6.weight" in legacy
    assert "backbone.fpn.layer_blocks.2.bias" in legacy
    assert list(current_names(dict.fromkeys(legacy))) == list(FIXTURE["shapes"])  # in order


def test_outputs_equal_torchvision(detector):
    ref = np.load(FIXTURES / "torchvision_retinanet_outputs.npz")
    image = np.random.default_rng(1).standard_normal((1, HEIGHT, WIDTH, 3)).astype(np.float32)
    np.testing.assert_array_equal(image.ravel()[:8], ref["input_head"])
    config = _config()

    @jax.jit
    def run(state, x):
        model = nnx.merge(graphdef, state)
        features = model.features(x)
        return features, concat_levels(dict(zip(("class_logits", "box_encodings"),
                                                model.head(features), strict=True)))

    graphdef, state = nnx.split(detector)
    fpn, (logits, encodings) = run(state, jnp.asarray(image))

    def close(ours, expected, name, rtol=1e-5):
        """|ours - expected| <= rtol * max|expected| (float32 sums over ResNet-50 depths)."""
        ours, scale = np.asarray(ours, np.float64), float(np.abs(expected).max())
        assert scale > 1e-2, name  # a live signal
        np.testing.assert_allclose(ours, expected, rtol=0, atol=rtol * scale, err_msg=name)

    for level in LEVELS:
        out = np.asarray(fpn[level])
        close(out[..., ::16], ref[f"fpn_p{level}"], f"FPN P{level}")
        flat = out.reshape(-1, out.shape[-1]).astype(np.float64)
        close(flat.mean(0), ref[f"fpn_mean_p{level}"], f"FPN P{level} mean")
        close(flat.std(0), ref[f"fpn_std_p{level}"], f"FPN P{level} std")
    index = ref["anchor_index"]
    close(np.asarray(logits)[:, index], ref["cls_logits"], "cls_logits")
    sizes = np.cumsum([9 * int(np.prod(fpn[lvl].shape[1:3])) for lvl in LEVELS])[:-1]
    for i, part in enumerate(np.split(np.asarray(logits[0], np.float64), sizes)):
        close(part.mean(0), ref["cls_mean"][i], f"cls mean P{LEVELS[i]}")
        close(part.std(0), ref["cls_std"][i], f"cls std P{LEVELS[i]}")
    # ours (ty, tx, th, tw), torchvision's (dx, dy, dw, dh)
    close(np.asarray(encodings)[..., [1, 0, 3, 2]], ref["bbox_regression"], "bbox_regression")

    # anchors: ours normalized (ymin, xmin, ymax, xmax), torchvision's (x1, y1, x2, y2) pixels
    anchors = ssd_build.build_anchors(config, detector)
    pixels = anchors.astype(np.float64) * [HEIGHT, WIDTH, HEIGHT, WIDTH]
    np.testing.assert_allclose(pixels[:, [1, 0, 3, 2]], ref["anchors"], rtol=0, atol=1e-3)

    # detections as torchvision's postprocess_detections makes them (decode, clip, NMS per
    # class at 0.5) from our outputs, with the box coder the config builds (its clamp too)
    coder = ssd_build.build_box_coder(config.model)
    boxes = jnp.clip(coder.decode(encodings, jnp.asarray(anchors)[None]), 0.0, 1.0)
    post = config.model.post_processing
    det = batched_nms(boxes, jax.nn.sigmoid(logits), score_threshold=FIXTURE["score_thresh"],
                      iou_threshold=post.iou_threshold,
                      max_detections_per_class=post.max_detections_per_class,
                      max_total_detections=post.max_total_detections,
                      pre_nms_top_k=post.pre_nms_top_k)
    n = int(det["num_detections"][0])
    assert n == len(ref["det_scores"]) > 10
    np.testing.assert_array_equal(np.asarray(det["classes"][0, :n]), ref["det_labels"])
    np.testing.assert_allclose(np.asarray(det["scores"][0, :n]), ref["det_scores"], atol=1e-5)
    det_boxes = np.asarray(det["boxes"][0, :n], np.float64) * [HEIGHT, WIDTH, HEIGHT, WIDTH]
    np.testing.assert_allclose(det_boxes[:, [1, 0, 3, 2]], ref["det_boxes"], atol=1e-3)


def test_pre_013_names_load_the_same_detector(detector, weights, tmp_path, build_fast):
    path = _write(tmp_path / "retinanet_resnet50_fpn_coco.safetensors",
                  {_legacy(k): v for k, v in weights.items()})
    config = _config()
    model = build_fast(lambda: ssd_build.build_model(config), seed=2)
    report = load_weights(model, config, path)  # format auto: torch
    assert len(report.restored) == len(FIXTURE["shapes"]) and report.unused == []
    expected, ours = _flat(detector), _flat(model)
    for name, value in expected.items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)


def test_restores_the_backbone_alone(detector, retinanet_file, build_fast):
    config = _config()
    model = build_fast(lambda: ssd_build.build_model(config), seed=2)
    fresh = _flat(model)
    report = load_weights(model, config, retinanet_file, restore="classification")
    assert report.unused == [] and report.reinitialized == []
    expected, ours = _flat(detector), _flat(model)
    assert sorted(report.restored) == sorted(k for k in ours if k.startswith("backbone/"))
    for name in ours:
        want = expected[name] if name.startswith("backbone/") else fresh[name]
        np.testing.assert_array_equal(ours[name], want, err_msg=name)


def test_restores_for_another_class_count_what_fits_or_the_feature_extractor(retinanet_file,
                                                                             build_fast):
    """``fitting``: all but the class predictor; ``detection`` (as TF2): backbone and FPN,
    the head keeps its initialization."""
    config = _config(["model.num_classes=3"])
    model = build_fast(lambda: ssd_build.build_model(config))
    report = load_weights(model, config, retinanet_file, restore="fitting")
    assert sorted(report.reinitialized) == ["head/class_predictor/bias",
                                            "head/class_predictor/kernel"]
    assert len(report.restored) == len(FIXTURE["shapes"]) - 2
    report = load_weights(model, config, retinanet_file, restore="detection")
    assert report.reinitialized and all(n.startswith("head/") for n in report.reinitialized)
    assert all(n.startswith(("backbone/", "neck/")) for n in report.restored)
    assert len(report.restored) + len(report.reinitialized) == len(FIXTURE["shapes"])
    assert report.unused == []


def test_predictions_carry_coco_ids(tmp_path):
    """Without a readable COCO dataset, the 91 classes are COCO's ids 0..90 and names."""
    ids, names = class_labels(load_config("retinanet_resnet50_fpn_torchvision"), tmp_path)
    assert ids == list(range(91))
    assert (names[0], names[1], names[12], names[90]) == ("id_0", "person", "id_12",
                                                          "toothbrush")


def test_files_and_models_that_do_not_fit_are_named(weights, retinanet_file, tmp_path,
                                                     build_fast):
    # a torchvision RetinaNet file into the TF OD API's RetinaNet (BN in the FPN and head)
    config = load_config("retinanet_resnet50_fpn_640")
    model = build_fast(lambda: ssd_build.build_model(config))
    with pytest.raises(ValueError, match="no counterpart.*retinanet_resnet50_fpn_torchvision"):
        load_weights(model, config, retinanet_file)
    # ... whose ResNet-50 has the same tensors: the backbone alone restores
    report = load_weights(model, config, retinanet_file, restore="classification")
    assert len(report.restored) == sum(k.startswith("backbone.body.") for k in weights)
    # a file without the head (a torchvision backbone + FPN) for the whole detector
    config = _config()
    model = abstract_build(lambda: ssd_build.build_model(config))
    path = _write(tmp_path / "no_head.safetensors",
                  {k: v for k, v in weights.items() if not k.startswith("head.")})
    with pytest.raises(CheckpointError, match=r"does not fit this model: 20 of the 301 tensors "
                                              r"it needs are not in the file, e\.g\. head\."):
        load_weights(model, config, path)
    # 6 anchors per location (the TF layout's count) in the file: the shape is named
    path = _write(tmp_path / "six.safetensors", {
        **weights, "head.regression_head.bbox_reg.weight": np.zeros((24, 256, 3, 3), np.float32)})
    with pytest.raises(CheckpointError, match=r"bbox_reg\.weight has shape \(24, 256, 3, 3\)"):
        load_weights(model, config, path)
    # a network that is not torchvision's under the same names: its P5 is not smoothed
    config = _config(["model.neck.smooth_top=false"])
    with pytest.raises(CheckpointError, match=r"2 tensors this model has no place for, e\.g\. "
                                              r"backbone\.fpn\.layer_blocks\.2\.0\."):
        load_weights(abstract_build(lambda: ssd_build.build_model(config)), config,
                     retinanet_file)
    # tensors the model has no place for
    path = _write(tmp_path / "extra.safetensors",
                  {**weights, "rpn.head.conv.0.0.weight": np.zeros((1,), np.float32)})
    with pytest.raises(CheckpointError, match=r"1 tensors this model has no place for.*rpn"):
        load_weights(model, config, path)
