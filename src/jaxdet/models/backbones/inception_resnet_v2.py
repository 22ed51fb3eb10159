"""Inception-ResNet-v2 as the TF OD API's ``faster_rcnn_inception_resnet_v2_keras`` builds it.

That feature extractor wraps ``tf.keras.applications.InceptionResNetV2`` (``include_top=False``)
with ``align_feature_maps=True`` and ``output_stride=16``, and splits it at ``block17_20_ac``:

* :meth:`InceptionResNetV2.first_stage`: ``[B, H, W, 3]`` -> stem -> ``mixed_5b`` -> 10
  ``block35`` -> ``mixed_6a`` -> 20 ``block17`` -> ``[B, ceil(H/16), ceil(W/16), 1088]``;
* :meth:`InceptionResNetV2.box_classifier`: crops ``[N, h, w, 1088]`` -> ``mixed_7a`` -> 10
  ``block8`` -> ``conv_7b`` -> ``[N, ceil(h/2), ceil(w/2), 1536]``.

What the TF OD API changes in the Keras network:

* ``align_feature_maps``: every convolution and max pool is TF ``SAME`` (the Keras network
  has ``VALID`` ones in the stem and the reductions), so each stride 2 halves sizes rounding up.
* ``output_stride=16`` changes nothing: the Keras network already runs the ``block17`` repeats
  at stride 16 (only ``output_stride=8`` would remove the ``mixed_6a`` strides and dilate).
* Batch norm everywhere without ``scale`` (gamma fixed at 1, only beta is learned), as the
  Keras application asks and ``_LayersOverride`` (``batchnorm_scale=False``) keeps; TF uses
  momentum 0.9997 and epsilon 1e-3 (:data:`TF_BATCH_NORM`).

Every ``conv2d_bn`` unit is a :class:`ConvBN` (conv without bias, scale-less batch norm,
ReLU); each residual block ends with a 1x1 conv with bias and no norm (``blockN_i_conv``),
adds ``scale`` times it to its input (0.17, 0.1, 0.2; 1.0 for the last ``block8``) and applies
ReLU (not after the last ``block8``). Kernels are Glorot-uniform, biases zero (Keras defaults).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.core.portable import reduce_window_2d
from jaxdet.models import initializers, remat
from jaxdet.models.layers import BatchNorm, BatchNormParams, conv

TF_BATCH_NORM = BatchNormParams(momentum=0.9997, epsilon=1e-3)
glorot_uniform = initializers.variance_scaling(1.0, "fan_avg", "uniform")

# A branch: its conv2d_bn units in order, each (out channels, kernel, stride).
Unit = tuple[int, int | tuple[int, int], int]
Branch = Sequence[Unit]

MIXED_5B: tuple[Branch, ...] = (
    ((96, 1, 1),), ((48, 1, 1), (64, 5, 1)), ((64, 1, 1), (96, 3, 1), (96, 3, 1)),
)
MIXED_6A: tuple[Branch, ...] = (((384, 3, 2),), ((256, 1, 1), (256, 3, 1), (384, 3, 2)))
MIXED_7A: tuple[Branch, ...] = (
    ((256, 1, 1), (384, 3, 2)), ((256, 1, 1), (288, 3, 2)),
    ((256, 1, 1), (288, 3, 1), (320, 3, 2)),
)
BLOCK35: tuple[Branch, ...] = (
    ((32, 1, 1),), ((32, 1, 1), (32, 3, 1)), ((32, 1, 1), (48, 3, 1), (64, 3, 1)),
)
BLOCK17: tuple[Branch, ...] = (((192, 1, 1),), ((128, 1, 1), (160, (1, 7), 1), (192, (7, 1), 1)))
BLOCK8: tuple[Branch, ...] = (((192, 1, 1),), ((192, 1, 1), (224, (1, 3), 1), (256, (3, 1), 1)))


@dataclass(frozen=True)
class UnitScale:
    """The fixed scale of a scale-less batch norm: reading ``[...]`` gives ones ``[C]``."""

    num_features: int

    def __getitem__(self, index) -> np.ndarray:
        return np.ones(self.num_features, np.float32)


class ScalelessBatchNorm(BatchNorm):
    """:class:`BatchNorm` with TF's ``scale=False``: ``bias``, ``mean`` and ``var`` only.

    ``scale`` is a static :class:`UnitScale` instead of a parameter, so every mode of
    :class:`BatchNorm` (training, grouped, eval, frozen) runs unchanged with gamma = 1.
    """

    def __init__(self, num_features: int, params: BatchNormParams, *, dtype=None,
                 rngs: nnx.Rngs):
        super().__init__(num_features, frozen=params.frozen, momentum=params.momentum,
                         epsilon=params.epsilon, num_groups=params.num_groups, dtype=dtype,
                         rngs=rngs)
        self.scale = nnx.static(UnitScale(num_features))


class ConvBN(nnx.Module):
    """Keras ``conv2d_bn``: conv (TF ``SAME``, no bias) -> scale-less batch norm -> ReLU.
    Attributes ``conv``, ``norm``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int = 1, *, batch_norm: BatchNormParams, dtype=None, rngs: nnx.Rngs):
        self.conv = conv(in_channels, out_channels, kernel_size, stride, padding="same",
                         kernel_init=glorot_uniform, dtype=dtype, rngs=rngs)
        self.norm = ScalelessBatchNorm(out_channels, batch_norm, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.relu(self.norm(self.conv(x)))


def _branches(in_channels: int, specs: Sequence[Branch], **kwargs) -> nnx.List:
    """One ``nnx.List`` of :class:`ConvBN` per branch of ``specs``, in Keras's order."""
    branches = []
    for spec in specs:
        units, c = [], in_channels
        for out, kernel, stride in spec:
            units.append(ConvBN(c, out, kernel, stride, **kwargs))
            c = out
        branches.append(nnx.List(units))
    return nnx.List(branches)


def _run(branches: nnx.List, x: jax.Array) -> list[jax.Array]:
    """Each branch's output for input ``x``."""
    outs = []
    for branch in branches:
        y = x
        for unit in branch:
            y = unit(y)
        outs.append(y)
    return outs


def max_pool_same(x: jax.Array) -> jax.Array:
    """TF's 3x3 stride-2 ``SAME`` max pool: ``[B, H, W, C] -> [B, ceil(H/2), ceil(W/2), C]``."""
    return reduce_window_2d(x, -float("inf"), jax.lax.max, (3, 3), (2, 2), "SAME")


def avg_pool_same(x: jax.Array) -> jax.Array:
    """TF's 3x3 stride-1 ``SAME`` average pool, padded cells left out of each mean."""
    total = reduce_window_2d(x, 0.0, jax.lax.add, (3, 3), (1, 1), "SAME")
    ones = jnp.ones((1, x.shape[1], x.shape[2], 1), x.dtype)
    return total / reduce_window_2d(ones, 0.0, jax.lax.add, (3, 3), (1, 1), "SAME")


class Mixed(nnx.Module):
    """A Keras ``mixed_*`` layer: the branches and a pool branch, concatenated on channels.
    ``mixed_5b`` (``pool_channels`` set): 3x3 stride-1 average pool -> 1x1 :class:`ConvBN`
    (``pool_conv``); the reductions ``mixed_6a`` / ``mixed_7a``: 3x3 stride-2 max pool."""

    def __init__(self, in_channels: int, specs: Sequence[Branch], *,
                 pool_channels: int | None = None, batch_norm: BatchNormParams, dtype=None,
                 rngs: nnx.Rngs):
        kwargs = {"batch_norm": batch_norm, "dtype": dtype, "rngs": rngs}
        self.branches = _branches(in_channels, specs, **kwargs)
        self.pool_conv = (None if pool_channels is None
                          else ConvBN(in_channels, pool_channels, 1, **kwargs))
        self.out_channels = (sum(spec[-1][0] for spec in specs)
                             + (in_channels if pool_channels is None else pool_channels))

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.pool_conv is None:
            pooled = max_pool_same(x)
        else:
            pooled = self.pool_conv(avg_pool_same(x))
        return jnp.concatenate([*_run(self.branches, x), pooled], axis=-1)


class ResidualBlock(nnx.Module):
    """Keras ``inception_resnet_block``: ``x + scale * up(concat(branches(x)))`` then ReLU
    (``activate``); ``up`` is a 1x1 conv back to ``channels`` with bias and no norm."""

    def __init__(self, channels: int, specs: Sequence[Branch], scale: float, *,
                 activate: bool = True, batch_norm: BatchNormParams, dtype=None,
                 rngs: nnx.Rngs):
        self.branches = _branches(channels, specs, batch_norm=batch_norm, dtype=dtype, rngs=rngs)
        mixed = sum(spec[-1][0] for spec in specs)
        self.up = conv(mixed, channels, 1, use_bias=True, kernel_init=glorot_uniform,
                       dtype=dtype, rngs=rngs)
        self.scale = scale
        self.activate = activate

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.scale * self.up(jnp.concatenate(_run(self.branches, x), axis=-1))
        return jax.nn.relu(x) if self.activate else x


def _repeat(channels: int, specs: Sequence[Branch], repeats: int, scale: float, *,
            linear_last: bool = False, **kwargs) -> nnx.List:
    """``repeats`` :class:`ResidualBlock`; with ``linear_last`` the last one adds its residual
    unscaled (1.0) and skips the ReLU (Keras's ``block8_10``)."""
    blocks = [ResidualBlock(channels, specs, scale, **kwargs) for _ in range(repeats - 1)]
    last_scale, activate = (1.0, False) if linear_last else (scale, True)
    blocks.append(ResidualBlock(channels, specs, last_scale, activate=activate, **kwargs))
    return nnx.List(blocks)


class InceptionResNetV2(nnx.Module):
    """Inception-ResNet-v2 split as the TF OD API's Faster R-CNN uses it (module docstring).

    ``out_channels = {4: 1088, 5: 1536}``: :meth:`first_stage` ends at stride 16 (level 4),
    :meth:`box_classifier` halves its crops once more (level 5). Attributes in Keras's layer
    order: ``stem`` (5 :class:`ConvBN`), ``mixed_5b``, ``block35`` (10), ``mixed_6a``,
    ``block17`` (20), ``mixed_7a``, ``block8`` (10), ``conv_7b``. TF's ``batch_norm`` is
    :data:`TF_BATCH_NORM`; whatever it is, no batch norm learns a ``scale``.
    """

    def __init__(self, *, batch_norm: BatchNormParams, dtype=None, rngs: nnx.Rngs):
        kwargs = {"batch_norm": batch_norm, "dtype": dtype, "rngs": rngs}
        stem = ((3, 32, 3, 2), (32, 32, 3, 1), (32, 64, 3, 1), (64, 80, 1, 1), (80, 192, 3, 1))
        self.stem = nnx.List([ConvBN(cin, cout, k, s, **kwargs) for cin, cout, k, s in stem])
        self.mixed_5b = Mixed(192, MIXED_5B, pool_channels=64, **kwargs)
        self.block35 = _repeat(320, BLOCK35, 10, 0.17, **kwargs)
        self.mixed_6a = Mixed(320, MIXED_6A, **kwargs)
        self.block17 = _repeat(1088, BLOCK17, 20, 0.1, **kwargs)
        self.mixed_7a = Mixed(1088, MIXED_7A, **kwargs)
        self.block8 = _repeat(2080, BLOCK8, 10, 0.2, linear_last=True, **kwargs)
        self.conv_7b = ConvBN(2080, 1536, 1, **kwargs)
        self.out_channels: dict[int, int] = {4: 1088, 5: 1536}

    def first_stage(self, x: jax.Array) -> jax.Array:
        """Images ``[B, H, W, 3]`` -> ``block17_20_ac`` ``[B, ceil(H/16), ceil(W/16), 1088]``."""
        for i, unit in enumerate(self.stem):
            x = unit(x)
            if i in (2, 4):  # the stem's two max pools
                x = max_pool_same(x)
        blocks = self.blocks_by_level()
        for level in (3, 4):
            x = remat.run_blocks(blocks[level], x)
        return x

    def box_classifier(self, x: jax.Array) -> jax.Array:
        """Crops ``[N, h, w, 1088]`` -> ``conv_7b_ac`` ``[N, ceil(h/2), ceil(w/2), 1536]``."""
        return self.conv_7b(remat.run_blocks(self.blocks_by_level()[5], x))

    def blocks_by_level(self) -> dict[int, list[nnx.Module]]:
        """The blocks ending at each stride ``2**level`` after the stem: ``{3: [mixed_5b,
        *block35], 4: [mixed_6a, *block17], 5: [mixed_7a, *block8]}`` (``models.remat``)."""
        return {3: [self.mixed_5b, *self.block35], 4: [self.mixed_6a, *self.block17],
                5: [self.mixed_7a, *self.block8]}


__all__ = ["TF_BATCH_NORM", "ConvBN", "InceptionResNetV2", "Mixed", "ResidualBlock",
           "ScalelessBatchNorm", "UnitScale", "avg_pool_same", "max_pool_same"]
