"""pipeline.config -> jaxdet for Faster R-CNN: the TF OD API's 9 C4 Faster R-CNN configs
(ResNet-50/101/152 at 640x640, 1024x1024 and 800x1333), the FPN one and the Mask R-CNN
(Inception-ResNet-v2) one convert and build; the converted ResNet-50 640 configs are the
shipped ports; the ResNet-50 C4, FPN and Mask R-CNN models have TF's parameter counts; what
does not map is an error naming the file, line and field."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from flax import nnx

from jaxdet import tasks
from jaxdet.config.compare import differences
from jaxdet.config.loader import load_config
from jaxdet.config.tfod import convert_pipeline_config, load_pipeline_config
from jaxdet.config.tfod_common import TfodConfigError
from jaxdet.data import build as data_build
from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.faster_rcnn import build as faster_rcnn_build

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
needs_shared = pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")
TF_COUNTS = Path(__file__).parent / "fixtures" / "tf_faster_rcnn_counts.json"
TF_FPN_COUNTS = Path(__file__).parent / "fixtures" / "tf_faster_rcnn_fpn_counts.json"
TF_MASK_COUNTS = Path(__file__).parent / "fixtures" / "tf_mask_rcnn_counts.json"
MASK_RCNN = "mask_rcnn_inception_resnet_v2_1024x1024_coco17_gpu-8"
FPN_640 = "faster_rcnn_resnet50_v1_fpn_640x640_coco17_tpu-8"

R50_640 = "faster_rcnn_resnet50_v1_640x640_coco17_tpu-8"
C4 = {f"faster_rcnn_resnet{d}_v1_{s}_coco17_{hw}-8": (d, s)
      for d in (50, 101, 152)
      for s, hw in (("640x640", "tpu"), ("1024x1024", "tpu"), ("800x1333", "gpu"))}
# Where the converted zoo config and the shipped port differ, and why: eval_config.batch_size
# is not read (jaxdet's default 8; the shipped file copies TF's 1), use_matmul_crop_and_resize
# picks the matmul crop (the same values as the shipped default gather) and the
# fine_tune_checkpoint placeholder.
TENSORBOARD_TAGS = "train.tensorboard_tags: converted 'tf' != shipped 'jaxdet'"
SHIPPED_DIFFERENCES = {
    "eval.batch_size: converted 8 != shipped 1",
    "model.crop_method: converted 'matmul' != shipped 'gather'",
    "train.init_checkpoint: converted {'path': 'PATH_TO_BE_CONFIGURED/resnet50.ckpt-1', "
    "'format': 'tf', 'restore': 'classification'} != shipped None",
    # TensorBoard as TF's model_dir has it, for a converted config
    TENSORBOARD_TAGS,
}


def _load(name: str, overrides=()):
    return load_pipeline_config(TFOD_CONFIGS / f"{name}.config", overrides)


def _diff(a, b) -> list[str]:
    return differences(a, b, labels=("converted", "shipped"))


# ----------------------------------------------------------------- the zoo's configs


@needs_shared
@pytest.mark.parametrize("name", sorted(C4))
def test_zoo_c4_configs_convert_with_what_the_file_says(name):
    depth, size = C4[name]
    c = _load(name)
    m = c.model
    assert m.type == "faster_rcnn" and m.num_classes == 90
    assert m.backbone.name == f"resnet{depth}"
    assert m.backbone.stride_in_1x1 and m.backbone.padding == "same"
    assert (m.backbone.batch_norm.decay, m.backbone.batch_norm.epsilon) == (0.997, 1e-5)
    gpu = size == "800x1333"
    # the TPU configs say batch_norm_trainable: true; the GPU ones leave TF's default false
    assert m.backbone.batch_norm.frozen == gpu
    a = m.first_stage_anchor_generator
    assert (a.scales, a.aspect_ratios) == ((0.25, 0.5, 1.0, 2.0), (0.5, 1.0, 2.0))
    assert (a.height, a.width, a.height_stride) == (256.0, 256.0, 16)
    assert (m.first_stage_box_predictor_depth, m.first_stage_box_predictor_kernel_size,
            m.first_stage_box_predictor_stddev) == (512, 3, 0.01)
    assert (m.first_stage_nms_iou_threshold, m.first_stage_max_proposals) == (0.7, 300)
    assert (m.first_stage_minibatch_size, m.first_stage_positive_balance_fraction) == (256, 0.5)
    assert (m.first_stage_localization_loss_weight, m.first_stage_objectness_loss_weight) == (
        2.0, 1.0)
    assert (m.initial_crop_size, m.maxpool_kernel_size, m.maxpool_stride) == (14, 2, 2)
    assert m.crop_method == ("gather" if gpu else "matmul")
    assert m.share_box_across_classes == (not gpu)
    assert m.clip_anchors_to_image == (not gpu)
    assert (m.second_stage_batch_size, m.second_stage_balance_fraction) == (64, 0.25)
    post = m.second_stage_post_processing
    assert (post.iou_threshold, post.max_detections_per_class) == (0.6, 100)
    assert post.max_total_detections == (100 if gpu else 300)
    assert (m.second_stage_localization_loss_weight,
            m.second_stage_classification_loss_weight) == (2.0, 1.0)
    assert not m.predict_instance_masks
    expected_size = {"640x640": 640, "1024x1024": 1024, "800x1333": 1344}[size]
    assert data_build.input_size(c.data) == (expected_size, expected_size)
    assert c.data.mean == (123.68, 116.779, 103.939) and c.data.std == (1.0, 1.0, 1.0)
    assert c.train.optimizer.name == "momentum" and c.train.optimizer.momentum == 0.9
    assert c.train.optimizer.weight_decay == 0.0 and c.train.ema_decay is None
    assert c.train.init_checkpoint.restore == "classification"
    assert c.data.train.type == "tfrecord" and c.data.augment[0].name == "random_horizontal_flip"


@needs_shared
@pytest.mark.parametrize("name", sorted(n for n in C4 if "800x1333" in n))
def test_gpu_configs_pad_1333_to_1344_and_freeze_batch_norm_with_warnings(name, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        c = _load(name)
    r = c.data.resizer
    assert (r.name, r.min_dimension, r.max_dimension) == ("keep_aspect_ratio", 800, 1344)
    text = [rec.message for rec in caplog.records]
    assert any("max_dimension: 1333 -> 1344" in t and "0.83% larger" in t for t in text)
    assert any("batch_norm_trainable: false" in t and "gamma / beta" in t for t in text)


@needs_shared
@pytest.mark.parametrize("name, shipped", [(R50_640, "faster_rcnn_resnet50_v1_640"),
                                           (FPN_640, "faster_rcnn_resnet50_v1_fpn_640")])
def test_resnet50_640_converts_to_the_shipped_config(name, shipped):
    """Same model, input pipeline, schedule and eval settings as the hand-written port; only
    the datasets and the listed, explained fields differ (SHIPPED_DIFFERENCES)."""
    ours = _load(name).model_dump(mode="json")
    ref = load_config(shipped).model_dump(mode="json")
    for part in (ours, ref):
        part.pop("name"), part.pop("description")
        part["data"].pop("train"), part["data"].pop("eval")
    assert set(_diff(ours, ref)) == SHIPPED_DIFFERENCES


# ----------------------------------------------------------------- build


def _abstract_build(monkeypatch) -> None:
    """The network built abstractly (``abstract_build``): the task's own checks (input size,
    anchors, settings) run, no weights are drawn (ResNet-152 at 1344 px on 2 cores)."""
    build = faster_rcnn_build.build_faster_rcnn
    monkeypatch.setattr(faster_rcnn_build, "build_faster_rcnn",
                        lambda config, seed: abstract_build(lambda: build(config, seed=seed)))


@needs_shared
@pytest.mark.parametrize("name", sorted(C4))
@pytest.mark.slow
def test_zoo_c4_configs_build_and_summarize(name, monkeypatch):
    depth, size = C4[name]
    config = _load(name)
    _abstract_build(monkeypatch)
    task = tasks.build_task(config, seed=0)
    side = data_build.input_size(config.data)[0]
    assert task.input_size == (side, side)
    summary = tasks.family(config).summary(config)
    assert summary["type"] == "faster_rcnn" and summary["input_size"] == [side, side]
    assert summary["anchors"] == {"feature_map": [side // 16] * 2, "per_location": 12,
                                  "total": (side // 16) ** 2 * 12}
    p = summary["parameters"]
    # the box predictor: 91 class logits and 4 (shared) or 4 x 90 box codes on conv5's 2048
    boxes = 4 if config.model.share_box_across_classes else 4 * 90
    assert p["box_predictor"] == 2048 * (91 + boxes) + 91 + boxes
    assert p["rpn"] == 1024 * 512 * 9 + 512 + 512 * 12 * 6 + 12 * 6
    assert p["total"] == sum(v for k, v in p.items() if k != "total")


# ----------------------------------------------------------------- parameter counts vs TF


def _assert_batch_stats_are_tf_moving_statistics(config, tf: dict) -> int:
    """TF's non-trainable variables are exactly its BatchNorm moving statistics, as many as
    jaxdet's batch statistics (not parameters); returns that count."""
    model = abstract_build(lambda: faster_rcnn_build.build_faster_rcnn(config, seed=0))
    stats = sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(model, nnx.BatchStat)))
    assert tf["all"] - tf["trainable"] == tf["kinds"]["bn_moving"] == stats
    return stats


