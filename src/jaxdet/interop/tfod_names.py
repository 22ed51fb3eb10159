"""What every TF OD API (TF2) checkpoint name map shares: targets, transforms, Keras layer orders.

Each family's map (``tasks/<family>/tf_names.py``, asked through ``TaskFamily.tf_name_map``)
says where each tensor of a TF OD API detection checkpoint goes in its jaxdet detector; this
module holds what those maps are built from: the map's types, the transforms, the conv and
batch-norm entries, the backbones' Keras layer orders, and the variables TF holds but never
applies.

A TF2 checkpoint names a variable by its object path (``interop.tf_checkpoint``). The TF OD
API's Keras backbones are functional models, whose variables are numbered in layer order
(``classification_backbone/layer_with_weights-7/gamma``), so a backbone's map lists jaxdet's
convolutions and batch norms in the order the network applies them. The map is
``{tf object path: (jaxdet variable path, transform)}``; transforms (:func:`to_ours`):

* ``identity``: kernels (both HWIO), biases, batch-norm parameters and statistics;
* ``depthwise``: TF's depthwise kernel ``[kh, kw, C, 1]`` -> jaxdet's grouped ``[kh, kw, 1, C]``;
* ``column``: TF's column ``[k, 1]`` -> jaxdet's vector ``[k]`` (BiFPN fusion weights);
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
from jaxdet.models.layers import BatchNormParams

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
    if transform == "column":  # BiFPN fusion weights [k, 1] -> [k]
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


def to_tf(transform: str, array: np.ndarray, tf_shape: tuple[int, ...] | None = None
          ) -> np.ndarray:
    """A jaxdet variable in TF's layout, :func:`to_ours` undone. ``tf_shape``: the TF
    variable's shape where the transform alone does not give it (a ``drop_background`` class
    predictor whose TF model keeps the background logit: that column is written as zeros, the
    logit TF scores last and drops). ValueError for a transform it does not know."""
    array = np.asarray(array)
    if transform == "identity":
        return array
    if transform == "bgr_to_rgb":
        return array[:, :, ::-1, :]
    if transform == "depthwise":
        kh, kw, _, channels = array.shape
        return array.reshape(kh, kw, channels, 1)
    if transform == "column":
        return array.reshape(-1, 1)
    if transform == "drop_background":
        if tf_shape is None or tf_shape[-1] == array.shape[-1]:
            return array
        ours, total = array.shape[-1], tf_shape[-1]
        anchors = total - ours
        grouped = array.reshape(*array.shape[:-1], anchors, ours // anchors)
        background = np.zeros((*grouped.shape[:-1], 1), array.dtype)
        return np.concatenate([background, grouped], -1).reshape(*array.shape[:-1], total)
    raise ValueError(f"unknown transform {transform!r}")


def conv_targets(out: dict[str, Target], tf_path: str, path: Path, module: nnx.Conv) -> None:
    """Add to ``out`` the kernel (``depthwise_kernel`` for a grouped conv) and bias of the conv
    ``module`` at jaxdet ``path``, saved at the TF object path ``tf_path``."""
    depthwise = module.feature_group_count > 1
    out[f"{tf_path}/{'depthwise_kernel' if depthwise else 'kernel'}"] = (
        (*path, "kernel"), "depthwise" if depthwise else "identity")
    if module.bias is not None:
        out[f"{tf_path}/bias"] = ((*path, "bias"), "identity")


def bn_targets(out: dict[str, Target], tf_path: str, path: Path, scale: bool = True) -> None:
    """Add to ``out`` the batch norm at jaxdet ``path`` (:data:`BN_NAMES`), saved at the TF
    object path ``tf_path``; without ``scale`` (Keras ``scale=False``) TF holds no ``gamma``."""
    for tf_name, ours in BN_NAMES:
        if scale or tf_name != "gamma":
            out[f"{tf_path}/{tf_name}"] = ((*path, ours), "identity")


def keras_numbered_targets(out: dict[str, Target], prefix: str,
                           layers: list[tuple[Path, nnx.Module]], start: int = 0) -> None:
    """Add to ``out`` the weighted layers of a Keras functional model saved at ``prefix``,
    ``layer_with_weights-<i>`` in order from ``start`` (convs, else batch norms: those whose
    ``scale`` is no parameter map no ``gamma``)."""
    for i, (path, module) in enumerate(layers, start=start):
        tf_path = f"{prefix}/layer_with_weights-{i}"
        if isinstance(module, nnx.Conv):
            conv_targets(out, tf_path, path, module)
        else:
            bn_targets(out, tf_path, path, scale=isinstance(module.scale, nnx.Param))


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


# DeepMAC's tf.random.Generator state (its self-supervised training augmentations): no weight
_TRAINING_STATE = re.compile(r"^model/_self_supervised_rng/")


def tf_unapplied(model: nnx.Module) -> Callable[[str], bool]:
    """Whether a TF object path is a variable the TF detector holds but never applies (so
    jaxdet has no place for it): what the TF OD API's Keras EfficientNet keeps after its
    level-5 endpoint (the last stage's later blocks, the classifier's top conv and BN), and
    DeepMAC's random-generator state (``model/_self_supervised_rng``)."""
    if not isinstance(model.backbone, effnet.EfficientNet):
        return lambda path: bool(_TRAINING_STATE.match(path))
    n = len(efficientnet_layers(model.backbone, ()))
    pattern = re.compile(r"^model/_feature_extractor/(?:classification_backbone|_efficientnet)"
                         r"/layer_with_weights-(\d+)/")

    def unapplied(path: str) -> bool:
        if _TRAINING_STATE.match(path):
            return True
        match = pattern.match(path)
        return bool(match) and int(match.group(1)) >= n

    return unapplied


