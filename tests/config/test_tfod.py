"""pipeline.config -> jaxdet: the TF OD API's 40 configs, hand-written ones for every mapping,
and the errors and warnings a user sees."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from jaxdet.config.loader import ConfigError, load_config
from jaxdet.config.tfod import conversion_yaml, convert_pipeline_config, load_pipeline_config
from jaxdet.config.tfod_common import TfodConfigError
from jaxdet.config.tfod_fields import lookup

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
needs_shared = pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")

# TF2 config -> the shipped jaxdet config that ports it
SHIPPED = {
    "ssd_mobilenet_v2_320x320_coco17_tpu-8": "ssd_mobilenet_v2_320",
    "ssd_mobilenet_v1_fpn_640x640_coco17_tpu-8": "ssd_mobilenet_v1_fpn_640",
    "ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8": "ssd_mobilenet_v2_fpnlite_320",
    "ssd_mobilenet_v2_fpnlite_640x640_coco17_tpu-8": "ssd_mobilenet_v2_fpnlite_640",
    **{f"ssd_resnet{d}_v1_fpn_{s}x{s}_coco17_tpu-8": f"retinanet_resnet{d}_fpn_{s}"
       for d in (50, 101, 152) for s in (640, 1024)},
    **{f"ssd_efficientdet_d{d}_{s}x{s}_coco17_tpu-{t}": f"efficientdet_d{d}"
       for d, s, t in ((0, 512, 8), (1, 640, 8), (2, 768, 8), (3, 896, 32), (4, 1024, 32),
                       (5, 1280, 32), (6, 1408, 32), (7, 1536, 32))},
}
# Where a shipped EfficientDet follows the paper rather than the TF OD API config (each
# config file says so): the moving average everywhere; D6's input size; D7's anchor scale;
# the anchor layout and level-5 endpoint of effdet/automl (so effdet's PyTorch weights load;
# TF's checkpoints take the converted config's tf_layout and tf_endpoints).
EFFICIENTDET_DIFFERENCES = {
    "model.anchors.tf_layout: converted True != shipped False",
    "model.backbone.tf_endpoints: converted True != shipped False",
    "train.ema_decay: converted None != shipped 0.9998",
    "train.ema_dynamic_decay: converted False != shipped True",
    "eval.use_ema: converted False != shipped True",
}
PAPER_NOT_TF = {
    "efficientdet_d6": {
        "data.resizer.min_dimension: converted 1408 != shipped 1280",
        "data.resizer.max_dimension: converted 1408 != shipped 1280",
        "data.augment.1.output_size: converted 1408 != shipped 1280",
    },
    "efficientdet_d7": {"model.anchors.anchor_scale: converted 4.0 != shipped 5.0"},
}
# the TF2 CenterNet configs (tests/config/test_tfod_center_net.py checks them)
CENTER_NET = [f"centernet_{name}" for name in (
    "hourglass104_1024x1024_coco17_tpu-32", "hourglass104_1024x1024_kpts_coco17_tpu-32",
    "hourglass104_512x512_coco17_tpu-8", "hourglass104_512x512_kpts_coco17_tpu-32",
    "resnet101_v1_fpn_512x512_coco17_tpu-8", "resnet50_v1_fpn_512x512_kpts_coco17_tpu-8",
    "resnet50_v2_512x512_kpts_coco17_tpu-8")]
# the TF2 DeepMAC configs (tests/config/test_tfod_deepmac.py checks them)
DEEPMAC = [f"center_net_deepmac_{s}" for s in (
    "1024x1024_coco_tpu-128", "1024x1024_non_voc_only_tpu-128", "1024x1024_voc_only_tpu-128",
    "512x512_voc_only_tpu-32")]
# config-name prefix -> the field its one-line error must name (none left in the TF2 zoo)
UNSUPPORTED: dict[str, str] = {}
# the TF2 Faster R-CNN configs, C4, FPN and Mask R-CNN (tests/config/test_tfod_faster_rcnn.py)
FASTER_RCNN = [*(f"faster_rcnn_resnet{d}_v1_{s}_coco17_{hw}-8" for d in (50, 101, 152)
                 for s, hw in (("640x640", "tpu"), ("1024x1024", "tpu"), ("800x1333", "gpu"))),
               "faster_rcnn_resnet50_v1_fpn_640x640_coco17_tpu-8",
               "mask_rcnn_inception_resnet_v2_1024x1024_coco17_gpu-8"]


def _close(a, b) -> bool:
    """Equal, with floats compared to 1e-6 relative (the shipped YAML rounds sigmoid(-4.6))."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5)
    return a == b


