"""TF's per-layer initializers and L2 regularizers of an SSD-family pipeline.config, as
jaxdet rules (``train.initializers``, ``train.optimizer.weight_decay_rules``; see
``config/schema_params.py``).

TF builds each Keras layer with the ``conv_hyperparams`` of the part it belongs to, with
exceptions this module spells out (TF OD API ``builders/hyperparams_builder.py``, the Keras
feature extractors, ``models/feature_map_generators.py``, ``bifpn_utils.py``, the Keras box
predictors and heads):

- a Keras ``SeparableConv2D`` takes the hyperparams' initializer and regularizer on its
  depthwise kernel only where TF remaps them (``depthwise_initializer``); its pointwise
  kernel keeps Keras's default (glorot_uniform, no regularizer) unless TF remaps it too
  (BiFPN always; the weight-shared tower with ``apply_conv_hyperparams_pointwise``; the
  weight-shared predictors with ``apply_conv_hyperparams_to_heads``, which also covers their
  depthwise kernel);
- a Keras ``DepthwiseConv2D`` given the hyperparams unmapped (the SSD feature maps with
  ``use_depthwise``) keeps Keras's default too;
- a backbone takes the feature extractor's hyperparams only with
  ``override_base_feature_extractor_hyperparams``; otherwise its own: MobileNets a truncated
  normal of stddev 0.09 and L2 4e-5, ResNets ``variance_scaling_initializer()`` and L2 2e-4,
  EfficientNets (official) a fan-out variance scaling (jaxdet's own) and L2 1e-5 on their
  convolution kernels and squeeze-excitation biases but none on depthwise kernels.

The weights here are jaxdet's ``weight_decay`` (the gradient gains ``w * param``): TF's
``l2_regularizer { weight: w }`` is a Keras ``l2(w / 2)``, whose gradient is ``w * param``.
"""

from __future__ import annotations

from typing import Any

from jaxdet.config.pbtxt import Message, PbtxtError
from jaxdet.config.tfod_common import Mapper, TfodConfigError

GLOROT: dict[str, Any] = {"name": "glorot_uniform"}
MOBILENET_DEFAULT = ({"name": "truncated_normal", "mean": 0.0, "stddev": 0.09}, 4e-5)
RESNET_DEFAULT = ({"name": "variance_scaling", "factor": 1.0, "mode": "fan_in",
                   "distribution": "truncated_normal"}, 2e-4)
EFFICIENTNET_DEFAULT_L2 = 1e-5  # official EfficientNet: Keras l2(5e-6)
VARIANCE_SCALING_MODES = {"FAN_IN": "fan_in", "FAN_OUT": "fan_out", "FAN_AVG": "fan_avg"}


def hyper_initializer(m: Mapper, hyper: Message) -> dict[str, Any]:
    """A Hyperparams message's ``initializer`` -> a ``train.initializers`` initializer, with
    the defaults of TF's hyperparams.proto; none at all is Keras's default, glorot_uniform."""
    if not hyper.has("initializer"):
        return dict(GLOROT)
    init = m.sub(hyper, "initializer")
    if not init.names():
        return dict(GLOROT)
    try:
        kind, spec = init.oneof()
    except PbtxtError as err:
        raise TfodConfigError(f"{m.source}: {err}") from None
    if kind == "keras_initializer_by_name":
        if str(spec) != "glorot_uniform":
            raise m.error(init, kind, f"'{spec}' is not supported; jaxdet knows "
                          "'glorot_uniform' (or use one of the initializer messages)")
        return dict(GLOROT)
    supported = ("truncated_normal_initializer", "random_normal_initializer",
                 "variance_scaling_initializer")
    if kind not in supported or not isinstance(spec, Message):
        raise m.error(init, kind, f"not supported; jaxdet supports {', '.join(supported)}, "
                      "keras_initializer_by_name")
    if kind == "variance_scaling_initializer":
        mode = m.only(spec, "mode", VARIANCE_SCALING_MODES, "FAN_IN")
        return {"name": "variance_scaling", "factor": float(spec.take("factor", 2.0)),
                "mode": VARIANCE_SCALING_MODES[str(mode)],
                "distribution": "uniform" if spec.take("uniform", False) else "truncated_normal"}
    name = kind.removesuffix("_initializer")
    return {"name": name, "mean": float(spec.take("mean", 0.0)),
            "stddev": float(spec.take("stddev", 1.0))}