@needs_shared
def test_parameter_count_equals_tf():
    """TF 2.21's model of the ResNet-50 640 config (tests/config/fixtures/
    count_tf_faster_rcnn_model.py): its trainable variables are jaxdet summary's parameters,
    part by part; its other variables are exactly the BatchNorm moving statistics, which
    jaxdet keeps as batch statistics (not parameters)."""
    tf = json.loads(TF_COUNTS.read_text())
    config = _load(R50_640)
    p = tasks.family(config).summary(config)["parameters"]
    parts = tf["parts"]
    assert p["total"] == tf["trainable"] == 28_458_727
    assert p["first_stage_features"] == parts["first_stage_features"]["trainable"]
    assert p["rpn"] == parts["rpn_conv"]["trainable"] + parts["rpn_predictors"]["trainable"]
    assert p["box_classifier"] == parts["box_classifier"]["trainable"]
    assert p["box_predictor"] == parts["box_predictor"]["trainable"]
    assert _assert_batch_stats_are_tf_moving_statistics(config, tf) == 53_120


@needs_shared
def test_fpn_config_converts_and_its_parameter_count_equals_tf():
    """faster_rcnn_resnet50_v1_fpn_640x640: the ResNet with the FPN's conv_hyperparams (ReLU6,
    BatchNorm 0.997 / 1e-3), an FPN P2-P6 of 256 channels, multiscale anchors in TF's layout,
    and TF 2.21's model of it (tests/config/fixtures/count_tf_faster_rcnn_model.py) has
    jaxdet summary's parameters, part by part."""
    c = _load(FPN_640)
    m = c.model
    assert m.backbone.name == "resnet50" and m.backbone.activation == "relu6"
    assert (m.backbone.batch_norm.decay, m.backbone.batch_norm.epsilon) == (0.997, 1e-3)
    assert (m.neck.min_level, m.neck.max_level, m.neck.depth, m.neck.top_down) == (
        2, 6, 256, "smoothed")
    a = m.first_stage_anchor_generator
    assert (a.name, a.min_level, a.max_level, a.anchor_scale, a.scales_per_octave) == (
        "multiscale", 2, 6, 4.0, 2)
    assert a.aspect_ratios == (1.0, 2.0, 0.5) and a.tf_layout
    assert (m.first_stage_max_proposals, m.initial_crop_size, m.crop_method) == (
        300, 14, "matmul")
    assert data_build.input_size(c.data) == (640, 640)
    tf = json.loads(TF_FPN_COUNTS.read_text())
    p = tasks.family(c).summary(c)["parameters"]
    parts = {k: v["trainable"] for k, v in tf["parts"].items()}
    assert p["total"] == tf["trainable"] == 42_485_943
    assert p["backbone"] == parts["first_stage_features"] + parts["box_classifier"]
    assert p["fpn"] == parts["fpn"]
    assert p["rpn"] == parts["rpn_conv"] + parts["rpn_predictors"]
    assert p["box_classifier"] == parts["fc_box_classifier"]
    assert p["box_predictor"] == parts["box_predictor"]
    _assert_batch_stats_are_tf_moving_statistics(c, tf)


