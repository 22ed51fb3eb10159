"""Every shipped config loads, and carries the same numbers as the TF OD API config it ports.

The TF pipeline configs live in ``../shared/data/tfod/configs`` (beside the repo checkout); the
comparisons skip when that folder is absent. Fields are read from the TF text with small
regexes: ``_block`` cuts out a ``name { ... }`` message, ``_value`` reads one scalar from it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from jaxdet.config.loader import CONFIG_DIR, dump_config, load_config, shipped_config_names
from jaxdet.config.schema import (
    ConvolutionalHeadConfig,
    FPNConfig,
    MultiscaleAnchorsConfig,
    ShapesDataConfig,
    SSDAnchorsConfig,
    SSDFeatureMapsConfig,
    WeightSharedHeadConfig,
)
from jaxdet.data.build import input_size

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"

# shipped config -> the TF2 pipeline config it carries the hyper-parameters of
TF_PORTS = {
    "ssd_mobilenet_v2_320": "ssd_mobilenet_v2_320x320_coco17_tpu-8",
    "ssd_mobilenet_v1_fpn_640": "ssd_mobilenet_v1_fpn_640x640_coco17_tpu-8",
    "ssd_mobilenet_v2_fpnlite_320": "ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8",
    "ssd_mobilenet_v2_fpnlite_640": "ssd_mobilenet_v2_fpnlite_640x640_coco17_tpu-8",
    **{
        f"retinanet_resnet{d}_fpn_{size}": f"ssd_resnet{d}_v1_fpn_{size}x{size}_coco17_tpu-8"
        for d in (50, 101, 152)
        for size in (640, 1024)
    },
}

TF_FEATURE_EXTRACTORS = {
    "ssd_mobilenet_v2_keras": ("mobilenet_v2", "ssd_feature_maps"),
    "ssd_mobilenet_v1_fpn_keras": ("mobilenet_v1", "fpn"),
    "ssd_mobilenet_v2_fpn_keras": ("mobilenet_v2", "fpn"),
    "ssd_resnet50_v1_fpn_keras": ("resnet50", "fpn"),
    "ssd_resnet101_v1_fpn_keras": ("resnet101", "fpn"),
    "ssd_resnet152_v1_fpn_keras": ("resnet152", "fpn"),
}

# TF data_augmentation_options -> the jaxdet augment op with the same behaviour
TF_AUGMENTS = {
    "random_horizontal_flip": "random_horizontal_flip",
    "ssd_random_crop": "ssd_random_crop",
    "random_crop_image": "random_crop_image",
}


# --------------------------------------------------------------------------- TF text helpers


def _block(text: str, name: str) -> str:
    """The body of the first ``name { ... }`` (or ``name: { ... }``) message in ``text``."""
    match = re.search(rf"\b{re.escape(name)}\s*:?\s*\{{", text)
    if match is None:
        raise KeyError(name)
    depth, start = 1, match.end()
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    raise ValueError(f"unbalanced braces after {name}")


def _has_block(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\s*:?\s*\{{", text) is not None


def _value(text: str, field: str, default: str | None = None) -> str:
    """The first ``field: value`` in ``text`` (quotes and a trailing comma stripped)."""
    match = re.search(rf"\b{re.escape(field)}\s*:\s*([^\s,{{}}]+)", text)
    if match is None:
        if default is None:
            raise KeyError(field)
        return default
    return match.group(1).strip("'\"")


def _float(text: str, field: str, default: float | None = None) -> float:
    return float(_value(text, field, None if default is None else str(default)))


def _int(text: str, field: str, default: int | None = None) -> int:
    return int(_value(text, field, None if default is None else str(default)))


def _bool(text: str, field: str, default: bool = False) -> bool:
    return _value(text, field, str(default).lower()) == "true"


def _floats(text: str, field: str) -> tuple[float, ...]:
    """A repeated field, written ``f: [a, b]`` or as one ``f: a`` line per value."""
    listed = re.search(rf"\b{re.escape(field)}\s*:\s*\[([^\]]*)\]", text)
    if listed:
        return tuple(float(v) for v in listed.group(1).split(","))
    return tuple(float(v) for v in re.findall(rf"\b{re.escape(field)}\s*:\s*([-\d.eE+]+)", text))


def _without_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


@pytest.fixture(params=sorted(TF_PORTS), name="port")
def _port(request):
    """(shipped config, TF config text without comments) for each ported config."""
    path = TFOD_CONFIGS / f"{TF_PORTS[request.param]}.config"
    if not path.is_file():
        pytest.skip(f"TF OD API configs not at hand ({path})")
    return load_config(request.param), _without_comments(path.read_text())


def _approx(value: float):
    return pytest.approx(value, rel=1e-6, abs=1e-12)


# --------------------------------------------------------------------------- every config


@pytest.mark.parametrize("name", shipped_config_names())
def test_shipped_config_loads_and_runs_on_generated_data(name):
    config = load_config(name)
    assert config.name == name
    assert config.description and "\n" not in config.description
    assert type(config).model_validate(yaml.safe_load(dump_config(config))) == config
    if config.data.type == "volumes":
        _check_volume_data(config)
        return
    # out of the box: generated shapes at the model's input size
    size = input_size(config.data)
    for split, seed in ((config.data.train, 0), (config.data.eval, 1)):
        assert isinstance(split, ShapesDataConfig)
        assert tuple(split.image_size) == size
        assert split.seed == seed
    assert config.data.train.output_dir != config.data.eval.output_dir
    # dumping and reloading gives the same config
    assert type(config).model_validate(yaml.safe_load(dump_config(config))) == config


def _check_volume_data(config):
    """A 3D U-Net config: generated volumes (held-out eval volumes of another seed), or a
    real dataset's listing on both splits (unet3d_kits19)."""
    train, eval_ = config.data.train, config.data.eval
    assert train.type == eval_.type
    if train.type == "generated_volumes":
        assert train.seed != eval_.seed
        assert all(s >= p for s, p in zip(train.shape, config.model.patch_size, strict=True))
    else:
        assert train.split != eval_.split


