"""A converted pipeline.config carries TF's own initializer and L2 regularizer of every layer
(``train.initializers``, ``train.optimizer.weight_decay_rules``) and trains crowd boxes as TF
does; the rules of every SSD-family zoo config match the model jaxdet builds from it."""

from __future__ import annotations

from pathlib import Path

import jax
import pytest
from flax import nnx

from jaxdet.config.tfod import load_pipeline_config
from jaxdet.config.tfod_common import TfodConfigError
from jaxdet.models.abstract import abstract_build
from jaxdet.models.param_rules import ParamPattern, check_every_rule_matches
from jaxdet.tasks.ssd import build as ssd_build
from jaxdet.train.optim import param_path

TFOD_CONFIGS = Path(__file__).parents[2] / ".." / "shared" / "data" / "tfod" / "configs"
needs_shared = pytest.mark.skipif(not TFOD_CONFIGS.is_dir(), reason="../shared absent")

TRUNC_003 = {"name": "truncated_normal", "mean": 0.0, "stddev": 0.03}
NORMAL_001 = {"name": "random_normal", "mean": 0.0, "stddev": 0.01}
GLOROT = {"name": "glorot_uniform"}


def _rules(config) -> tuple[list, list]:
    init = [(r.params, r.depthwise, r.initializer.model_dump()) for r in config.train.initializers]
    decay = [(r.params, r.depthwise, r.weight) for r in config.train.optimizer.weight_decay_rules]
    return init, decay


@needs_shared
def test_mobilenet_ssd_takes_each_parts_hyperparams():
    """ssd_mobilenet_v2_keras with override_base_feature_extractor_hyperparams: the backbone and
    the extra feature maps take the feature extractor's truncated normal (0.03), the 1x1
    predictors the box predictor's normal (0.01); every kernel L2 4e-5."""
    c = load_pipeline_config(TFOD_CONFIGS / "ssd_mobilenet_v2_320x320_coco17_tpu-8.config")
    init, decay = _rules(c)
    assert init == [(r"^backbone/.*kernel$", None, TRUNC_003),
                    (r"^neck/.*kernel$", None, TRUNC_003), (r"^head/.*kernel$", None, NORMAL_001)]
    assert decay == [(r"^backbone/.*kernel$", None, 4e-5), (r"^neck/.*kernel$", None, 4e-5),
                     (r"^head/.*kernel$", None, 4e-5)]
    assert c.data.crowd_boxes == "train"


@needs_shared
def test_efficientdet_keeps_efficientnets_own_and_keras_defaults_where_tf_does():
    """The official EfficientNet keeps its initializers and regularizes its conv kernels and
    squeeze-excitation biases with l2(5e-6) (a gradient of 1e-5 * w) but not its depthwise
    kernels; the BiFPN's separable convolutions take the hyperparams on both kernels; the
    weight-shared head's separable tower takes them on its depthwise kernel only, its
    predictors not at all (Keras's glorot_uniform, no regularizer)."""
    c = load_pipeline_config(TFOD_CONFIGS / "ssd_efficientdet_d0_512x512_coco17_tpu-8.config")
    init, decay = _rules(c)
    assert init == [(r"^neck/.*kernel$", None, TRUNC_003),
                    (r"^head/\w+_tower/.*/pointwise/kernel$", None, GLOROT),
                    (r"^head/\w+_predictor/.*kernel$", None, GLOROT),
                    (r"^head/.*kernel$", None, NORMAL_001)]
    assert decay == [(r"^backbone/.*/se/.*(kernel|bias)$", None, 1e-5),
                     (r"^backbone/.*kernel$", True, 0.0), (r"^backbone/.*kernel$", None, 1e-5),
                     (r"^neck/.*kernel$", None, 4e-5),
                     (r"^head/\w+_tower/.*/pointwise/kernel$", None, 0.0),
                     (r"^head/\w+_predictor/.*kernel$", None, 0.0),
                     (r"^head/.*kernel$", None, 4e-5)]


@needs_shared
def test_fpnlite_separable_pointwise_kernels_are_keras_defaults():
    c = load_pipeline_config(TFOD_CONFIGS / "ssd_mobilenet_v2_fpnlite_320x320_coco17_tpu-8.config")
    init, decay = _rules(c)
    assert (r"^neck/.*/pointwise/kernel$", None, GLOROT) in init
    assert (r"^neck/.*/pointwise/kernel$", None, 0.0) in decay
    assert init.index((r"^neck/.*/pointwise/kernel$", None, GLOROT)) < init.index(
        (r"^neck/.*kernel$", None, NORMAL_001))


# one config of each architecture in the default suite; the other sizes under -m exhaustive
ARCHITECTURES = {f"ssd_{name}_coco17_tpu-8" for name in (
    "mobilenet_v2_320x320", "mobilenet_v2_fpnlite_320x320", "mobilenet_v1_fpn_640x640",
    "resnet50_v1_fpn_640x640", "efficientdet_d0_512x512")}
SSD_FAMILY = [pytest.param(name, marks=() if name in ARCHITECTURES else pytest.mark.exhaustive)
              for name in sorted(p.name.removesuffix(".config")
                                 for p in TFOD_CONFIGS.glob("ssd_*.config"))]


