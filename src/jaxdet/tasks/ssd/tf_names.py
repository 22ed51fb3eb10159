"""Where each tensor of a TF OD API (TF2) SSD-family checkpoint goes in a jaxdet ``SSDDetector``.

The map is ``{tf object path: (jaxdet variable path, transform)}`` (``interop.tfod_names``:
the transforms, and the backbones' Keras layer orders it shares with the other families). TF's
``SSDMetaArch`` holds the Keras backbone as ``model/_feature_extractor/classification_backbone``
(``_efficientnet`` for EfficientDet), the neck under ``model/_feature_extractor`` (SSD feature
maps, the Keras FPN or BiFPN) and the box predictor as ``model/_box_predictor`` (convolutional
or weight-shared). :func:`tf_name_map` is the family's ``TaskFamily.tf_name_map``.
"""

from __future__ import annotations

from flax import nnx

from jaxdet.config import schema as S
from jaxdet.interop.tfod_names import (
    Path,
    Target,
    UnmappedModelError,
    bn_targets,
    conv_targets,
    efficientnet_layers,
    keras_numbered_targets,
    mobilenet_v1_layers,
    mobilenet_v2_layers,
    resnet_layers,
)
from jaxdet.models.backbones import efficientnet as effnet
from jaxdet.models.backbones.mobilenet import MobileNetV1, MobileNetV2
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import SeparableConv
from jaxdet.models.necks.fpn import FPN
from jaxdet.tasks.ssd.bifpn import BiFPN
from jaxdet.tasks.ssd.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.tasks.ssd.heads.weight_shared import WeightSharedBoxPredictor
from jaxdet.tasks.ssd.ssd_feature_maps import SSDFeatureMaps


def _conv_or_separable(out: dict, tf_path: str, path: Path, module) -> None:
    """A plain conv (``kernel``, ``bias``) or TF's separable conv (``depthwise_kernel``,
    ``pointwise_kernel``, ``bias``) at one TF object path."""
    if isinstance(module, SeparableConv):
        out[f"{tf_path}/depthwise_kernel"] = ((*path, "depthwise", "kernel"), "depthwise")
        out[f"{tf_path}/pointwise_kernel"] = ((*path, "pointwise", "kernel"), "identity")
        if module.pointwise.bias is not None:
            out[f"{tf_path}/bias"] = ((*path, "pointwise", "bias"), "identity")
    else:
        conv_targets(out, tf_path, path, module)


def _bifpn(out: dict, neck: BiFPN, prefix: str) -> None:
    """The Keras BiFPN: one flat list of nodes, the levels above the backbone first (their
    inputs' 1x1 conv + BN at ``node_input_blocks/<n>/0/1/{0, 1}``), then every cell's nodes in
    jaxdet's order; per node, each input's 1x1 conv + BN (when the channel count changes),
    ``node_combine_op/<n>/bifpn_combine_weights`` and ``node_post_combine_block/<n>/{1: the
    separable conv, 2: BN}``."""
    n = 0
    for level in range(neck.backbone_levels[-1] + 1, neck.max_level + 1):
        resample = neck.resample[str(level - neck.min_level)]
        if resample.conv is not None:
            at = ("neck", "resample", str(level - neck.min_level), "conv")
            conv_targets(out, f"{prefix}/node_input_blocks/{n}/0/1/0", (*at, "conv"),
                         resample.conv.conv)
            bn_targets(out, f"{prefix}/node_input_blocks/{n}/0/1/1", (*at, "bn"))
        n += 1
    for c, cell in enumerate(neck.cell):
        for j, fnode in enumerate(cell.fnode):
            at = ("neck", "cell", c, "fnode", j)
            for k, offset in enumerate(fnode.combine.offsets):
                resample = fnode.combine.resample[str(offset)]
                if resample.conv is not None:
                    r = (*at, "combine", "resample", str(offset), "conv")
                    tf = f"{prefix}/node_input_blocks/{n}/{k}/1"
                    conv_targets(out, f"{tf}/0", (*r, "conv"), resample.conv.conv)
                    bn_targets(out, f"{tf}/1", (*r, "bn"))
            if fnode.combine.edge_weights is not None:
                out[f"{prefix}/node_combine_op/{n}/bifpn_combine_weights"] = (
                    (*at, "combine", "edge_weights"), "column")
            unit = fnode.after_combine.conv
            post = f"{prefix}/node_post_combine_block/{n}"
            if not hasattr(unit, "conv_dw"):
                raise UnmappedModelError("BiFPN with plain (not separable) node convs")
            conv_at = (*at, "after_combine", "conv")
            out[f"{post}/1/depthwise_kernel"] = ((*conv_at, "conv_dw", "kernel"), "depthwise")
            out[f"{post}/1/pointwise_kernel"] = ((*conv_at, "conv_pw", "kernel"), "identity")
            out[f"{post}/1/bias"] = ((*conv_at, "conv_pw", "bias"), "identity")
            bn_targets(out, f"{post}/2", (*conv_at, "bn"))
            n += 1