def _diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """The differing fields, each by its full path: dicts and equal-length lists (e.g.
    ``data.augment``) are compared entry by entry, so a field added to the schema with its
    default on both sides never shows, and a difference names the one field that differs
    (``data.augment.1.output_size``), not a whole list."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            x, y = dict(enumerate(x)), dict(enumerate(y))
        if isinstance(x, dict) and isinstance(y, dict):
            out += _diff(x, y, f"{prefix}{key}.")
        elif not _close(x, y):
            out.append(f"{prefix}{key}: converted {x!r} != shipped {y!r}")
    return out


@needs_shared
def test_every_tfod_config_converts_or_fails_with_one_clear_line():
    files = sorted(TFOD_CONFIGS.glob("*.config"))
    assert len(files) == 40
    converted = []
    for path in files:
        stem = path.name.removesuffix(".config")
        prefix = next((p for p in UNSUPPORTED if stem.startswith(p)), None)
        if prefix is None:
            load_pipeline_config(path)
            converted.append(stem)
            continue
        with pytest.raises(TfodConfigError) as err:
            convert_pipeline_config(path)
        message = str(err.value)
        assert "\n" not in message, message
        assert message.startswith(f"{path}:"), message
        assert UNSUPPORTED[prefix] in message, message
    assert sorted(converted) == sorted([*SHIPPED, *CENTER_NET, *FASTER_RCNN, *DEEPMAC])


@needs_shared
@pytest.mark.parametrize("tf_name, shipped", sorted(SHIPPED.items()))
def test_converted_config_equals_the_shipped_port(tf_name, shipped):
    """Same model, same input pipeline, same optimizer and schedule, same eval settings;
    only the datasets and the starting weights differ (TFRecord and fine_tune_checkpoint
    placeholders vs. generated shapes from scratch), and for EfficientDet the documented places
    where the shipped config follows the paper."""
    converted = load_pipeline_config(TFOD_CONFIGS / f"{tf_name}.config")
    assert converted.train.init_checkpoint.path.startswith("PATH_TO_BE_CONFIGURED")
    ours = converted.model_dump(mode="json")
    ref = load_config(shipped).model_dump(mode="json")
    for part in (ours, ref):
        part.pop("name"), part.pop("description")
        part["data"].pop("train"), part["data"].pop("eval")
        part["train"].pop("init_checkpoint")
    # a converted config writes TensorBoard as TF's model_dir has it
    expected = {"train.tensorboard_tags: converted 'tf' != shipped 'jaxdet'"}
    if shipped.startswith("efficientdet"):
        expected |= EFFICIENTDET_DIFFERENCES | PAPER_NOT_TF.get(shipped, set())
    assert set(_diff(ours, ref)) == expected


@needs_shared
def test_placeholders_are_kept_for_summary_but_named(tmp_path):
    config = load_pipeline_config(TFOD_CONFIGS / "ssd_mobilenet_v2_320x320_coco17_tpu-8.config")
    assert config.data.train.type == "tfrecord"
    assert config.data.train.input_path[0].startswith("PATH_TO_BE_CONFIGURED")


@needs_shared
def test_misspelt_placeholder_of_the_d7_config_is_refused_too():
    """TF's own D7 config says PATH_TO_BEE_CONFIGURED for its eval input."""
    from jaxdet.config.placeholders import check_data_paths

    name = "ssd_efficientdet_d7_1536x1536_coco17_tpu-32.config"
    config = load_pipeline_config(TFOD_CONFIGS / name)
    assert "PATH_TO_BEE_CONFIGURED" in config.data.eval.input_path[0]
    with pytest.raises(ConfigError, match=r"data\.eval\.input_path .*PATH_TO_BEE_CONFIGURED"):
        check_data_paths(config, splits=("eval",))


