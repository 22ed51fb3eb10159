"""The Inception-ResNet-v2 / Mask R-CNN TF name map (``tasks.faster_rcnn.tf_names_irv2``):
Keras's layer order inside a block and the mask head's layer indices, by hand. (The whole
map against TF's checkpoint: ``test_tf_detectors``' names-only fixture; against TF's
detections: ``benchmarks/accuracy/tfod_parity_table.py``.)"""

from __future__ import annotations

from flax import nnx

from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.backbones.inception_resnet_v2 import (
    BLOCK35,
    MIXED_5B,
    MIXED_6A,
    TF_BATCH_NORM,
    Mixed,
    ResidualBlock,
)
from jaxdet.tasks.faster_rcnn.model import MaskHead
from jaxdet.tasks.faster_rcnn.tf_names_irv2 import MASK_LAYERS, block_layers, mask_head_targets


def _names(layers) -> list[str]:
    return [".".join(map(str, path[1:])) for path, _ in layers]


def test_a_residual_block_interleaves_its_branches_by_distance_to_the_concat():
    block = abstract_build(lambda: ResidualBlock(320, BLOCK35, 0.17, batch_norm=TF_BATCH_NORM,
                                                 rngs=model_rngs(0)))
    # branch lengths 1, 2, 3: distance 3 (branch 2), 2 (branches 1, 2), 1 (all), then "up"
    assert _names(block_layers(("b",), block)) == [
        "branches.2.0.conv", "branches.2.0.norm",
        "branches.1.0.conv", "branches.2.1.conv", "branches.1.0.norm", "branches.2.1.norm",
        "branches.0.0.conv", "branches.1.1.conv", "branches.2.2.conv",
        "branches.0.0.norm", "branches.1.1.norm", "branches.2.2.norm", "up"]


def test_mixed_layers_put_the_pool_conv_last_among_the_nearest_units():
    mixed_5b = abstract_build(lambda: Mixed(192, MIXED_5B, pool_channels=64,
                                            batch_norm=TF_BATCH_NORM, rngs=model_rngs(0)))
    names = _names(block_layers(("m",), mixed_5b))
    assert names[:2] == ["branches.2.0.conv", "branches.2.0.norm"]
    assert names[-8:] == ["branches.0.0.conv", "branches.1.1.conv", "branches.2.2.conv",
                          "pool_conv.conv", "branches.0.0.norm", "branches.1.1.norm",
                          "branches.2.2.norm", "pool_conv.norm"]
    mixed_6a = abstract_build(lambda: Mixed(320, MIXED_6A, batch_norm=TF_BATCH_NORM,
                                            rngs=model_rngs(0)))
    assert _names(block_layers(("m",), mixed_6a)) == [
        "branches.1.0.conv", "branches.1.0.norm", "branches.1.1.conv", "branches.1.1.norm",
        "branches.0.0.conv", "branches.1.2.conv", "branches.0.0.norm", "branches.1.2.norm"]


def _head(**kwargs) -> MaskHead:
    return abstract_build(lambda: MaskHead(1536, 90, mask_height=33, mask_width=33, depth=256,
                                           num_conv_layers=4, rngs=nnx.Rngs(0), **kwargs))


def test_the_mask_head_convs_sit_every_third_keras_layer():
    out = {}
    mask_head_targets(out, _head())
    assert sorted(out) == sorted(f"{MASK_LAYERS}/{i}/{leaf}" for i in (0, 3, 6, 9)
                                 for leaf in ("kernel", "bias"))
    assert out[f"{MASK_LAYERS}/9/kernel"] == (("mask_head", "last", "kernel"), "identity")
    out = {}
    mask_head_targets(out, _head(convolve_then_upsample=True, upsample=(3, 3)))
    # 3 x (conv, bn, act), the upsampling Lambda, the upsample conv, bn, act, the last conv
    assert out[f"{MASK_LAYERS}/10/kernel"][0] == ("mask_head", "upsample_conv", "kernel")
    assert out[f"{MASK_LAYERS}/13/kernel"][0] == ("mask_head", "last", "kernel")