@needs_shared
@pytest.mark.slow
def test_mask_rcnn_zoo_config_converts_and_its_parameter_count_equals_tf():
    """mask_rcnn_inception_resnet_v2_1024x1024: Inception-ResNet-v2 (TF's BatchNorm, inputs in
    [-1, 1]), the mask head (4 convs, TF's automatic depth, 33x33 masks, loss weight 4),
    number_of_stages 3, PNG masks; TF 2.21's model has jaxdet summary's 64,947,141
    parameters, part by part."""
    c = _load(MASK_RCNN)
    m = c.model
    assert m.backbone.name == "inception_resnet_v2"
    assert (m.backbone.batch_norm.decay, m.backbone.batch_norm.epsilon) == (0.9997, 1e-3)
    assert c.data.mean == (127.5,) * 3 and c.data.std == (127.5,) * 3
    assert m.predict_instance_masks and (m.mask_height, m.mask_width) == (33, 33)
    assert (m.mask_prediction_num_conv_layers, m.mask_prediction_conv_depth) == (4, 0)
    assert m.second_stage_mask_prediction_loss_weight == 4.0 and m.initial_crop_size == 17
    assert c.data.load_masks and "coco_mask_metrics" in c.eval.metrics_set
    assert data_build.input_size(c.data) == (1024, 1024)
    tf = json.loads(TF_MASK_COUNTS.read_text())
    parts = {k: v["trainable"] for k, v in tf["parts"].items()}
    p = tasks.family(c).summary(c)["parameters"]
    assert p["total"] == tf["trainable"] == 64_947_141
    # TF names this network's own BatchNorm layers like the FPN box classifier's (see the
    # fixture script): both parts are the backbone here
    assert p["first_stage_features"] + p["box_classifier"] == (
        parts["first_stage_features"] + parts["fc_box_classifier"])
    assert p["rpn"] == parts["rpn_conv"] + parts["rpn_predictors"]
    assert p["box_predictor"] == parts["box_predictor"]
    assert p["mask_head"] == parts["mask_head"]
    _assert_batch_stats_are_tf_moving_statistics(c, tf)