@needs_shared
def test_warnings_and_same_fields_are_visible(caplog):
    with caplog.at_level(logging.DEBUG, logger="jaxdet.config"):
        load_pipeline_config(TFOD_CONFIGS / "ssd_resnet50_v1_fpn_640x640_coco17_tpu-8.config")
    text = caplog.text
    assert "fine_tune_checkpoint" not in text  # it is honoured: train.init_checkpoint
    # honoured too: train.initializers and train.optimizer.weight_decay_rules
    assert "conv_hyperparams.initializer" not in text
    assert "model.ssd.matcher.argmax_matcher.use_matmul_gather: same in jaxdet" in text
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == []


def test_field_table_lookup():
    assert lookup("model.faster_rcnn.feature_extractor.conv_hyperparams.initializer."
                  "truncated_normal_initializer.stddev")[0] == "differs"
    assert lookup("train_config.sync_replicas")[0] == "same"
    assert lookup("train_config.sync_replicas_typo") is None
    assert lookup("model.ssd.num_classes") is None


# ----------------------------------------------------------------- hand-written configs

BASE = """
model {
  ssd {
    num_classes: 3
    box_coder { faster_rcnn_box_coder { y_scale: 10.0 x_scale: 10.0 } }
    matcher { argmax_matcher { matched_threshold: 0.6 unmatched_threshold: 0.4 } }
    similarity_calculator { iou_similarity {} }
    encode_background_as_zeros: true
    anchor_generator { multiscale_anchor_generator { min_level: 3 max_level: 5 } }
    image_resizer { fixed_shape_resizer { height: 64 width: 64 } }
    box_predictor {
      weight_shared_convolutional_box_predictor {
        depth: 16 num_layers_before_predictor: 1 kernel_size: 3
        class_prediction_bias_init: -4.6
        conv_hyperparams { activation: RELU_6 batch_norm { decay: 0.99 } }
      }
    }
    feature_extractor {
      type: 'ssd_resnet50_v1_fpn_keras'
      fpn { min_level: 3 max_level: 5 additional_layer_depth: 16 }
      depth_multiplier: 0.25
      conv_hyperparams {
        activation: RELU_6
        regularizer { l2_regularizer { weight: 0.0004 } }
        batch_norm { decay: 0.997 epsilon: 0.001 }
      }
    }
    loss {
      classification_loss { weighted_sigmoid_focal { alpha: 0.25 gamma: 2.0 } }
      localization_loss { weighted_smooth_l1 {} }
    }
    post_processing {
      batch_non_max_suppression { score_threshold: 0.01 iou_threshold: 0.5
        max_detections_per_class: 10 max_total_detections: 10 }
      score_converter: SIGMOID
    }
  }
}
train_config {
  batch_size: 4
  num_steps: 6
  optimizer {
    OPTIMIZER
    use_moving_average: false
  }
  AUGMENT
}
eval_config { metrics_set: "coco_detection_metrics" }
"""
MOMENTUM = """momentum_optimizer { momentum_optimizer_value: 0.9 learning_rate {
  constant_learning_rate { learning_rate: 0.01 } } }"""


def _write(tmp_path: Path, text: str, name: str = "pipeline.config") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _config(tmp_path, optimizer=MOMENTUM, augment="", edit=None, overrides=()):
    text = BASE.replace("OPTIMIZER", optimizer).replace("AUGMENT", augment)
    if edit is not None:
        text = text.replace(*edit)
    return load_pipeline_config(_write(tmp_path, text), overrides)


