"""Pre-activation ResNet-v2 50/101/152, laid out like ``tf.keras.applications.ResNet50V2``
(the TF OD API's CenterNet ``resnet_v2_50`` / ``resnet_v2_101`` feature extractors use it).

Keras' v2 differs from v1 beyond the pre-activation:

* stem: 7x7/2 conv with a bias and *no* BatchNorm or ReLU, then a 3x3/2 max pool over a
  zero-padded input (padded cells count as 0).
* each stage strides in its *last* block (``stack2``; the last stage not at all), so the
  stride-32 stage ``conv5`` keeps stride 32.
* a block: ``preact = relu(BN(x))``; ``1x1 (no bias) -> BN -> ReLU -> 3x3/s (no bias) -> BN ->
  ReLU -> 1x1 (bias)`` on ``preact``, plus the shortcut: a 1x1 conv with a bias on
  ``preact`` in each stage's first block, else ``x`` itself (subsampled by ``s``).
* BatchNorm epsilon 1.001e-5 (Keras' momentum 0.99); the Keras network ends in a
  ``post_bn`` + ReLU that the TF OD API's extractor does not use (it reads
  ``conv5_block3_out``), so it is not built here.

Attribute names: ``conv1``; ``stages[i][j]`` (Keras ``conv{i+2}_block{j+1}``) with
``preact_bn, shortcut (conv or None), conv1, bn1, conv2, bn2, conv3``.
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.core.portable import reduce_window_2d
from jaxdet.models import remat
from jaxdet.models.layers import BatchNormParams, conv
from jaxdet.models.layers import batch_norm as make_batch_norm
from jaxdet.models.thin_maps import gather_thin_rows

STAGE_BLOCKS_V2: dict[int, tuple[int, int, int, int]] = {
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}


def max_pool_zero_padded(x: jax.Array, window: int = 3, stride: int = 2) -> jax.Array:
    """Keras ``ZeroPadding2D(window // 2)`` + VALID ``MaxPooling2D``: padded cells are 0."""
    p = window // 2
    x = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    return gather_thin_rows(reduce_window_2d(x, -jnp.inf, jax.lax.max, (window, window),
                                             (stride, stride), "VALID"))


class PreActBottleneck(nnx.Module):
    """Keras ``block2``: ``shortcut + conv3(relu(bn2(conv2(relu(bn1(conv1(preact)))))))``
    with ``preact = relu(preact_bn(x))``; [B, H, W, C] -> [B, H/s, W/s, 4 * width]."""

    def __init__(self, in_ch: int, width: int, stride: int, *, conv_shortcut: bool,
                 bn: BatchNormParams, dtype, rngs: nnx.Rngs):
        out_ch = 4 * width
        self.stride = stride
        self.preact_bn = make_batch_norm(in_ch, bn, dtype, rngs)
        self.shortcut = (conv(in_ch, out_ch, 1, stride, use_bias=True, dtype=dtype, rngs=rngs)
                         if conv_shortcut else None)
        self.conv1 = conv(in_ch, width, 1, dtype=dtype, rngs=rngs)
        self.bn1 = make_batch_norm(width, bn, dtype, rngs)
        self.conv2 = conv(width, width, 3, stride, dtype=dtype, rngs=rngs)
        self.bn2 = make_batch_norm(width, bn, dtype, rngs)
        self.conv3 = conv(width, out_ch, 1, use_bias=True, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        preact = jax.nn.relu(self.preact_bn(x))
        if self.shortcut is not None:
            shortcut = self.shortcut(preact)
        else:
            shortcut = x[:, ::self.stride, ::self.stride] if self.stride > 1 else x
        y = jax.nn.relu(self.bn1(self.conv1(preact)))
        y = jax.nn.relu(self.bn2(self.conv2(y)))
        return shortcut + self.conv3(y)


class ResNetV2(nnx.Module):
    """``__call__(x [B, H, W, 3]) -> {2: stride 4, 3: stride 8, 4: stride 16, 5: stride 32}``,
    the last map at each stride: ``conv2_block2_out`` (256), ``conv3_block3_out`` (512),
    ``conv4_block{n-1}_out`` (1024), ``conv5_block3_out`` (2048, what the TF OD API's CenterNet
    extractor reads). Maps are the raw block sums (pre-activation: no BN / ReLU after them).
    """

    def __init__(self, depth: Literal[50, 101, 152], *, batch_norm: BatchNormParams,
                 dtype=None, rngs: nnx.Rngs):
        if depth not in STAGE_BLOCKS_V2:
            raise ValueError(f"ResNet-v2 depth must be one of {sorted(STAGE_BLOCKS_V2)}, got "
                             f"{depth}")
        self.depth = depth
        self.conv1 = conv(3, 64, 7, 2, use_bias=True, dtype=dtype, rngs=rngs)
        in_ch, stages = 64, []
        for i, n in enumerate(STAGE_BLOCKS_V2[depth]):
            width = 64 * 2**i
            blocks = []
            for j in range(n):
                stride = 2 if (j == n - 1 and i < 3) else 1
                blocks.append(PreActBottleneck(in_ch, width, stride, conv_shortcut=j == 0,
                                               bn=batch_norm, dtype=dtype, rngs=rngs))
                in_ch = 4 * width
            stages.append(nnx.List(blocks))
        self.stages = nnx.List(stages)
        self.out_channels = {2: 256, 3: 512, 4: 1024, 5: 2048}

    def blocks_by_level(self) -> dict[int, list[nnx.Module]]:
        """The blocks leading to each level: a stage's last (strided) block starts the next
        level, so level 2 is ``conv2``'s blocks but the last, level 5 ``conv4``'s last and
        all of ``conv5``."""
        grouped: dict[int, list[nnx.Module]] = {2: [], 3: [], 4: [], 5: []}
        for i, stage in enumerate(self.stages):
            blocks = list(stage)
            if i < 3:
                grouped[i + 2].extend(blocks[:-1])
                grouped[i + 3].append(blocks[-1])
            else:
                grouped[5].extend(blocks)
        return grouped

    def __call__(self, x: jax.Array) -> dict[int, jax.Array]:
        x = max_pool_zero_padded(self.conv1(x))
        features = {}
        for level, blocks in self.blocks_by_level().items():
            x = remat.run_blocks(blocks, x)
            features[level] = x
        return features
