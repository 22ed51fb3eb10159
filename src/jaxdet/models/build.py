"""Backbones and necks from a config's ``model`` section (the parts several families share),
and the model-wide batch-norm setting of ``parallel.batch_norm_statistics``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
from flax import nnx

from jaxdet.config import schema as S
from jaxdet.config.schema_params import InitializerConfig, InitializerRule
from jaxdet.models.backbones.efficientnet import TF_LEVEL_BLOCKS, EfficientNet
from jaxdet.models.backbones.hourglass import HOURGLASS_SPECS, Hourglass
from jaxdet.models.backbones.inception_resnet_v2 import InceptionResNetV2
from jaxdet.models.backbones.mobilenet import MobileNetV1, MobileNetV2
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.backbones.resnet_v2 import ResNetV2
from jaxdet.models.initializers import InitSpec
from jaxdet.models.layers import BatchNormParams, set_batch_norm_groups
from jaxdet.models.necks.fpn import FPN
from jaxdet.models.necks.identity import IdentityNeck
from jaxdet.models.param_rules import ParamPattern, apply_initializer_rules


def batch_norm_params(cfg: S.BatchNormConfig) -> BatchNormParams:
    """Momentum, epsilon and freezing of one model part's BatchNorms (``num_groups`` is set
    model-wide by :func:`apply_batch_norm_statistics` from ``parallel.batch_norm_statistics``)."""
    return BatchNormParams(momentum=cfg.decay, epsilon=cfg.epsilon, frozen=cfg.frozen)


def build_backbone(cfg: S.SSDModelConfig, *, dtype, rngs: nnx.Rngs) -> nnx.Module:
    b = cfg.backbone
    bn = batch_norm_params(b.batch_norm)
    if b.name.startswith("resnet_v2_"):
        return ResNetV2(int(b.name.removeprefix("resnet_v2_")), batch_norm=bn, dtype=dtype,
                        rngs=rngs)
    if b.name.startswith("hourglass"):
        return Hourglass(HOURGLASS_SPECS[b.name], batch_norm=bn, dtype=dtype, rngs=rngs)
    if b.name == "inception_resnet_v2":
        if cfg.type != "faster_rcnn":
            raise ValueError("model.backbone.name=inception_resnet_v2 is Faster / Mask R-CNN's "
                             f"split network; model.type {cfg.type} needs another backbone")
        return InceptionResNetV2(batch_norm=bn, dtype=dtype, rngs=rngs)
    if b.name.startswith("resnet"):
        return ResNet(
            int(b.name.removeprefix("resnet")),
            batch_norm=bn,
            width_multiplier=b.depth_multiplier,
            activation_name=b.activation or "relu",
            padding=b.padding or "symmetric",
            stride_in_1x1=b.stride_in_1x1,
            conv_bias=b.conv_bias,
            dtype=dtype,
            rngs=rngs,
        )
    if b.name.startswith("efficientnet"):
        return EfficientNet(
            b.name.removeprefix("efficientnet_"),
            batch_norm=bn,
            drop_connect_rate=b.drop_connect_rate,
            activation_name=b.activation or "swish",
            last_stage_blocks=1 if b.tf_endpoints else None,
            level_blocks=TF_LEVEL_BLOCKS if b.tf_endpoints else None,
            dtype=dtype,
            rngs=rngs,
        )
    if b.activation not in (None, "relu6"):
        raise ValueError(
            f"model.backbone.activation={b.activation} is not supported for {b.name} "
            "(MobileNets use relu6)"
        )
    padding = b.padding or "symmetric"
    if b.name == "mobilenet_v1":
        return MobileNetV1(
            b.depth_multiplier, b.min_depth, batch_norm=bn, padding=padding, dtype=dtype,
            rngs=rngs
        )
    # TF's classic SSD reads the 576-channel expansion output of block 15 as its stride-16 map;
    # its CenterNet MobileNetV2-FPN the end of the 64-channel stage, and scales the head conv
    # only below multiplier 1 (the TF OD API's Keras MobileNetV2; a converted TF SSD says so
    # in backbone.head_scaling).
    from_expansion = isinstance(cfg.neck, S.SSDFeatureMapsConfig)
    center_net_fpn = isinstance(cfg.neck, S.CenterNetMobileNetV2FPNConfig)
    return MobileNetV2(
        b.depth_multiplier,
        b.min_depth,
        level4_from_expansion=from_expansion,
        batch_norm=bn,
        level4_stage=3 if center_net_fpn else 4,
        head_scaling=b.head_scaling or ("below_1" if center_net_fpn else "above_1"),
        padding=padding,
        dtype=dtype,
        rngs=rngs,
    )


def build_neck(cfg: S.SSDModelConfig, in_channels: dict[int, int], *, dtype, rngs: nnx.Rngs):
    """A neck several families share, from ``cfg.neck``: the FPN (RetinaNet, Faster R-CNN) or
    the identity (a CenterNet reading one backbone level). A family's own necks (the SSD
    family's BiFPN and feature maps, CenterNet's upsampling necks) are built by its builder."""
    n = cfg.neck
    if isinstance(n, S.IdentityNeckConfig):
        return IdentityNeck(in_channels, n.level)
    if isinstance(n, S.FPNConfig):
        bn = batch_norm_params(cfg.backbone.batch_norm)
        return FPN(
            in_channels,
            n.min_level,
            n.max_level,
            n.depth,
            batch_norm=bn if n.norm == "batch_norm" else None,
            activation=n.activation,
            use_depthwise=n.use_depthwise,
            top_down=n.top_down,
            smooth_top=n.smooth_top,
            extra_input_activation=n.extra_input_activation,
            padding=n.padding,
            dtype=dtype,
            rngs=rngs,
        )
    raise ValueError(f"model.neck {n.name!r} is not a shared neck: the {cfg.type} builder "
                     "builds it")


def apply_batch_norm_statistics(model: nnx.Module, config: S.Config) -> None:
    """``parallel.batch_norm_statistics=per_device``: every BatchNorm of ``model`` takes its
    training statistics per group of ``parallel.data`` rows (per data shard)."""
    p = config.parallel
    if p.batch_norm_statistics == "per_device":
        # the mesh's data axis size; not checked against the devices here (a model built for
        # predict or export elsewhere never uses it), build_mesh checks it for training
        groups = p.data if p.data > 0 else max(1, jax.device_count() // p.spatial)
        set_batch_norm_groups(model, groups)


def init_spec(cfg: InitializerConfig) -> InitSpec:
    """An initializer of ``train.initializers`` as the plain spec the models draw from."""
    return InitSpec(**cfg.model_dump())


def initializer_rules(rules: Sequence[InitializerRule]) -> list[tuple[ParamPattern, InitSpec]]:
    """``train.initializers`` -> ``[(pattern, spec)]`` (``param_rules.apply_initializer_rules``)."""
    return [(ParamPattern(r.params, r.depthwise), init_spec(r.initializer)) for r in rules]


def apply_initializers(model: nnx.Module, rules: Sequence[InitializerRule], seed: int) -> None:
    """Redraw ``model``'s parameters that ``train.initializers`` names (see
    ``models.param_rules``); nothing when there are no rules."""
    apply_initializer_rules(model, initializer_rules(rules), seed)