def test_defaults_from_tf_when_fields_are_absent(tmp_path):
    c = _config(tmp_path)
    assert c.model.box_coder.scales == (10.0, 10.0, 5.0, 5.0)  # height/width_scale defaults
    assert c.model.matcher.force_match_for_each_row is False  # TF's default
    assert c.model.loss.normalize_by_num_matches is True
    assert c.model.loss.normalize_loc_loss_by_codesize is False
    assert c.model.loss.delta == 1.0
    assert c.model.anchors.aspect_ratios == (1.0, 2.0, 0.5)
    assert c.model.head.prior_probability == pytest.approx(1 / (1 + math.exp(4.6)))
    assert c.model.head.batch_norm.decay == 0.99 and c.model.head.batch_norm.epsilon == 1e-3
    assert c.model.backbone.activation == "relu6" or c.model.backbone.activation is None
    assert c.model.add_background_class is False
    assert c.train.optimizer.weight_decay == 0.0004
    assert c.train.learning_rate.name == "constant" and c.train.learning_rate.learning_rate == 0.01
    assert c.data.mean == (123.68, 116.779, 103.939) and c.data.std == (1.0, 1.0, 1.0)
    assert c.data.max_number_of_boxes == 100 and c.precision == "fp32"
    assert c.data.train is None and c.data.eval is None


def test_an_empty_fine_tune_checkpoint_starts_from_the_initializers(tmp_path):
    """TF skips ``fine_tune_checkpoint: ""`` (what config_util writes once it is cleared)."""
    empty = 'batch_size: 4\n  fine_tune_checkpoint: ""\n  fine_tune_checkpoint_type: "detection"'
    c = _config(tmp_path, edit=("batch_size: 4", empty))
    assert c.train.init_checkpoint is None
    named = _config(tmp_path, edit=("batch_size: 4", 'batch_size: 4\n  fine_tune_checkpoint: '
                                    '"ckpt/ckpt-0"\n  fine_tune_checkpoint_version: V2'))
    assert named.train.init_checkpoint.path == "ckpt/ckpt-0"
    # TF (config_util): no type is "classification" unless from_detection_checkpoint
    assert named.train.init_checkpoint.restore == "classification"


def test_a_fine_tune_checkpoint_without_a_version_is_tfs_v1(tmp_path):
    """TF's default version is V1, which TF2's training refuses: one line naming it."""
    with pytest.raises(TfodConfigError, match="fine_tune_checkpoint_version is unset, which TF "
                                              "reads as V1.*set fine_tune_checkpoint_version: V2"):
        _config(tmp_path, edit=("batch_size: 4",
                                'batch_size: 4\n  fine_tune_checkpoint: "ckpt/ckpt-0"'))


def test_backbone_activation_follows_override_flag(tmp_path):
    assert _config(tmp_path).model.backbone.activation is None
    c = _config(tmp_path, edit=("depth_multiplier: 0.25", "depth_multiplier: 0.25 "
                                "override_base_feature_extractor_hyperparams: true"))
    assert c.model.backbone.activation == "relu6"