def test_every_tf_port_is_shipped():
    assert set(TF_PORTS) | {"ssd_mobilenet_v1_300"} <= set(shipped_config_names())


@pytest.mark.parametrize("name", sorted(TF_PORTS) + ["ssd_mobilenet_v1_300"])
def test_coco_alternative_is_shown(name):
    text = (CONFIG_DIR / f"{name}.yaml").read_text()
    if "\nbase:" in text:  # variants inherit the data section and its comment
        return
    assert "type: coco" in text and "annotation_file" in text and "image_dir" in text


# --------------------------------------------------------------------------- TF numbers


def test_model_basics_match_tf(port):
    config, tf = port
    model = config.model
    assert model.num_classes == _int(tf, "num_classes")
    resizer = _block(tf, "fixed_shape_resizer")
    assert (config.data.resizer.height, config.data.resizer.width) == (
        _int(resizer, "height"),
        _int(resizer, "width"),
    )
    coder = _block(tf, "faster_rcnn_box_coder")
    assert model.box_coder.name == "faster_rcnn"
    assert model.box_coder.scales == tuple(
        _float(coder, f) for f in ("y_scale", "x_scale", "height_scale", "width_scale")
    )
    matcher = _block(tf, "argmax_matcher")
    assert model.matcher.matched_threshold == _float(matcher, "matched_threshold")
    assert model.matcher.unmatched_threshold == _float(matcher, "unmatched_threshold")
    for flag in ("negatives_lower_than_unmatched", "force_match_for_each_row"):
        assert getattr(model.matcher, flag) == _bool(matcher, flag, default=True)
    assert _bool(tf, "encode_background_as_zeros") and not model.add_background_class
    precision = "bf16_on_tpu" if _bool(_block(tf, "train_config"), "use_bfloat16") else "fp32"
    assert config.precision == precision