# ----------------------------------------------------------------- what does not map


def _variant(tmp_path, old: str, new: str, *more: tuple[str, str]) -> Path:
    text = (TFOD_CONFIGS / f"{R50_640}.config").read_text()
    for a, b in ((old, new), *more):
        assert a in text, a
        text = text.replace(a, b, 1)
    path = tmp_path / "pipeline.config"
    path.write_text(text)
    return path


MASK_HEAD = """share_box_across_classes: true
        predict_instance_masks: true
        mask_height: 33
        mask_width: 33
        mask_prediction_conv_depth: 0
        mask_prediction_num_conv_layers: 4
        conv_hyperparams {
          op: CONV
          regularizer { l2_regularizer { weight: 0.0 } }
          initializer { truncated_normal_initializer { stddev: 0.01 } }
        }"""


@needs_shared
def test_mask_rcnn_fields_convert(tmp_path):
    """The ResNet-50 config with the zoo Mask R-CNN's mask fields (mask_rcnn_box_predictor,
    number_of_stages: 3, the loss weight, PNG masks in both readers, coco_mask_metrics):
    jaxdet's Mask R-CNN, which builds."""
    path = _variant(
        tmp_path, "share_box_across_classes: true", MASK_HEAD,
        ("num_classes: 90", "num_classes: 90\n    number_of_stages: 3\n"
                            "    second_stage_mask_prediction_loss_weight: 4.0"),
        ('train_input_reader: {', 'train_input_reader: {\n  load_instance_masks: true\n'
                                  '  mask_type: PNG_MASKS'),
        ('eval_input_reader: {', 'eval_input_reader: {\n  load_instance_masks: true\n'
                                 '  mask_type: PNG_MASKS'),
        ('metrics_set: "coco_detection_metrics"', 'metrics_set: "coco_detection_metrics"\n'
                                                  '  metrics_set: "coco_mask_metrics"\n'
                                                  '  eval_instance_masks: true'))
    c = load_pipeline_config(path)
    m = c.model
    assert m.predict_instance_masks and (m.mask_height, m.mask_width) == (33, 33)
    assert (m.mask_prediction_conv_depth, m.mask_prediction_num_conv_layers) == (0, 4)
    assert m.second_stage_mask_prediction_loss_weight == 4.0
    assert c.data.load_masks and "load_masks" not in c.data.train.model_dump()
    assert c.eval.metrics_set == ("coco_detection_metrics", "coco_mask_metrics")
    summary = tasks.family(c).summary(c)
    # TF's automatic depth: 2 ** round((2 log2 2048 + 3 log2 90) / 5) = 2 ** 8
    assert summary["outputs"]["masks"] == [33, 33] and summary["parameters"]["mask_head"] == (
        3 * (3 * 3 * 256 * 256 + 256) - 3 * 3 * 256 * 256 + 3 * 3 * 2048 * 256
        + 3 * 3 * 256 * 90 + 90)