@pytest.mark.parametrize("optimizer, expect", [
    ("""rms_prop_optimizer { learning_rate { exponential_decay_learning_rate {
        initial_learning_rate: 0.004 decay_steps: 800 decay_factor: 0.95 } }
        momentum_optimizer_value: 0.8 decay: 0.9 epsilon: 1.0 }""",
     {"optimizer": {"name": "rmsprop", "momentum": 0.8, "rmsprop_decay": 0.9, "epsilon": 1.0},
      "learning_rate": {"name": "exponential", "initial_learning_rate": 0.004,
                        "decay_steps": 800, "decay_factor": 0.95, "staircase": True}}),
    ("""adam_optimizer { learning_rate { manual_step_learning_rate {
        initial_learning_rate: 0.1 schedule { step: 2 learning_rate: 0.01 }
        schedule { step: 4 learning_rate: 0.001 } warmup: true } } }""",
     {"optimizer": {"name": "adam", "epsilon": 1e-8},
      "learning_rate": {"name": "manual_step", "boundaries": [2, 4],
                        "rates": [0.1, 0.01, 0.001], "warmup": True}}),
    ("""momentum_optimizer { learning_rate { cosine_decay_learning_rate {
        learning_rate_base: 0.04 total_steps: 6 warmup_learning_rate: 0.01 warmup_steps: 2 } } }""",
     {"optimizer": {"name": "momentum", "momentum": 0.9},
      "learning_rate": {"name": "cosine", "learning_rate_base": 0.04, "total_steps": 6,
                        "warmup_learning_rate": 0.01, "warmup_steps": 2}}),
])
def test_optimizers_and_schedules(tmp_path, optimizer, expect):
    train = _config(tmp_path, optimizer=optimizer).train.model_dump(mode="json")
    for section, fields in expect.items():
        for key, value in fields.items():
            got = train[section][key]
            assert _close(got, value), (section, key, got, value)


def test_moving_average_defaults_to_tf_decay(tmp_path):
    """TF2's moving average warms up, counting the update it makes: (2 + t) / (11 + t) caps
    update t's decay (the fixture of a TF run continued checks the values)."""
    c = _config(tmp_path, edit=("use_moving_average: false", ""))
    assert c.train.ema_decay == 0.9999  # TF: use_moving_average defaults to true
    assert c.train.ema_dynamic_decay and c.train.ema_dynamic_decay_offset == 1
    c = _config(tmp_path, edit=("use_moving_average: false",
                                "use_moving_average: true moving_average_decay: 0.99"))
    assert c.train.ema_decay == 0.99
    c = _config(tmp_path)
    assert c.train.ema_decay is None and not c.train.ema_dynamic_decay


def test_overrides_apply_on_top(tmp_path):
    c = _config(tmp_path, overrides=["train.batch_size=2", "model.num_classes=5"])
    assert c.train.batch_size == 2 and c.model.num_classes == 5


def test_model_variants(tmp_path):
    c = _config(tmp_path, edit=(
        "matcher { argmax_matcher { matched_threshold: 0.6 unmatched_threshold: 0.4 } }",
        "matcher { bipartite_matcher {} }"))
    assert c.model.matcher.name == "bipartite"
    c = _config(tmp_path, edit=(
        "classification_loss { weighted_sigmoid_focal { alpha: 0.25 gamma: 2.0 } }",
        "classification_loss { weighted_softmax { logit_scale: 2.0 } } hard_example_miner { "
        "num_hard_examples: 32 iou_threshold: 0.99 loss_type: CLASSIFICATION "
        "max_negatives_per_positive: 3 min_negatives_per_image: 1 }"))
    assert c.model.loss.classification == "softmax" and c.model.loss.logit_scale == 2.0
    assert c.model.add_background_class is True  # softmax needs the background logit
    miner = c.model.hard_example_miner
    assert (miner.num_hard_examples, miner.iou_threshold, miner.loss_type,
            miner.max_negatives_per_positive, miner.min_negatives_per_image) == (
        32, 0.99, "classification", 3, 1)
    c = _config(tmp_path, edit=(
        "image_resizer { fixed_shape_resizer { height: 64 width: 64 } }",
        "image_resizer { keep_aspect_ratio_resizer { min_dimension: 48 max_dimension: 64 } }"))
    assert c.data.resizer.name == "keep_aspect_ratio" and c.data.resizer.pad_to_max_dimension