def test_backbone_and_neck_match_tf(port):
    config, tf = port
    extractor = _block(tf, "feature_extractor")
    backbone, neck = config.model.backbone, config.model.neck
    assert (backbone.name, neck.name) == TF_FEATURE_EXTRACTORS[_value(extractor, "type")]
    assert backbone.depth_multiplier == _float(extractor, "depth_multiplier")
    assert backbone.min_depth == _int(extractor, "min_depth")
    bn = _block(extractor, "batch_norm")
    assert backbone.batch_norm.decay == _approx(_float(bn, "decay"))
    assert backbone.batch_norm.epsilon == _approx(_float(bn, "epsilon"))
    assert backbone.batch_norm.frozen == _bool(tf, "freeze_batchnorm")
    activation = _value(_block(extractor, "conv_hyperparams"), "activation").lower()
    assert activation == "relu_6"
    assert backbone.activation == "relu6" and neck.activation == "relu6"
    assert neck.use_depthwise == _bool(extractor, "use_depthwise")
    if isinstance(neck, FPNConfig):
        fpn = _block(extractor, "fpn")
        assert (neck.min_level, neck.max_level) == (_int(fpn, "min_level"), _int(fpn, "max_level"))
        assert neck.depth == _int(fpn, "additional_layer_depth", default=256)
    else:
        assert isinstance(neck, SSDFeatureMapsConfig)
        assert neck.extra_depths == (512, 256, 256, 128)


def test_anchors_match_tf(port):
    config, tf = port
    anchors = config.model.anchors
    if _has_block(tf, "multiscale_anchor_generator"):
        tf_anchors = _block(tf, "multiscale_anchor_generator")
        assert isinstance(anchors, MultiscaleAnchorsConfig)
        assert anchors.min_level == _int(tf_anchors, "min_level")
        assert anchors.max_level == _int(tf_anchors, "max_level")
        assert anchors.anchor_scale == _float(tf_anchors, "anchor_scale")
        assert anchors.scales_per_octave == _int(tf_anchors, "scales_per_octave")
        # anchors must sit on the feature levels the neck produces
        assert (anchors.min_level, anchors.max_level) == (
            config.model.neck.min_level,
            config.model.neck.max_level,
        )
    else:
        tf_anchors = _block(tf, "ssd_anchor_generator")
        assert isinstance(anchors, SSDAnchorsConfig)
        assert anchors.num_layers == _int(tf_anchors, "num_layers")
        assert anchors.min_scale == _float(tf_anchors, "min_scale")
        assert anchors.max_scale == _float(tf_anchors, "max_scale")
        assert anchors.interpolated_scale_aspect_ratio == _float(
            tf_anchors, "interpolated_scale_aspect_ratio", default=1.0
        )
        assert anchors.reduce_boxes_in_lowest_layer == _bool(
            tf_anchors, "reduce_boxes_in_lowest_layer", default=True
        )
    assert anchors.aspect_ratios == _floats(tf_anchors, "aspect_ratios")


def test_head_matches_tf(port):
    config, tf = port
    head = config.model.head
    if _has_block(tf, "weight_shared_convolutional_box_predictor"):
        tf_head = _block(tf, "weight_shared_convolutional_box_predictor")
        assert isinstance(head, WeightSharedHeadConfig)
        assert head.depth == _int(tf_head, "depth")
        assert head.num_layers_before_predictor == _int(tf_head, "num_layers_before_predictor")
        assert head.kernel_size == _int(tf_head, "kernel_size")
        assert head.share_prediction_tower == _bool(tf_head, "share_prediction_tower")
        assert head.use_depthwise == _bool(tf_head, "use_depthwise")
        bias = math.log(head.prior_probability / (1.0 - head.prior_probability))
        assert bias == pytest.approx(_float(tf_head, "class_prediction_bias_init"), abs=1e-4)
        bn = _block(tf_head, "batch_norm")
        assert head.norm == "batch_norm"
        assert head.batch_norm.decay == _approx(_float(bn, "decay"))
        assert head.batch_norm.epsilon == _approx(_float(bn, "epsilon"))
        assert head.activation == "relu6"
        assert _value(_block(tf_head, "conv_hyperparams"), "activation").lower() == "relu_6"
    else:
        tf_head = _block(tf, "convolutional_box_predictor")
        assert isinstance(head, ConvolutionalHeadConfig)
        assert head.kernel_size == _int(tf_head, "kernel_size")
        assert head.num_layers_before_predictor == _int(tf_head, "num_layers_before_predictor")
        assert head.depth == _int(tf_head, "max_depth") == _int(tf_head, "min_depth")
        assert head.use_dropout == _bool(tf_head, "use_dropout")
        assert head.dropout_keep_prob == _float(tf_head, "dropout_keep_probability")
        assert head.class_prediction_bias_init == _float(tf_head, "class_prediction_bias_init")


