"""Where each tensor of a TF OD API (TF2) detection checkpoint goes in a jaxdet detector.

A TF2 checkpoint names a variable by its object path (``interop.tf_checkpoint``). The TF OD
API's Keras backbones are functional models, whose variables are numbered in layer order
(``classification_backbone/layer_with_weights-7/gamma``), so a backbone's map lists jaxdet's
convolutions and batch norms in the order the network applies them. The map is
``{tf object path: (jaxdet variable path, transform)}``; transforms (:func:`to_ours`):

* ``identity``: kernels (both HWIO), biases, batch-norm parameters and statistics;
* ``depthwise``: TF's depthwise kernel ``[kh, kw, C, 1]`` -> jaxdet's grouped ``[kh, kw, 1, C]``;
* ``reshape``: the same values in jaxdet's shape (BiFPN fusion weights ``[k, 1]`` -> ``[k]``);
* ``bgr_to_rgb``: a first conv's kernel with its input channels reversed, for a TF model
  whose preprocessing turns RGB into BGR (caffe, ``tf.keras.applications.resnet``) while
  jaxdet normalizes RGB;
* ``drop_background``: a class predictor's last axis ``A * (1 + C)`` (TF's background logit
  first in each anchor's group) -> ``A * C``, for a jaxdet model without a background class:
  with a sigmoid score converter TF drops that column after scoring, so the detections agree.

Batch norm: TF ``gamma, beta, moving_mean, moving_variance`` are jaxdet ``scale, bias, mean,
var``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
from flax import nnx

from jaxdet.models.backbones import efficientnet as effnet
from jaxdet.models.backbones.mobilenet import (
    DepthwiseSeparable,
    InvertedResidual,
    MobileNetV1,
    MobileNetV2,
)
from jaxdet.models.backbones.resnet import Bottleneck, ResNet
from jaxdet.models.heads.convolutional import ConvolutionalBoxPredictor
from jaxdet.models.heads.weight_shared import WeightSharedBoxPredictor
from jaxdet.models.layers import SeparableConv
from jaxdet.models.necks.bifpn import BiFPN
from jaxdet.models.necks.fpn import FPN
from jaxdet.models.necks.ssd_feature_maps import SSDFeatureMaps

Path = tuple[str | int, ...]
Target = tuple[Path, str]


class UnmappedModelError(ValueError):
    """A model part that has no TF OD API checkpoint name map (the message names it): its
    weights cannot come from a TF checkpoint; train it from scratch or from jaxdet weights."""
BN_NAMES = (("gamma", "scale"), ("beta", "bias"), ("moving_mean", "mean"),
            ("moving_variance", "var"))


def to_ours(transform: str, array: np.ndarray, our_shape: tuple[int, ...]) -> np.ndarray:
    """A TF tensor in jaxdet's layout (see the module docstring); ``our_shape`` is the shape
    of the jaxdet variable it goes to."""
    array = np.asarray(array)
    if transform == "identity":
        return array
    if transform == "reshape":  # e.g. BiFPN fusion weights [k, 1] -> [k]
        return array.reshape(our_shape)
    if transform == "bgr_to_rgb":  # [kh, kw, 3 (B, G, R), out] -> input channels R, G, B
        if array.ndim != 4 or array.shape[2] != 3:
            raise ValueError(f"bgr_to_rgb needs a [kh, kw, 3, out] kernel, got {array.shape}")
        return array[:, :, ::-1, :]
    if transform == "depthwise":
        kh, kw, channels, multiplier = array.shape
        return array.reshape(kh, kw, 1, channels * multiplier)
    if transform == "drop_background":
        total, ours = array.shape[-1], our_shape[-1]
        if total == ours:  # the model keeps TF's background column
            return array
        anchors = total - ours
        if anchors <= 0 or total % anchors or ours % anchors:
            raise ValueError(f"cannot drop a background column per anchor: {total} TF outputs "
                             f"for {ours} jaxdet outputs")
        grouped = array.reshape(*array.shape[:-1], anchors, total // anchors)
        return grouped[..., 1:].reshape(*array.shape[:-1], ours)
    raise ValueError(f"unknown transform {transform!r}")


def _conv(out: dict, tf_path: str, path: Path, module: nnx.Conv) -> None:
    depthwise = module.feature_group_count > 1
    out[f"{tf_path}/{'depthwise_kernel' if depthwise else 'kernel'}"] = (
        (*path, "kernel"), "depthwise" if depthwise else "identity")
    if module.bias is not None:
        out[f"{tf_path}/bias"] = ((*path, "bias"), "identity")


def _conv_or_separable(out: dict, tf_path: str, path: Path, module) -> None:
    """A plain conv (``kernel``, ``bias``) or TF's separable conv (``depthwise_kernel``,
    ``pointwise_kernel``, ``bias``) at one TF object path."""
    if isinstance(module, SeparableConv):
        out[f"{tf_path}/depthwise_kernel"] = ((*path, "depthwise", "kernel"), "depthwise")
        out[f"{tf_path}/pointwise_kernel"] = ((*path, "pointwise", "kernel"), "identity")
        if module.pointwise.bias is not None:
            out[f"{tf_path}/bias"] = ((*path, "pointwise", "bias"), "identity")
    else:
        _conv(out, tf_path, path, module)


def _bn(out: dict, tf_path: str, path: Path) -> None:
    for tf_name, ours in BN_NAMES:
        out[f"{tf_path}/{tf_name}"] = ((*path, ours), "identity")


def _keras_numbered(out: dict, prefix: str, layers: list[tuple[Path, nnx.Module]],
                    start: int = 0) -> None:
    """Weighted layers of a Keras functional model, ``layer_with_weights-<i>`` in order from
    ``start`` (convs, else batch norms)."""
    for i, (path, module) in enumerate(layers, start=start):
        tf_path = f"{prefix}/layer_with_weights-{i}"
        if isinstance(module, nnx.Conv):
            _conv(out, tf_path, path, module)
        else:
            _bn(out, tf_path, path)


# --------------------------------------------------------------------------- backbones


def mobilenet_v2_layers(net: MobileNetV2, path: Path) -> list[tuple[Path, nnx.Module]]:
    """MobileNetV2's convolutions and batch norms in the order Keras applies them."""
    layers = [((*path, "conv_stem"), net.conv_stem), ((*path, "bn1"), net.bn1)]
    for i, stage in enumerate(net.blocks):
        for j, block in enumerate(stage):
            at = (*path, "blocks", i, j)
            if isinstance(block, DepthwiseSeparable):
                names = ("conv_dw", "bn1", "conv_pw", "bn2")
            elif isinstance(block, InvertedResidual):
                names = ("conv_pw", "bn1", "conv_dw", "bn2", "conv_pwl", "bn3")
            else:  # pragma: no cover - MobileNetV2 builds only these two
                raise TypeError(type(block))
            layers += [((*at, n), getattr(block, n)) for n in names]
    layers += [((*path, "conv_head"), net.conv_head), ((*path, "bn2"), net.bn2)]
    return layers