@pytest.mark.parametrize("edit, message", [
    (("num_classes: 3", "num_classes: 3 bogus_field: 1"),
     ":4:20: model.ssd.bogus_field: TF's Ssd has no field 'bogus_field'"),
    (("batch_size: 4", "batch_size: 4 bias_grad_multiplier: 2.0"),
     "train_config.bias_grad_multiplier: a TF OD API field jaxdet does not support yet"),
    (("matched_threshold: 0.6", "matched_threshold: 0.6 ignore_thresholds: true"),
     "model.ssd.matcher.argmax_matcher.ignore_thresholds: True is not supported; jaxdet "
     "supports False"),
    (("iou_similarity {}", "ioa_similarity {}"),
     "model.ssd.similarity_calculator.ioa_similarity: not supported; jaxdet supports "
     "iou_similarity"),
    (("'ssd_resnet50_v1_fpn_keras'", "'ssd_inception_v2'"),
     "model.ssd.feature_extractor.type: 'ssd_inception_v2' is not supported"),
    (("weighted_smooth_l1 {}", "weighted_iou {}"),
     "model.ssd.loss.localization_loss.weighted_iou: not supported"),
    (("score_converter: SIGMOID", "score_converter: SIGMOID_WITH_LOGIT_SCALE"),
     "model.ssd.post_processing.score_converter: SIGMOID_WITH_LOGIT_SCALE is not a value of "
     "TF's PostProcessing.ScoreConverter (its values: IDENTITY, SIGMOID, SOFTMAX)"),
    (("num_steps: 6", "num_steps: 0"), "train_config.num_steps: must be set"),
    (("metrics_set: \"coco_detection_metrics\"", "metrics_set: \"oid_V2_detection_metrics\""),
     "eval_config.metrics_set: 'oid_V2_detection_metrics' is not supported"),
    (("model {", "model {\n faster_rcnn {}"), "must hold exactly one architecture"),
])
def test_unsupported_fields_and_values_are_errors_naming_them(tmp_path, edit, message):
    with pytest.raises(TfodConfigError) as err:
        _config(tmp_path, edit=edit)
    assert message in str(err.value)
    assert str(err.value).startswith(str(tmp_path / "pipeline.config"))


def test_unknown_augmentation_is_an_error(tmp_path):
    with pytest.raises(TfodConfigError, match="augmentation 'random_jpeg_quality' is not "
                                              "supported"):
        _config(tmp_path, augment="data_augmentation_options { random_jpeg_quality {} }")


def test_augmentations_keep_order_and_parameters(tmp_path):
    c = _config(tmp_path, augment="""
      data_augmentation_options { random_horizontal_flip {} }
      data_augmentation_options { random_adjust_brightness { max_delta: 0.3 } }
      data_augmentation_options { ssd_random_crop {} }""")
    names = [op.name for op in c.data.augment]
    assert names == ["random_horizontal_flip", "random_adjust_brightness", "ssd_random_crop"]
    assert c.data.augment[1].max_delta == 0.3
    assert c.data.augment[2].min_object_covered == (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def test_keypoint_flip_permutation_maps_and_needs_keypoint_tasks(tmp_path):
    """TF's keypoint_flip_permutation is data.augment's; an SSD has no keypoints, so the
    validated config refuses it naming the field (CenterNet keypoint configs:
    test_tfod_center_net.py)."""
    with pytest.raises(ConfigError, match=r"data\.augment\[0\]\.keypoint_flip_permutation has 3 "
                                          "entries but the model has no keypoint tasks"):
        _config(tmp_path, augment="data_augmentation_options { random_horizontal_flip { "
                                  "keypoint_flip_permutation: [1, 0, 2] } }")


def test_malformed_text_names_file_and_line(tmp_path):
    path = _write(tmp_path, "model {\n  ssd {\n    num_classes: 3\n")
    with pytest.raises(TfodConfigError, match="never closed"):
        convert_pipeline_config(path)
    with pytest.raises(TfodConfigError, match="does not exist"):
        convert_pipeline_config(tmp_path / "nope.config")


def test_conversion_yaml_loads_back_to_the_same_config(tmp_path):
    text = BASE.replace("OPTIMIZER", MOMENTUM).replace("AUGMENT", "")
    path = _write(tmp_path, text)
    conversion = convert_pipeline_config(path)
    config = load_pipeline_config(path)
    out = tmp_path / "out.yaml"
    out.write_text(conversion_yaml(conversion, config))
    assert load_config(out) == config
    assert "# Written by `jaxdet convert-config`" in out.read_text()


def test_bad_override_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="model.num_classes"):
        _config(tmp_path, overrides=["model.num_classes=0"])