def test_loss_and_post_processing_match_tf(port):
    config, tf = port
    loss, post = config.model.loss, config.model.post_processing
    tf_loss = _block(tf, "loss")
    focal = _block(tf_loss, "weighted_sigmoid_focal")
    assert loss.classification == "sigmoid_focal"
    assert loss.alpha == _float(focal, "alpha")
    assert loss.gamma == _float(focal, "gamma")
    assert loss.localization == "smooth_l1"
    assert loss.delta == _float(_block(tf_loss, "weighted_smooth_l1"), "delta", default=1.0)
    assert loss.classification_weight == _float(tf_loss, "classification_weight")
    assert loss.localization_weight == _float(tf_loss, "localization_weight")
    assert not _has_block(tf_loss, "hard_example_miner")
    assert loss.normalize_by_num_matches == _bool(tf, "normalize_loss_by_num_matches")
    assert loss.normalize_loc_loss_by_codesize == _bool(tf, "normalize_loc_loss_by_codesize")

    nms = _block(tf, "batch_non_max_suppression")
    assert post.score_threshold == _float(nms, "score_threshold")
    assert post.iou_threshold == _float(nms, "iou_threshold")
    assert post.max_detections_per_class == _int(nms, "max_detections_per_class")
    assert post.max_total_detections == _int(nms, "max_total_detections")
    converter = _value(_block(tf, "post_processing"), "score_converter")
    assert post.score_converter == converter.lower()


def test_training_matches_tf(port):
    config, tf = port
    train = config.train
    tf_train = _block(tf, "train_config")
    assert train.batch_size == _int(tf_train, "batch_size")
    assert train.num_steps == _int(tf_train, "num_steps")
    assert config.data.max_number_of_boxes == _int(tf_train, "max_number_of_boxes", default=100)

    momentum = _block(tf_train, "momentum_optimizer")
    assert train.optimizer.name == "momentum"
    assert train.optimizer.momentum == _float(momentum, "momentum_optimizer_value")
    assert train.optimizer.clip_gradient_norm is None
    assert not _has_block(tf_train, "gradient_clipping_by_norm")
    assert train.ema_decay is None and not _bool(tf_train, "use_moving_average")
    assert config.eval.use_ema == _bool(_block(tf, "eval_config"), "use_moving_averages")

    cosine = _block(momentum, "cosine_decay_learning_rate")
    lr = train.learning_rate
    assert lr.name == "cosine"
    assert lr.learning_rate_base == _float(cosine, "learning_rate_base")
    assert lr.total_steps == _int(cosine, "total_steps")
    assert lr.warmup_learning_rate == _float(cosine, "warmup_learning_rate")
    assert lr.warmup_steps == _int(cosine, "warmup_steps")
    assert lr.hold_base_rate_steps == _int(cosine, "hold_base_rate_steps", default=0)

    # one L2 weight for feature extractor and box predictor in every ported config
    weights = {float(w) for w in re.findall(r"\bweight\s*:\s*([-\d.eE+]+)", _block(tf, "model"))}
    assert len(weights) == 1
    assert train.optimizer.weight_decay == _approx(weights.pop())


