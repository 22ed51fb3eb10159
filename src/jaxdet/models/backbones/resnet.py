"""ResNet-18/34/50/101/152 (v1.5: stride on the 3x3 conv), laid out like torchvision's ``resnet``.

Attribute names mirror torchvision (``conv1, bn1, layer1..layer4``; each Bottleneck has
``conv1, bn1, conv2, bn2, conv3, bn3``, each BasicBlock ``conv1, bn1, conv2, bn2``, and
``downsample = [conv, bn]``), so
the torch name maps take a torchvision ``state_dict`` one-to-one.
There is no ``fc``: the model returns feature maps. ``width_multiplier`` < 1 gives narrow
variants (no torchvision counterpart) for small problems; 1.0 is the standard network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import jax
from flax import nnx

from jaxdet.core.portable import reduce_window_2d
from jaxdet.models import remat
from jaxdet.models.layers import (
    ActivationName,
    BatchNormParams,
    Padding,
    activation,
    conv,
    max_pool_symmetric,
)
from jaxdet.models.layers import batch_norm as make_batch_norm

STAGE_BLOCKS: dict[int, tuple[int, int, int, int]] = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}
EXPANSION = 4
BASIC_DEPTHS = (18, 34)


class BasicBlock(nnx.Module):
    """3x3 (stride here) -> 3x3, with a projection shortcut when needed (ResNet-18/34)."""

    expansion = 1

    def __init__(
        self,
        in_channels: int,
        width: int,
        stride: int,
        *,
        batch_norm_params: BatchNormParams,
        act: Callable[[jax.Array], jax.Array] = jax.nn.relu,
        conv_bias: bool = False,
        dtype,
        rngs: nnx.Rngs,
    ):
        bn = lambda c: make_batch_norm(c, batch_norm_params, dtype, rngs)  # noqa: E731
        self.act = act
        self.conv1 = conv(in_channels, width, 3, stride, use_bias=conv_bias, dtype=dtype,
                          rngs=rngs)
        self.bn1 = bn(width)
        self.conv2 = conv(width, width, 3, use_bias=conv_bias, dtype=dtype, rngs=rngs)
        self.bn2 = bn(width)
        if stride != 1 or in_channels != width:
            self.downsample = nnx.List(
                [conv(in_channels, width, 1, stride, use_bias=conv_bias, dtype=dtype,
                      rngs=rngs), bn(width)]
            )
        else:
            self.downsample = None

    def __call__(self, x: jax.Array) -> jax.Array:
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            x = self.downsample[1](self.downsample[0](x))
        return self.act(out + x)


class Bottleneck(nnx.Module):
    """1x1 -> 3x3 (stride here, v1.5; or in the 1x1 with ``stride_in_1x1``, TF's Keras ResNet
    v1) -> 1x1 x4, with a projection shortcut when needed."""

    def __init__(
        self,
        in_channels: int,
        width: int,
        stride: int,
        *,
        batch_norm_params: BatchNormParams,
        act: Callable[[jax.Array], jax.Array] = jax.nn.relu,
        stride_in_1x1: bool = False,
        conv_bias: bool = False,
        dtype,
        rngs: nnx.Rngs,
    ):
        out_channels = width * EXPANSION
        bn = lambda c: make_batch_norm(c, batch_norm_params, dtype, rngs)  # noqa: E731
        self.act = act
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = conv(in_channels, width, 1, stride_1x1, use_bias=conv_bias, dtype=dtype,
                          rngs=rngs)
        self.bn1 = bn(width)
        self.conv2 = conv(width, width, 3, stride_3x3, use_bias=conv_bias, dtype=dtype,
                          rngs=rngs)
        self.bn2 = bn(width)
        self.conv3 = conv(width, out_channels, 1, use_bias=conv_bias, dtype=dtype, rngs=rngs)
        self.bn3 = bn(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.downsample = nnx.List(
                [conv(in_channels, out_channels, 1, stride, use_bias=conv_bias, dtype=dtype,
                      rngs=rngs),
                 bn(out_channels)]
            )
        else:
            self.downsample = None

    def __call__(self, x: jax.Array) -> jax.Array:
        out = self.act(self.bn1(self.conv1(x)))
        out = self.act(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            x = self.downsample[1](self.downsample[0](x))
        return self.act(out + x)


class ResNet(nnx.Module):
    """ResNet backbone. ``__call__(x[B,H,W,3]) -> {2: stride 4, 3: stride 8, 4: stride 16,
    5: stride 32}``; ``out_channels = {2: 256, 3: 512, 4: 1024, 5: 2048}`` for 50/101/152
    and ``{2: 64, 3: 128, 4: 256, 5: 512}`` for 18/34 (times ``width_multiplier``).

    Weights imported from torchvision reproduce its outputs when ``batch_norm`` uses
    torchvision's ``epsilon=1e-5``. ``conv_bias``: every convolution has a bias, as in
    ``tf.keras.applications.ResNet50`` (the TF OD API's CenterNet feature extractors).
    """

    def __init__(
        self,
        depth: Literal[18, 34, 50, 101, 152],
        *,
        batch_norm: BatchNormParams,
        width_multiplier: float = 1.0,
        activation_name: ActivationName = "relu",
        padding: Padding = "symmetric",
        stride_in_1x1: bool = False,
        conv_bias: bool = False,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        if depth not in STAGE_BLOCKS:
            raise ValueError(f"ResNet depth must be one of {sorted(STAGE_BLOCKS)}, got {depth}")
        self.depth = depth
        self.act = activation(activation_name)
        if stride_in_1x1 and depth in BASIC_DEPTHS:
            raise ValueError(f"stride_in_1x1 needs a bottleneck ResNet, not ResNet-{depth}")
        self.padding = padding
        block_cls = BasicBlock if depth in BASIC_DEPTHS else Bottleneck
        extra = {"stride_in_1x1": True} if stride_in_1x1 else {}
        if conv_bias:
            extra["conv_bias"] = True
        expansion = 1 if depth in BASIC_DEPTHS else EXPANSION
        base = max(8, int(round(64 * width_multiplier)))
        bn_params = batch_norm
        self.conv1 = conv(3, base, 7, 2, use_bias=conv_bias, dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(base, bn_params, dtype, rngs)
        in_channels = base
        stages = []
        self.out_channels: dict[int, int] = {}
        for i, n_blocks in enumerate(STAGE_BLOCKS[depth]):
            width = base * 2**i
            blocks = []
            for j in range(n_blocks):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(
                    block_cls(in_channels, width, stride, batch_norm_params=bn_params,
                              act=self.act, dtype=dtype, rngs=rngs, **extra)
                )
                in_channels = width * expansion
            stages.append(nnx.List(blocks))
            self.out_channels[i + 2] = in_channels
        self.layer1, self.layer2, self.layer3, self.layer4 = stages

    def __call__(self, x: jax.Array) -> dict[int, jax.Array]:
        x = self.act(self.bn1(self.conv1(x)))
        if self.padding == "same":  # TF's SAME max pool (the TF OD API's Keras ResNet)
            x = reduce_window_2d(x, -float("inf"), jax.lax.max, (3, 3), (2, 2), "SAME")
        else:
            x = max_pool_symmetric(x, 3, 2)
        features = {}
        for level, blocks in self.blocks_by_level().items():
            x = remat.run_blocks(blocks, x)
            features[level] = x
        return features

    def blocks_by_level(self) -> dict[int, list[nnx.Module]]:
        """The residual blocks leading to each level: ``{2: layer1, ..., 5: layer4}``."""
        stages = (self.layer1, self.layer2, self.layer3, self.layer4)
        return remat.blocks_by_level(stages, {2: 0, 3: 1, 4: 2, 5: 3})