def test_freeze_regexes_are_ignored_as_tf2_ignores_them(tmp_path, caplog):
    """TF2's ``model_main_tf2.py`` trains every variable whatever ``freeze_variables`` /
    ``update_trainable_variables`` say (TF1's ``model_main.py`` applied them): the converted
    config trains every variable too, and one warning each gives the ``--set`` that applies
    them."""
    edit = ("batch_size: 4", "batch_size: 4\n  freeze_variables: '.*FeatureExtractor.*'\n"
                             "  update_trainable_variables: '.*BoxPredictor.*'")
    with caplog.at_level(logging.WARNING, logger="jaxdet.config"):
        c = _config(tmp_path, edit=edit)
    assert c.train.freeze_variables == () and c.train.update_trainable_variables == ()
    warned = [r.getMessage() for r in caplog.records if "ignores it" in r.getMessage()]
    assert warned == [
        "pipeline.config train_config.freeze_variables: TF2's model_main_tf2.py ignores it and "
        "trains every variable, and so does jaxdet; to apply it, --set "
        "'train.freeze_variables=[\".*FeatureExtractor.*\"]'",
        "pipeline.config train_config.update_trainable_variables: TF2's model_main_tf2.py "
        "ignores it and trains every variable, and so does jaxdet; to apply it, --set "
        "'train.update_trainable_variables=[\".*BoxPredictor.*\"]'"]
    applied = _config(tmp_path, edit=edit, overrides=['train.freeze_variables=[".*Feature.*"]'])
    assert applied.train.freeze_variables == (".*Feature.*",)  # the suggested --set works


def test_a_depth_multiplier_scales_the_layers_tfs_extractors_add(tmp_path):
    """TF's MobileNet SSD extractors scale the FPN's depth and the extra SSD maps by
    ``depth_fn(d) = max(int(d * depth_multiplier), min_depth)``, and TF's Keras MobileNetV2
    scales its 1280-channel head conv below multiplier 1 only (``Conv_1``): the model jaxdet
    builds has TF's widths, so TF checkpoints of such models load."""
    from jaxdet import tasks

    def config(extractor: str, multiplier: float):
        text = (BASE.replace("OPTIMIZER", MOMENTUM).replace("AUGMENT", "")
                .replace("additional_layer_depth: 16", "additional_layer_depth: 256")
                .replace("depth_multiplier: 0.25\n", "")
                .replace("fpn {" if "fpn" not in extractor else "(none)", "# fpn {")
                .replace("type: 'ssd_resnet50_v1_fpn_keras'",
                         f"type: '{extractor}' depth_multiplier: {multiplier} min_depth: 16"))
        return load_pipeline_config(_write(tmp_path, text))

    assert config("ssd_mobilenet_v2_fpn_keras", 0.35).model.neck.depth == 89  # int(89.6)
    assert config("ssd_mobilenet_v2_fpn_keras", 0.05).model.neck.depth == 16  # min_depth
    assert config("ssd_mobilenet_v2_keras", 0.25).model.neck.extra_depths == (128, 64, 64, 32)
    widths = {m: tasks.build_task(config("ssd_mobilenet_v2_fpn_keras", m)).model.backbone
              .conv_head.out_features for m in (0.5, 1.0, 1.4)}
    assert widths == {0.5: 640, 1.0: 1280, 1.4: 1280}  # Keras applications: 1280, 1280, 1792