# The Keras EfficientNet's classifier after its last block: a 1x1 conv to 1280 channels (times
# the variant's width), its batch norm, and the 1000-class logits (a dense kernel and bias)
_EFFICIENTNET_TOP_CHANNELS = 1280
_EFFICIENTNET_CLASSES = 1000
# The whole Keras EfficientNet (the detector's feature extractor also tracks a sub-model up to
# its endpoints, ``_efficientnet``, sharing its first layers: the layers after the endpoints are
# the whole network's alone)
_KERAS_EFFICIENTNET = "model/_feature_extractor/classification_backbone"


def tf_unapplied_variables(model: nnx.Module) -> dict[str, np.ndarray]:
    """The variables a TF detector holds but never applies (:func:`tf_unapplied`), in TF's
    shapes, so that a checkpoint jaxdet writes binds every object of TF's model: for a Keras
    EfficientNet backbone the last stage's later blocks (jaxdet builds up to level 5's
    endpoint), the top conv and batch norm and the classifier's logits, numbered on from the
    blocks jaxdet builds. Kernels and biases are zeros, batch norms the identity (gamma and
    variance 1, beta and mean 0): TF never reads them. Empty for every other backbone."""
    net = getattr(model, "backbone", None)
    if not isinstance(net, effnet.EfficientNet):
        return {}
    # every block of the variant, shapes only (nothing drawn)
    full = nnx.eval_shape(lambda: effnet.EfficientNet(net.variant, batch_norm=BatchNormParams(),
                                                      rngs=nnx.Rngs(0)))
    applied = len(efficientnet_layers(net, ()))
    layers = efficientnet_layers(full, ())
    targets: dict[str, Target] = {}
    keras_numbered_targets(targets, _KERAS_EFFICIENTNET, layers[applied:], start=applied)
    out = {}
    for tf_path, (path, transform) in targets.items():
        shape = _shape_at(full, path)
        ones = path[-1] in ("scale", "var")
        value = np.ones(shape, np.float32) if ones else np.zeros(shape, np.float32)
        out[tf_path] = to_tf(transform, value)
    width, _ = effnet.VARIANTS[net.variant]
    top = effnet.make_divisible(_EFFICIENTNET_TOP_CHANNELS * width, 8)
    last = _shape_at(full, (*layers[-1][0], "mean"))[0]  # the last block's output
    n, prefix = len(layers), _KERAS_EFFICIENTNET
    out[f"{prefix}/layer_with_weights-{n}/kernel"] = np.zeros((1, 1, last, top), np.float32)
    for tf_name, _ in BN_NAMES:
        fill = np.ones if tf_name in ("gamma", "moving_variance") else np.zeros
        out[f"{prefix}/layer_with_weights-{n + 1}/{tf_name}"] = fill((top,), np.float32)
    out[f"{prefix}/layer_with_weights-{n + 2}/kernel"] = np.zeros(
        (top, _EFFICIENTNET_CLASSES), np.float32)
    out[f"{prefix}/layer_with_weights-{n + 2}/bias"] = np.zeros(_EFFICIENTNET_CLASSES,
                                                                np.float32)
    return out


def _shape_at(model: nnx.Module, path: Path) -> tuple[int, ...]:
    """The shape of the variable at ``path`` (a tuple of attribute names and indices) in
    ``model``, abstract or built."""
    node = model
    for part in path:
        node = node[part] if isinstance(part, int) else getattr(node, part)
    return tuple(node.shape)


def variables_of(model: nnx.Module) -> Iterator[Path]:
    """Every Param and BatchStat path of ``model``."""
    for path, _ in nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat))):
        yield tuple(path)


__all__ = ["BN_NAMES", "Path", "Target", "UnmappedModelError", "bn_targets", "conv_targets",
           "efficientnet_layers", "keras_numbered_targets", "mobilenet_v1_layers",
           "mobilenet_v2_layers", "resnet_layers", "tf_unapplied", "tf_unapplied_variables",
           "to_ours", "to_tf",
           "variables_of"]