class Rules:
    """The two ordered rule lists being built (the first matching rule wins)."""

    def __init__(self) -> None:
        self.init: list[dict[str, Any]] = []
        self.decay: list[dict[str, Any]] = []

    def add(self, params: str, init: dict[str, Any] | None, decay: float | None,
            depthwise: bool | None = None) -> None:
        """One rule for each of ``init`` and ``decay`` that is not None."""
        extra = {} if depthwise is None else {"depthwise": depthwise}
        if init is not None:
            self.init.append({"params": params, **extra, "initializer": init})
        if decay is not None:
            self.decay.append({"params": params, **extra, "weight": decay})


def backbone_rules(rules: Rules, backbone: str, override: bool, fe_init: dict[str, Any],
                   fe_l2: float) -> None:
    """The backbone's kernels (``backbone`` is jaxdet's backbone name)."""
    if backbone.startswith("efficientnet"):  # initializers: jaxdet's own are TF's
        l2 = fe_l2 if override else EFFICIENTNET_DEFAULT_L2
        rules.add(r"^backbone/.*/se/.*(kernel|bias)$", None, l2)
        rules.add(r"^backbone/.*kernel$", None, 0.0, depthwise=True)
        rules.add(r"^backbone/.*kernel$", None, l2)
        return
    if override:
        init, l2 = fe_init, fe_l2
    else:
        init, l2 = RESNET_DEFAULT if backbone.startswith("resnet") else MOBILENET_DEFAULT
    rules.add(r"^backbone/.*kernel$", init, l2)


def neck_rules(rules: Rules, neck: str, use_depthwise: bool, fe_init: dict[str, Any],
               fe_l2: float) -> None:
    """The neck's kernels (``neck``: ``ssd_feature_maps``, ``fpn`` or ``bifpn``)."""
    if neck == "ssd_feature_maps" and use_depthwise:  # a DepthwiseConv2D given kernel_* only
        rules.add(r"^neck/.*kernel$", GLOROT, 0.0, depthwise=True)
    elif neck == "fpn" and use_depthwise:  # SeparableConv2D: the pointwise kernel is Keras's
        rules.add(r"^neck/.*/pointwise/kernel$", GLOROT, 0.0)
    rules.add(r"^neck/.*kernel$", fe_init, fe_l2)


def head_rules(rules: Rules, kind: str, bp: Message, bp_init: dict[str, Any],
               bp_l2: float) -> None:
    """The box predictor's kernels (``kind``: the predictor message's name)."""
    if kind == "weight_shared_convolutional_box_predictor" and bp.take("use_depthwise", False):
        pointwise = bool(bp.take("apply_conv_hyperparams_pointwise", False))
        heads = bool(bp.take("apply_conv_hyperparams_to_heads", False))
        tower_pointwise = (bp_init, bp_l2) if pointwise else (GLOROT, 0.0)
        predictor = (bp_init, bp_l2) if heads else (GLOROT, 0.0)
        rules.add(r"^head/\w+_tower/.*/pointwise/kernel$", *tower_pointwise)
        rules.add(r"^head/\w+_predictor/.*kernel$", *predictor)
    for name in ("apply_conv_hyperparams_pointwise", "apply_conv_hyperparams_to_heads"):
        bp.take(name)  # read (only depthwise weight-shared towers and heads use them)
    rules.add(r"^head/.*kernel$", bp_init, bp_l2)