def _fpn(out: dict, neck: FPN, prefix: str) -> None:
    """The Keras FPN: ``_fpn_features_generator/top_layers/0`` (the top level's 1x1),
    ``residual_blocks/<k>/0`` and ``conv_layers/<k>/{0: conv, 1: BN}`` for the lower levels
    from the top down, ``_coarse_feature_layers/<k>/{0, 1}`` for the levels above."""
    gen = f"{prefix}/_fpn_features_generator"
    n = len(neck.backbone_levels)
    conv_targets(out, f"{gen}/top_layers/0", ("neck", "lateral", n - 1), neck.lateral[n - 1])
    for k in range(n - 1):
        i = n - 2 - k  # jaxdet lists the levels ascending
        conv_targets(out, f"{gen}/residual_blocks/{k}/0", ("neck", "lateral", i), neck.lateral[i])
        _conv_or_separable(out, f"{gen}/conv_layers/{k}/0", ("neck", "smoothing", i, "conv"),
                           neck.smoothing[i].conv)
        bn_targets(out, f"{gen}/conv_layers/{k}/1", ("neck", "smoothing", i, "norm"))
    for k, layer in enumerate(neck.extra):
        _conv_or_separable(out, f"{prefix}/_coarse_feature_layers/{k}/0",
                           ("neck", "extra", k, "conv"), layer.conv)
        bn_targets(out, f"{prefix}/_coarse_feature_layers/{k}/1", ("neck", "extra", k, "norm"))


def _weight_shared_box_predictor(out: dict, head: WeightSharedBoxPredictor, prefix: str,
                                 background: bool) -> None:
    """Keras WeightSharedConvolutionalBoxPredictor: tower convs shared over levels
    (``_head_scope_conv_layers/{Box,Class}PredictionTower/<i>``, one ``PredictionTower`` when
    the tower is shared), batch norms per level (``_base_tower_layers_for_heads/<head>/<level>
    /<3 i + 1>``), predictors ``_box_prediction_head/_box_encoder_layers/0`` and
    ``_prediction_heads/class_predictions_with_background/_class_predictor_layers/0``."""
    towers = [("box", "box_encodings", head.box_tower, head.box_norms)]
    if not head.share_prediction_tower:
        towers.append(("class", "class_predictions_with_background", head.class_tower,
                       head.class_norms))
    for name, tf_head, tower, norms in towers:
        scope = ("PredictionTower" if head.share_prediction_tower
                 else f"{name.capitalize()}PredictionTower")
        for i, layer in enumerate(tower):
            _conv_or_separable(out, f"{prefix}/_head_scope_conv_layers/{scope}/{i}",
                               ("head", f"{name}_tower", i), layer)
            if norms is None:
                continue
            if head.share_norm_across_levels:
                raise UnmappedModelError("TF keeps one batch norm per level")
            for level in range(len(head.levels)):
                bn_targets(out,
                           f"{prefix}/_base_tower_layers_for_heads/{tf_head}/{level}/{3 * i + 1}",
                           ("head", f"{name}_norms", i, level))
    _conv_or_separable(out, f"{prefix}/_box_prediction_head/_box_encoder_layers/0",
                       ("head", "box_predictor"), head.box_predictor)
    cls = f"{prefix}/_prediction_heads/class_predictions_with_background/_class_predictor_layers/0"
    start = len(out)
    _conv_or_separable(out, cls, ("head", "class_predictor"), head.class_predictor)
    if not background:  # the predictor's output axis holds TF's background columns
        for key in list(out)[start:]:
            path, transform = out[key]
            if key.endswith(("/pointwise_kernel", "/kernel", "/bias")):
                out[key] = (path, "drop_background")