def mobilenet_v1_layers(net: MobileNetV1, path: Path) -> list[tuple[Path, nnx.Module]]:
    """MobileNetV1's convolutions and batch norms in Keras order: stem, then per block the
    depthwise conv + BN and the pointwise conv + BN."""
    layers = [((*path, "conv_stem"), net.conv_stem), ((*path, "bn1"), net.bn1)]
    for i, stage in enumerate(net.blocks):
        for j, block in enumerate(stage):
            at = (*path, "blocks", i, j)
            layers += [((*at, n), getattr(block, n)) for n in ("conv_dw", "bn1", "conv_pw", "bn2")]
    return layers


def resnet_layers(net: ResNet, path: Path) -> list[tuple[Path, nnx.Module]]:
    """ResNet's convolutions and batch norms in Keras ResNet's layer order: per bottleneck
    ``1_conv, 1_bn, 2_conv, 2_bn``, then the projection shortcut's conv before ``3_conv`` and
    its batch norm before ``3_bn`` (Keras orders layers by depth, the shortcut first)."""
    layers = [((*path, "conv1"), net.conv1), ((*path, "bn1"), net.bn1)]
    for stage in ("layer1", "layer2", "layer3", "layer4"):
        for j, block in enumerate(getattr(net, stage)):
            if not isinstance(block, Bottleneck):
                raise UnmappedModelError(
                    "no TF checkpoint names for ResNet basic blocks (resnet18/34): TF OD API "
                    "ResNets are bottleneck ResNets (50/101/152)")
            at = (*path, stage, j)
            layers += [((*at, n), getattr(block, n)) for n in ("conv1", "bn1", "conv2", "bn2")]
            if block.downsample is not None:
                layers += [((*at, "downsample", 0), block.downsample[0]),
                           ((*at, "conv3"), block.conv3),
                           ((*at, "downsample", 1), block.downsample[1]),
                           ((*at, "bn3"), block.bn3)]
            else:
                layers += [((*at, "conv3"), block.conv3), ((*at, "bn3"), block.bn3)]
    return layers