def test_augmentations_are_ported_or_flagged(port):
    """Each TF augmentation is a jaxdet augment op, or the YAML says it is not yet supported."""
    config, tf = port
    ops = [op.name for op in config.data.augment]
    yaml_text = "".join(
        (CONFIG_DIR / f"{name}.yaml").read_text() for name in _config_chain(config.name)
    )
    tf_ops = []
    for match in re.finditer(r"\bdata_augmentation_options\s*\{", tf):
        body = _block(tf[match.start() :], "data_augmentation_options")
        tf_ops.append(re.match(r"\s*(\w+)", body).group(1))
    assert tf_ops
    for tf_op in tf_ops:
        if tf_op in TF_AUGMENTS:
            assert TF_AUGMENTS[tf_op] in ops
        else:
            assert re.search(rf"# TF: [^\n]*{tf_op}[\s\S]*?not yet supported", yaml_text), tf_op
    if "ssd_random_crop" in tf_ops:  # TF's default operations
        crop = next(op for op in config.data.augment if op.name == "ssd_random_crop")
        assert crop.min_object_covered == (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
        assert crop.overlap_thresh == (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)
        assert crop.aspect_ratio_range == (0.5, 2.0) and crop.area_range == (0.1, 1.0)
        assert crop.random_coef == 0.15


def _config_chain(name: str) -> list[str]:
    """The shipped config and the shipped configs it inherits from (``base:``)."""
    chain = []
    while name:
        chain.append(name)
        match = re.search(r"^base:\s*(\S+)", (CONFIG_DIR / f"{name}.yaml").read_text(), re.M)
        name = match.group(1) if match else ""
    return chain


# --------------------------------------------------------------------------- TF1 SSD MobileNet v1


def test_ssd_mobilenet_v1_300_matches_tf1_sample_config():
    """No TF2 config exists; the numbers are those of TF1 samples/configs/ssd_mobilenet_v1_coco."""
    config = load_config("ssd_mobilenet_v1_300")
    model, train = config.model, config.train
    assert model.num_classes == 90 and model.add_background_class
    assert (config.data.resizer.height, config.data.resizer.width) == (300, 300)
    assert model.backbone.name == "mobilenet_v1"
    assert (model.backbone.depth_multiplier, model.backbone.min_depth) == (1.0, 16)
    assert (model.backbone.batch_norm.decay, model.backbone.batch_norm.epsilon) == (0.9997, 0.001)
    assert isinstance(model.neck, SSDFeatureMapsConfig)
    assert model.neck.extra_depths == (512, 256, 256, 128)
    anchors = model.anchors
    assert isinstance(anchors, SSDAnchorsConfig)
    assert (anchors.num_layers, anchors.min_scale, anchors.max_scale) == (6, 0.2, 0.95)
    assert anchors.aspect_ratios == (1.0, 2.0, 0.5, 3.0, 0.3333)
    head = model.head
    assert isinstance(head, ConvolutionalHeadConfig)
    assert (head.kernel_size, head.num_layers_before_predictor, head.use_dropout) == (1, 0, False)
    assert model.loss.classification == "weighted_sigmoid"
    assert model.loss.localization == "smooth_l1" and model.loss.normalize_by_num_matches
    assert model.post_processing.score_converter == "sigmoid"
    assert (model.post_processing.score_threshold, model.post_processing.iou_threshold) == (
        1e-8,
        0.6,
    )
    assert model.matcher.matched_threshold == model.matcher.unmatched_threshold == 0.5
    assert [op.name for op in config.data.augment] == ["random_horizontal_flip", "ssd_random_crop"]
    assert train.batch_size == 24 and train.num_steps == 200000
    opt = train.optimizer
    assert (opt.name, opt.momentum, opt.rmsprop_decay, opt.epsilon) == ("rmsprop", 0.9, 0.9, 1.0)
    assert opt.weight_decay == 0.00004
    lr = train.learning_rate
    assert lr.name == "exponential"
    assert (lr.initial_learning_rate, lr.decay_steps, lr.decay_factor) == (0.004, 800720, 0.95)
    assert lr.staircase
    # hard example mining arrives later: the YAML must say so rather than drop it
    text = (CONFIG_DIR / "ssd_mobilenet_v1_300.yaml").read_text()
    assert re.search(r"# TF: hard_example_miner[\s\S]*?not yet supported", text)