@needs_shared
@pytest.mark.parametrize("name", SSD_FAMILY)
@pytest.mark.slow
def test_every_rule_of_every_ssd_zoo_config_matches_its_model(name):
    """A rule matching nothing would be refused at training time; each zoo config's model
    (built abstractly) has parameters for all of its rules, and every kernel is drawn by one
    (TF gives each layer an initializer; EfficientNet's backbone keeps jaxdet's, which are
    TF's)."""
    c = load_pipeline_config(TFOD_CONFIGS / f"{name}.config")
    params, _ = _abstract(c)
    flat = [(param_path(k), v.shape) for k, v in jax.tree_util.tree_flatten_with_path(params)[0]]
    for field, rules in (("train.initializers", c.train.initializers),
                         ("train.optimizer.weight_decay_rules",
                          c.train.optimizer.weight_decay_rules)):
        check_every_rule_matches([ParamPattern(r.params, r.depthwise) for r in rules], flat, field)
    patterns = [ParamPattern(r.params, r.depthwise) for r in c.train.initializers]
    own = "backbone/" if "efficientdet" in name else None  # EfficientNet: jaxdet's are TF's
    undrawn = [path for path, shape in flat if path.endswith("kernel")
               and not (own and path.startswith(own))
               and not any(p.matches(path, shape) for p in patterns)]
    assert undrawn == []


def _abstract(config):
    model = abstract_build(lambda: ssd_build.build_model(config))
    return nnx.to_pure_dict(nnx.state(model, nnx.Param)), None


HAND = """
model { ssd {
  num_classes: 3
  box_coder { faster_rcnn_box_coder {} }
  matcher { argmax_matcher {} }
  anchor_generator { ssd_anchor_generator { num_layers: 6 } }
  image_resizer { fixed_shape_resizer { height: 64 width: 64 } }
  box_predictor { convolutional_box_predictor {
    conv_hyperparams { @INIT_BP@ batch_norm {} } } }
  feature_extractor { type: '@TYPE@' min_depth: 16 depth_multiplier: 0.25 @OVERRIDE@
    conv_hyperparams { activation: RELU_6 regularizer { l2_regularizer { weight: 0.0004 } }
      @INIT_FE@ batch_norm {} } }
  loss { classification_loss { weighted_sigmoid_focal {} }
         localization_loss { weighted_smooth_l1 {} } }
  post_processing { batch_non_max_suppression {} score_converter: SIGMOID }
} }
train_config { batch_size: 2 num_steps: 2 optimizer { momentum_optimizer { learning_rate {
  constant_learning_rate { learning_rate: 0.01 } } } use_moving_average: false } }
"""


def _hand(tmp_path, fe="ssd_mobilenet_v2_keras", override=True, init_fe="", init_bp=""):
    override = f"override_base_feature_extractor_hyperparams: {str(override).lower()}"
    text = (HAND.replace("@TYPE@", fe).replace("@OVERRIDE@", override)
            .replace("@INIT_FE@", init_fe).replace("@INIT_BP@", init_bp))
    path = tmp_path / "pipeline.config"
    path.write_text(text)
    return load_pipeline_config(path)


def test_backbones_without_override_keep_tfs_own(tmp_path):
    """Without override_base_feature_extractor_hyperparams TF's Keras MobileNets draw a
    truncated normal of stddev 0.09 with L2 4e-5 (Keras l2(2e-5)), its ResNets
    variance_scaling_initializer() with L2 2e-4 (Keras l2(1e-4)); no initializer given is
    Keras's glorot_uniform."""
    init, decay = _rules(_hand(tmp_path, override=False))
    assert init[0] == (r"^backbone/.*kernel$", None,
                       {"name": "truncated_normal", "mean": 0.0, "stddev": 0.09})
    assert decay[0] == (r"^backbone/.*kernel$", None, 4e-5)
    assert init[1] == (r"^neck/.*kernel$", None, GLOROT)  # no initializer: Keras's default
    assert decay[1] == (r"^neck/.*kernel$", None, 4e-4)
    init, decay = _rules(_hand(tmp_path, fe="ssd_resnet50_v1_fpn_keras", override=False))
    assert init[0] == (r"^backbone/.*kernel$", None, {
        "name": "variance_scaling", "factor": 1.0, "mode": "fan_in",
        "distribution": "truncated_normal"})
    assert decay[0] == (r"^backbone/.*kernel$", None, 2e-4)


def test_initializer_messages_with_tfs_proto_defaults(tmp_path):
    init, _ = _rules(_hand(tmp_path, init_fe="initializer { variance_scaling_initializer { "
                                             "mode: FAN_AVG uniform: true } }",
                           init_bp="initializer { truncated_normal_initializer { } }"))
    assert init[0][2] == {"name": "variance_scaling", "factor": 2.0, "mode": "fan_avg",
                          "distribution": "uniform"}
    assert init[2][2] == {"name": "truncated_normal", "mean": 0.0, "stddev": 1.0}
    init, _ = _rules(_hand(tmp_path, init_fe='initializer { keras_initializer_by_name: '
                                             '"glorot_uniform" }'))
    assert init[0][2] == GLOROT
    with pytest.raises(TfodConfigError, match=r"pipeline\.config:\d+: .*initializer\."
                                              r"keras_initializer_by_name: 'he_normal' is not"):
        _hand(tmp_path, init_fe='initializer { keras_initializer_by_name: "he_normal" }')


def test_crowd_boxes_train_as_tf_trains_them(tmp_path):
    """TF's training reads no is_crowd: a converted config trains crowd objects as ordinary
    ones (the first training transform clears the flag); evaluation still ignores them."""
    from jaxdet.data.augment import TrainCrowdBoxes
    from jaxdet.data.build import build_transforms

    c = _hand(tmp_path)
    assert c.data.crowd_boxes == "train"
    assert isinstance(build_transforms(c.data, training=True)[0], TrainCrowdBoxes)
    assert not any(isinstance(op, TrainCrowdBoxes)
                   for op in build_transforms(c.data, training=False))