def efficientnet_layers(net: effnet.EfficientNet, path: Path) -> list[tuple[Path, nnx.Module]]:
    """EfficientNet's convolutions and batch norms in the Keras model's order: per block the
    expansion conv + BN (MBConv), depthwise conv + BN, squeeze-excitation reduce and expand,
    projection conv + BN."""
    layers = [((*path, "conv_stem"), net.conv_stem), ((*path, "bn1"), net.bn1)]
    for i, stage in enumerate(net.blocks):
        for j, block in enumerate(stage):
            at = (*path, "blocks", i, j)
            if isinstance(block, effnet.MBConv):
                names = ("conv_pw", "bn1", "conv_dw", "bn2", ("se", "conv_reduce"),
                         ("se", "conv_expand"), "conv_pwl", "bn3")
            else:
                names = ("conv_dw", "bn1", ("se", "conv_reduce"), ("se", "conv_expand"),
                         "conv_pw", "bn2")
            for name in names:
                parts = name if isinstance(name, tuple) else (name,)
                module = block
                for part in parts:
                    module = getattr(module, part)
                layers.append(((*at, *parts), module))
    return layers


# --------------------------------------------------------------------------- necks, heads


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
            _conv(out, f"{prefix}/node_input_blocks/{n}/0/1/0", (*at, "conv"), resample.conv.conv)
            _bn(out, f"{prefix}/node_input_blocks/{n}/0/1/1", (*at, "bn"))
        n += 1
    for c, cell in enumerate(neck.cell):
        for j, fnode in enumerate(cell.fnode):
            at = ("neck", "cell", c, "fnode", j)
            for k, offset in enumerate(fnode.combine.offsets):
                resample = fnode.combine.resample[str(offset)]
                if resample.conv is not None:
                    r = (*at, "combine", "resample", str(offset), "conv")
                    tf = f"{prefix}/node_input_blocks/{n}/{k}/1"
                    _conv(out, f"{tf}/0", (*r, "conv"), resample.conv.conv)
                    _bn(out, f"{tf}/1", (*r, "bn"))
            if fnode.combine.edge_weights is not None:
                out[f"{prefix}/node_combine_op/{n}/bifpn_combine_weights"] = (
                    (*at, "combine", "edge_weights"), "reshape")
            unit = fnode.after_combine.conv
            post = f"{prefix}/node_post_combine_block/{n}"
            if not hasattr(unit, "conv_dw"):
                raise UnmappedModelError("BiFPN with plain (not separable) node convs")
            conv_at = (*at, "after_combine", "conv")
            out[f"{post}/1/depthwise_kernel"] = ((*conv_at, "conv_dw", "kernel"), "depthwise")
            out[f"{post}/1/pointwise_kernel"] = ((*conv_at, "conv_pw", "kernel"), "identity")
            out[f"{post}/1/bias"] = ((*conv_at, "conv_pw", "bias"), "identity")
            _bn(out, f"{post}/2", (*conv_at, "bn"))
            n += 1