def _ssd_feature_maps(out: dict, neck: SSDFeatureMaps, prefix: str) -> None:
    """``feature_map_generator/convolutions/<k>/<j>``: map k (the first maps come from the
    backbone and have no layers); j counts conv, batch norm and activation layers."""
    first = len(neck.source_levels)
    for k, layer in enumerate(neck.extra):
        at = ("neck", "extra", k)
        tf = f"{prefix}/convolutions/{first + k}"
        if layer.project is not None:
            raise UnmappedModelError("depthwise SSD feature maps (SSDLite) are not mapped yet")
        conv_targets(out, f"{tf}/0", (*at, "reduce", "conv"), layer.reduce.conv)
        bn_targets(out, f"{tf}/1", (*at, "reduce", "norm"))
        conv_targets(out, f"{tf}/3", (*at, "downsample", "conv"), layer.downsample.conv)
        bn_targets(out, f"{tf}/4", (*at, "downsample", "norm"))


def _convolutional_box_predictor(out: dict, head: ConvolutionalBoxPredictor, prefix: str,
                                 background: bool) -> None:
    for level, predictor in enumerate(head.predictors):
        if len(predictor.tower) or predictor.box_predictor.depthwise is not None:
            raise UnmappedModelError("convolutional box predictor towers are not mapped yet")
        at = ("head", "predictors", level)
        box = f"{prefix}/_prediction_heads/box_encodings/{level}/_box_encoder_layers/0"
        conv_targets(out, box, (*at, "box_predictor", "conv"), predictor.box_predictor.conv)
        cls = (f"{prefix}/_prediction_heads/class_predictions_with_background/{level}/"
               "_class_predictor_layers/0")
        transform = "identity" if background else "drop_background"
        out[f"{cls}/kernel"] = ((*at, "class_predictor", "conv", "kernel"), transform)
        out[f"{cls}/bias"] = ((*at, "class_predictor", "conv", "bias"), transform)


def ssd_detector_map(model: nnx.Module, *, add_background_class: bool) -> dict[str, Target]:
    """``{tf object path: (jaxdet path, transform)}`` for an SSD-family detector built from a
    TF OD API pipeline.config. Raises UnmappedModelError naming the part that has no map."""
    out: dict[str, Target] = {}
    fe = "model/_feature_extractor"
    backbone, neck, head = model.backbone, model.neck, model.head
    if isinstance(backbone, MobileNetV2):
        layers = mobilenet_v2_layers(backbone, ("backbone",))
    elif isinstance(backbone, MobileNetV1):
        layers = mobilenet_v1_layers(backbone, ("backbone",))
    elif isinstance(backbone, ResNet):
        layers = resnet_layers(backbone, ("backbone",))
    elif isinstance(backbone, effnet.EfficientNet):
        layers = efficientnet_layers(backbone, ("backbone",))
    else:
        raise UnmappedModelError(f"no TF checkpoint map yet for {type(backbone).__name__}")
    keras_model = "_efficientnet" if isinstance(backbone, effnet.EfficientNet) else (
        "classification_backbone")
    keras_numbered_targets(out, f"{fe}/{keras_model}", layers)
    if isinstance(neck, SSDFeatureMaps):
        _ssd_feature_maps(out, neck, f"{fe}/feature_map_generator")
    elif isinstance(neck, FPN):
        _fpn(out, neck, fe)
    elif isinstance(neck, BiFPN):
        _bifpn(out, neck, f"{fe}/_bifpn_stage")
    else:
        raise UnmappedModelError(f"no TF checkpoint map yet for {type(neck).__name__}")
    if isinstance(head, ConvolutionalBoxPredictor):
        _convolutional_box_predictor(out, head, "model/_box_predictor", add_background_class)
    elif isinstance(head, WeightSharedBoxPredictor):
        _weight_shared_box_predictor(out, head, "model/_box_predictor", add_background_class)
    else:
        raise UnmappedModelError(f"no TF checkpoint map yet for {type(head).__name__}")
    return out


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """The SSD family's ``TaskFamily.tf_name_map``: :func:`ssd_detector_map` of ``model``, with
    TF's background class dropped from the class predictor unless
    ``model.add_background_class``."""
    return ssd_detector_map(model, add_background_class=config.model.add_background_class)


__all__ = ["ssd_detector_map", "tf_name_map"]