@needs_shared
@pytest.mark.parametrize("old, new, error", [
    ("score_converter: SOFTMAX", "", r"second_stage_post_processing: score_converter is "
     r"required: jaxdet's Faster R-CNN scores with SOFTMAX"),
    ("score_converter: SOFTMAX", "score_converter: SIGMOID",
     r"score_converter: SIGMOID is not supported; jaxdet supports SOFTMAX"),
    ("share_box_across_classes: true", "share_box_across_classes: true\n"
     "        predict_instance_masks: true", r"train_input_reader\.load_instance_masks: Mask "
     r"R-CNN \(predict_instance_masks\) trains on instance masks"),
    ("train_input_reader: {", "train_input_reader: {\n  load_instance_masks: true",
     r"train_input_reader\.mask_type: NUMERICAL_MASKS \(unset: TF's default\) is not "
     r"supported; jaxdet supports PNG_MASKS; set mask_type: PNG_MASKS"),
    ("use_static_shapes: true", "use_static_shapes: true\n    hard_example_miner { }",
     r"faster_rcnn\.hard_example_miner: the second stage's hard example miner is not "
     r"supported yet"),
    ("num_classes: 90", "num_classes: 90\n    number_of_stages: 3",
     r"number_of_stages: 3 is not supported; jaxdet's faster_rcnn has 2 stages, or 3 with "
     r"predict_instance_masks"),
    ("height_stride: 16", "height_stride: 8", r"height_stride: 8 is not supported; jaxdet "
     r"supports 16"),
    ("use_dropout: false", "use_dropout: true", r"use_dropout: True is not supported"),
    ("initial_crop_size: 14", "", r"initial_crop_size is required"),
    ("stddev: 0.01", "stddev: 0.01\n          mean: 0.5", r"mean: 0.5 is not supported"),
    ("keep_aspect_ratio_resizer {\n        min_dimension: 640\n        max_dimension: 640\n"
     "        pad_to_max_dimension: true\n      }", "fixed_shape_resizer { height: 600 width: "
     "600 }", r"image_resizer: fixed_shape_resizer 600x600 is not supported: faster_rcnn "
     r"needs an input size divisible by 16"),
    ("use_static_shapes: true", "use_static_shapes: true\n    no_such_field: 1",
     r"model\.faster_rcnn\.no_such_field: TF's FasterRcnn has no field 'no_such_field'"),
])
def test_what_does_not_map_stops_with_one_line(tmp_path, old, new, error):
    path = _variant(tmp_path, old, new)
    with pytest.raises(TfodConfigError, match=error) as err:
        convert_pipeline_config(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}:")


@needs_shared
def test_ignored_fields_are_reported(tmp_path):
    """Fields with no jaxdet setting are listed (same effect) or warned about (differs)."""
    path = _variant(tmp_path, "use_static_shapes: true", "use_static_shapes: true\n"
                    "    output_final_box_features: true")
    conversion = convert_pipeline_config(path)
    same = dict(conversion.same)
    for name in ("use_static_shapes", "use_matmul_gather_in_matcher",
                 "use_static_balanced_label_sampler"):
        assert f"model.faster_rcnn.{name}" in same
    assert any(w.startswith("model.faster_rcnn.output_final_box_features:")
               for w in conversion.warnings)


# ----------------------------------------------------------------- the command line


@needs_shared
def test_cli_convert_config_and_summary(tmp_path, capsys):
    """``jaxdet convert-config`` writes a YAML that loads back to the converted config;
    ``jaxdet summary --pipeline-config`` prints TF's parameter count."""
    from jaxdet.cli.main import main

    path = TFOD_CONFIGS / f"{R50_640}.config"
    out = tmp_path / "converted.yaml"
    assert main(["convert-config", str(path), "-o", str(out)]) == 0
    assert f"wrote {out}: faster_rcnn resnet50" in capsys.readouterr().out
    assert load_config(out) == load_pipeline_config(path)
    assert "model.faster_rcnn.use_static_shapes" in out.read_text()  # listed, not dropped
    assert main(["summary", "--pipeline-config", str(path)]) == 0
    assert "parameters: 28,458,727" in capsys.readouterr().out


def test_sgd_with_a_momentum_is_refused_by_name():
    """``name: sgd`` is plain SGD: a momentum given with it would be silently ignored."""
    from pydantic import ValidationError

    from jaxdet.config.schema import OptimizerConfig

    assert OptimizerConfig(name="sgd").momentum == 0.9  # the default is not an error
    with pytest.raises(ValidationError, match="use name: momentum for momentum SGD"):
        OptimizerConfig(name="sgd", momentum=0.9)