def _fpn(out: dict, neck: FPN, prefix: str) -> None:
    """The Keras FPN: ``_fpn_features_generator/top_layers/0`` (the top level's 1x1),
    ``residual_blocks/<k>/0`` and ``conv_layers/<k>/{0: conv, 1: BN}`` for the lower levels
    from the top down, ``_coarse_feature_layers/<k>/{0, 1}`` for the levels above."""
    gen = f"{prefix}/_fpn_features_generator"
    n = len(neck.backbone_levels)
    _conv(out, f"{gen}/top_layers/0", ("neck", "lateral", n - 1), neck.lateral[n - 1])
    for k in range(n - 1):
        i = n - 2 - k  # jaxdet lists the levels ascending
        _conv(out, f"{gen}/residual_blocks/{k}/0", ("neck", "lateral", i), neck.lateral[i])
        _conv_or_separable(out, f"{gen}/conv_layers/{k}/0", ("neck", "smoothing", i, "conv"),
                           neck.smoothing[i].conv)
        _bn(out, f"{gen}/conv_layers/{k}/1", ("neck", "smoothing", i, "norm"))
    for k, layer in enumerate(neck.extra):
        _conv_or_separable(out, f"{prefix}/_coarse_feature_layers/{k}/0",
                           ("neck", "extra", k, "conv"), layer.conv)
        _bn(out, f"{prefix}/_coarse_feature_layers/{k}/1", ("neck", "extra", k, "norm"))


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
                _bn(out, f"{prefix}/_base_tower_layers_for_heads/{tf_head}/{level}/{3 * i + 1}",
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
        _conv(out, f"{tf}/0", (*at, "reduce", "conv"), layer.reduce.conv)
        _bn(out, f"{tf}/1", (*at, "reduce", "norm"))
        _conv(out, f"{tf}/3", (*at, "downsample", "conv"), layer.downsample.conv)
        _bn(out, f"{tf}/4", (*at, "downsample", "norm"))


def _convolutional_box_predictor(out: dict, head: ConvolutionalBoxPredictor, prefix: str,
                                 background: bool) -> None:
    for level, predictor in enumerate(head.predictors):
        if len(predictor.tower) or predictor.box_predictor.depthwise is not None:
            raise UnmappedModelError("convolutional box predictor towers are not mapped yet")
        at = ("head", "predictors", level)
        box = f"{prefix}/_prediction_heads/box_encodings/{level}/_box_encoder_layers/0"
        _conv(out, box, (*at, "box_predictor", "conv"), predictor.box_predictor.conv)
        cls = (f"{prefix}/_prediction_heads/class_predictions_with_background/{level}/"
               "_class_predictor_layers/0")
        transform = "identity" if background else "drop_background"
        out[f"{cls}/kernel"] = ((*at, "class_predictor", "conv", "kernel"), transform)
        out[f"{cls}/bias"] = ((*at, "class_predictor", "conv", "bias"), transform)


# --------------------------------------------------------------------------- detectors


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
    _keras_numbered(out, f"{fe}/{keras_model}", layers)
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


def tf_unapplied(model: nnx.Module) -> Callable[[str], bool]:
    """Whether a TF object path is a variable the TF detector holds but never applies (so
    jaxdet has no place for it): what the TF OD API's Keras EfficientNet keeps after its
    level-5 endpoint (the last stage's later blocks, the classifier's top conv and BN)."""
    if not isinstance(model.backbone, effnet.EfficientNet):
        return lambda path: False
    n = len(efficientnet_layers(model.backbone, ()))
    pattern = re.compile(r"^model/_feature_extractor/(?:classification_backbone|_efficientnet)"
                         r"/layer_with_weights-(\d+)/")

    def unapplied(path: str) -> bool:
        match = pattern.match(path)
        return bool(match) and int(match.group(1)) >= n

    return unapplied


def variables_of(model: nnx.Module) -> Iterator[Path]:
    """Every Param and BatchStat path of ``model``."""
    for path, _ in nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat))):
        yield tuple(path)


__all__ = ["efficientnet_layers", "mobilenet_v1_layers", "mobilenet_v2_layers", "resnet_layers",
           "UnmappedModelError", "ssd_detector_map", "tf_unapplied", "to_ours", "variables_of"]
