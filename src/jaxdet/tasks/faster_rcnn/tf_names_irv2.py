"""Where each tensor of a TF OD API (TF2) Inception-ResNet-v2 Faster / Mask R-CNN checkpoint
goes in jaxdet (``faster_rcnn_inception_resnet_v2_keras``, e.g. the zoo's
``mask_rcnn_inception_resnet_v2_1024x1024_coco17_gpu-8``).

TF splits one Keras ``InceptionResNetV2`` at ``block17_20_ac`` into two functional models,
each numbering its own weighted layers from 0 (``layer_with_weights-<i>``):

* ``model/_feature_extractor_for_proposal_features``: the stem, ``mixed_5b``, 10 ``block35``,
  ``mixed_6a``, 20 ``block17``;
* ``model/_feature_extractor_for_box_classifier_features``: ``mixed_7a``, 10 ``block8``,
  ``conv_7b``.

A Keras functional model lists its layers by decreasing depth (the longest path to the model's
output), ties in the order a depth-first walk from the output meets them, which visits a
concatenation's inputs in order. So blocks come one after the other, and inside a block
(:func:`block_layers`) the units of all branches are interleaved by their distance to the
block's concatenation: the farthest first; at one distance, every branch's conv (branch
order), then every branch's batch norm; a residual block's ``_conv`` (1x1 with bias, no norm)
last. jaxdet's batch norms have no ``scale`` (TF: ``scale=False``), so TF holds no ``gamma``.

The RPN and box predictor are named as in the ResNet variant (``tf_names``); Mask R-CNN's
``MaskRCNNMaskHead`` (:func:`mask_head_targets`) is Keras layers in one list
``_mask_predictor_layers``: per conv ``MaskPredictor_conv2d_<i>``, its (identity) batch norm
and its activation, then the ``MaskPredictor_last_conv2d``; with ``convolve_then_upsample``
the upsampling Lambda, ``MaskPredictor_upsample_conv2d``, its batch norm and activation come
before the last conv. Only the convs hold variables.
"""

from __future__ import annotations

from flax import nnx

from jaxdet.interop.tfod_names import Path, Target, conv_targets, keras_numbered_targets
from jaxdet.models.backbones.inception_resnet_v2 import (
    ConvBN,
    InceptionResNetV2,
    Mixed,
    ResidualBlock,
)
from jaxdet.tasks.faster_rcnn.model import MaskHead

PREFIX = "model"
PROPOSAL = f"{PREFIX}/_feature_extractor_for_proposal_features"
BOX_CLASSIFIER = f"{PREFIX}/_feature_extractor_for_box_classifier_features"
MASK_LAYERS = (f"{PREFIX}/_mask_rcnn_box_predictor/_third_stage_heads/mask_predictions/"
               "_mask_predictor_layers")

Layers = list[tuple[Path, nnx.Module]]


def unit_layers(path: Path, unit: ConvBN) -> Layers:
    """A Keras ``conv2d_bn``'s weighted layers: its conv, then its batch norm."""
    return [((*path, "conv"), unit.conv), ((*path, "norm"), unit.norm)]


def block_layers(path: Path, block: Mixed | ResidualBlock) -> Layers:
    """A ``mixed_*`` or ``block*`` layer's convs and batch norms in Keras's order (module
    docstring): by distance to the concatenation (farthest first), per distance the branches'
    convs then their batch norms (branch order, ``mixed_5b``'s pool conv last), then a residual
    block's 1x1 ``up`` conv."""
    branches: list[list[tuple[Path, ConvBN]]] = [
        [((*path, "branches", i, j), unit) for j, unit in enumerate(branch)]
        for i, branch in enumerate(block.branches)]
    if isinstance(block, Mixed) and block.pool_conv is not None:
        branches.append([((*path, "pool_conv"), block.pool_conv)])
    layers: Layers = []
    for distance in range(max(len(b) for b in branches), 0, -1):
        units = [b[len(b) - distance] for b in branches if len(b) >= distance]
        layers += [((*at, "conv"), unit.conv) for at, unit in units]
        layers += [((*at, "norm"), unit.norm) for at, unit in units]
    if isinstance(block, ResidualBlock):
        layers.append(((*path, "up"), block.up))
    return layers


def irv2_layers(net: InceptionResNetV2, path: Path) -> tuple[Layers, Layers]:
    """(the proposal model's, the box classifier model's) weighted layers in Keras's order."""
    first: Layers = []
    for i, unit in enumerate(net.stem):
        first += unit_layers((*path, "stem", i), unit)
    first += block_layers((*path, "mixed_5b"), net.mixed_5b)
    for i, block in enumerate(net.block35):
        first += block_layers((*path, "block35", i), block)
    first += block_layers((*path, "mixed_6a"), net.mixed_6a)
    for i, block in enumerate(net.block17):
        first += block_layers((*path, "block17", i), block)
    second = block_layers((*path, "mixed_7a"), net.mixed_7a)
    for i, block in enumerate(net.block8):
        second += block_layers((*path, "block8", i), block)
    second += unit_layers((*path, "conv_7b"), net.conv_7b)
    return first, second


def irv2_backbone_targets(out: dict[str, Target], net: InceptionResNetV2,
                          path: Path = ("backbone",)) -> None:
    """Add to ``out`` the backbone's two Keras models (``PROPOSAL``, ``BOX_CLASSIFIER``);
    its scale-less batch norms map ``beta``, ``moving_mean`` and ``moving_variance`` only."""
    first, second = irv2_layers(net, path)
    for prefix, layers in ((PROPOSAL, first), (BOX_CLASSIFIER, second)):
        keras_numbered_targets(out, prefix, layers)


def mask_head_targets(out: dict[str, Target], head: MaskHead,
                      path: Path = ("mask_head",)) -> None:
    """Add to ``out`` :class:`MaskHead`'s convs at their places in TF's
    ``_mask_predictor_layers`` (module docstring: conv, batch norm, activation per conv)."""
    index = 0
    for i, layer in enumerate(head.convs):
        conv_targets(out, f"{MASK_LAYERS}/{index}", (*path, "convs", i), layer)
        index += 3
    if head.upsample_conv is not None:  # after the nearest-neighbour upsampling Lambda
        conv_targets(out, f"{MASK_LAYERS}/{index + 1}", (*path, "upsample_conv"),
                     head.upsample_conv)
        index += 4
    conv_targets(out, f"{MASK_LAYERS}/{index}", (*path, "last"), head.last)


__all__ = ["block_layers", "irv2_backbone_targets", "irv2_layers", "mask_head_targets",
           "unit_layers"]
