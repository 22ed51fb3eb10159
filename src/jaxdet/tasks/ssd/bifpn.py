"""BiFPN: the bidirectional weighted feature pyramid of EfficientDet (Tan et al., 2020), as in
the automl implementation and effdet's ``tf_efficientdet_d*`` models.

For levels ``min_level .. max_level`` (e.g. P3..P7 from a backbone's P3..P5):

* levels above the backbone's top are made by resampling the level below: a 1x1 conv (with
  bias) + BatchNorm (no activation) when its channel count differs from ``num_filters``, then
  a 3x3 stride-2 TF ``SAME`` pool (P6 from P5; P7 from P6 is the pool alone);
* ``num_iterations`` cells follow. A cell's nodes (``bifpn_nodes``) run top-down
  (P6_td .. P3_out) then bottom-up (P4_out .. P7_out). Each node resamples every input to its
  own level (1x1 conv + BN when the channel count differs, which only happens for backbone
  maps in the first cell; nearest 2x upsampling by ``jnp.repeat`` from a coarser level; 3x3
  stride-2 ``SAME`` pooling from a finer one), fuses them (``fuse``), and applies
  swish -> separable 3x3 conv (depthwise without bias, pointwise with bias) -> BatchNorm.

Module and attribute names mirror effdet's ``BiFpn`` so that
:func:`jaxdet.interop.torch_names.torch_state_dict_map` maps its ``fpn.*``
state_dict keys one-to-one onto our parameters, e.g.
``resample.3.conv.conv.weight``, ``cell.0.fnode.3.combine.resample.0.conv.bn.running_var``,
``cell.2.fnode.7.combine.edge_weights``, ``cell.1.fnode.0.after_combine.conv.conv_pw.bias``.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.core.portable import reduce_window_2d
from jaxdet.models import initializers
from jaxdet.models.layers import (
    ActivationName,
    BatchNormParams,
    activation,
    batch_norm,
    conv,
    depthwise_conv,
)
from jaxdet.models.thin_maps import gather_thin_rows

WeightMethod = Literal["fastattn", "attn", "sum"]
Pooling = Literal["max", "avg"]
_WEIGHT_METHODS = ("fastattn", "attn", "sum")
_POOLINGS = ("max", "avg")
FASTATTN_EPSILON = 1e-4

# automl / effdet initialise the FPN with Glorot-uniform (fan average) kernels.
glorot_uniform = initializers.variance_scaling(1.0, "fan_avg", "uniform")


def _depthwise_glorot_uniform(key, shape, dtype=jnp.float32):
    """Glorot-uniform for a depthwise HWIO kernel ``[kh, kw, 1, C]``: fan_in = fan_out =
    ``kh * kw`` (effdet's ``_glorot_uniform`` with ``groups=C``)."""
    fan = max(1.0, float(shape[0] * shape[1]))
    limit = math.sqrt(3.0 / fan)
    return initializers.uniform(limit)(key, shape, dtype)


def bifpn_nodes(min_level: int, max_level: int) -> list[tuple[int, tuple[int, ...]]]:
    """The nodes of one BiFPN cell as ``(level, input_offsets)``, in evaluation order.

    Offsets index the cell's running list of maps: ``0 .. num_levels-1`` are the cell's inputs
    (levels ascending), node ``j`` appends entry ``num_levels + j``. The last ``num_levels``
    entries are the cell's outputs, levels ascending (automl ``bifpn_config``). For P3..P7::

        P6_td: (3, 4)  P5_td: (2, 5)  P4_td: (1, 6)  P3_out: (0, 7)
        P4_out: (1, 7, 8)  P5_out: (2, 6, 9)  P6_out: (3, 5, 10)  P7_out: (4, 11)
    """
    if max_level <= min_level:
        raise ValueError(f"BiFPN needs max_level > min_level, got {min_level}..{max_level}")
    num_levels = max_level - min_level + 1
    ids = {min_level + i: [i] for i in range(num_levels)}
    nodes: list[tuple[int, tuple[int, ...]]] = []
    for lvl in range(max_level - 1, min_level - 1, -1):  # top-down
        nodes.append((lvl, (ids[lvl][-1], ids[lvl + 1][-1])))
        ids[lvl].append(num_levels + len(nodes) - 1)
    for lvl in range(min_level + 1, max_level + 1):  # bottom-up
        nodes.append((lvl, (*ids[lvl], ids[lvl - 1][-1])))
        ids[lvl].append(num_levels + len(nodes) - 1)
    return nodes


def pool_same(x: jax.Array, stride: int = 2, pooling: Pooling = "max") -> jax.Array:
    """``(stride+1) x (stride+1)`` pooling with stride ``stride`` and TF ``SAME`` padding:
    ``[B,H,W,C] -> [B,ceil(H/s),ceil(W/s),C]``. Padded cells never win a max and are not
    counted in an average (TF ``AveragePooling2D(padding='same')``)."""
    window = (stride + 1, stride + 1)
    strides = (stride, stride)
    if pooling == "max":
        return gather_thin_rows(
            reduce_window_2d(x, -jnp.inf, jax.lax.max, window, strides, "SAME"))
    if pooling == "avg":
        total = reduce_window_2d(x, 0.0, jax.lax.add, window, strides, "SAME")
        ones = jnp.ones((1, *x.shape[1:3], 1), x.dtype)
        count = reduce_window_2d(ones, 0.0, jax.lax.add, window, strides, "SAME")
        return gather_thin_rows(total / count)
    raise ValueError(f"unknown pooling {pooling!r}; expected one of {_POOLINGS}")


def upsample_like(x: jax.Array, factor: int, hw: tuple[int, int]) -> jax.Array:
    """Nearest-neighbour upsampling by an integer ``factor`` with ``jnp.repeat`` (shards cleanly
    along H and W), cropped to ``hw``: ``[B,h,w,C] -> [B,hw[0],hw[1],C]``."""
    y = jnp.repeat(jnp.repeat(x, factor, axis=1), factor, axis=2)
    return y[:, : hw[0], : hw[1]]


def fuse(
    inputs: list[jax.Array], edge_weights: jax.Array | None, method: WeightMethod
) -> jax.Array:
    """Weighted sum of same-shaped maps ``[B,h,w,C]`` -> ``[B,h,w,C]``.

    * ``fastattn``: ``w = relu(edge_weights)``; ``sum_i w_i x_i / (sum_i w_i + 1e-4)``;
    * ``attn``: ``w = softmax(edge_weights)``; ``sum_i w_i x_i``;
    * ``sum``: ``sum_i x_i`` (``edge_weights`` is ignored; pass ``None``).

    Weights are normalized in float32, then cast to the inputs' dtype.
    """
    if method == "sum":
        out = inputs[0]
        for x in inputs[1:]:
            out = out + x
        return out
    if edge_weights is None:
        raise ValueError(f"weight_method {method!r} needs edge_weights")
    w = jnp.asarray(edge_weights, jnp.float32)
    if method == "fastattn":
        w = jax.nn.relu(w)
        w = w / (jnp.sum(w) + FASTATTN_EPSILON)
    elif method == "attn":
        w = jax.nn.softmax(w)
    else:
        raise ValueError(f"unknown weight_method {method!r}; expected one of {_WEIGHT_METHODS}")
    w = w.astype(inputs[0].dtype)
    out = inputs[0] * w[0]
    for i, x in enumerate(inputs[1:], start=1):
        out = out + x * w[i]
    return out


class ConvBn(nnx.Module):
    """kxk conv (TF ``SAME``, with bias) -> BatchNorm, no activation (effdet ``ConvBnAct2d``
    with ``act_layer=None``). Attributes: ``conv``, ``bn``."""

    def __init__(
        self, in_features: int, out_features: int, kernel_size: int, *,
        batch_norm_params: BatchNormParams, dtype=None, rngs: nnx.Rngs,
    ):
        self.conv = conv(
            in_features, out_features, kernel_size, use_bias=True, padding="same",
            kernel_init=glorot_uniform, dtype=dtype, rngs=rngs,
        )
        self.bn = batch_norm(out_features, batch_norm_params, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.bn(self.conv(x))


class SeparableConvBn(nnx.Module):
    """Depthwise kxk (no bias) -> pointwise 1x1 (with bias) -> BatchNorm (effdet
    ``SeparableConv2d`` with ``act_layer=None``). Attributes: ``conv_dw``, ``conv_pw``, ``bn``."""

    def __init__(
        self, in_features: int, out_features: int, kernel_size: int, *,
        batch_norm_params: BatchNormParams, dtype=None, rngs: nnx.Rngs,
    ):
        self.conv_dw = depthwise_conv(
            in_features, kernel_size, padding="same", kernel_init=_depthwise_glorot_uniform,
            dtype=dtype, rngs=rngs,
        )
        self.conv_pw = conv(
            in_features, out_features, 1, use_bias=True, padding="same",
            kernel_init=glorot_uniform, dtype=dtype, rngs=rngs,
        )
        self.bn = batch_norm(out_features, batch_norm_params, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.bn(self.conv_pw(self.conv_dw(x)))


class ResampleFeatureMap(nnx.Module):
    """Brings a map from ``in_level`` to ``out_level``: 1x1 ``ConvBn`` when the channel
    count changes (attribute ``conv``, else ``None``), then ``SAME`` pooling (finer input) or
    ``jnp.repeat`` upsampling cropped to the target size (coarser input)."""

    def __init__(
        self, in_features: int, out_features: int, in_level: int, out_level: int, *,
        pooling: Pooling, batch_norm_params: BatchNormParams, dtype=None, rngs: nnx.Rngs,
    ):
        self.conv = (
            ConvBn(in_features, out_features, 1, batch_norm_params=batch_norm_params,
                   dtype=dtype, rngs=rngs)
            if in_features != out_features else None
        )
        self.level_shift = in_level - out_level  # > 0: input is coarser (smaller)
        self.pooling = pooling

    def __call__(self, x: jax.Array, hw: tuple[int, int]) -> jax.Array:
        """``[B,H,W,C_in] -> [B,hw[0],hw[1],C_out]``."""
        if self.conv is not None:
            x = self.conv(x)
        if self.level_shift < 0:
            x = pool_same(x, 2 ** -self.level_shift, self.pooling)
        elif self.level_shift > 0:
            x = upsample_like(x, 2**self.level_shift, hw)
        if tuple(x.shape[1:3]) != tuple(hw):
            raise ValueError(
                f"BiFPN resample by 2^{-self.level_shift} gave {tuple(x.shape[1:3])}, expected "
                f"{tuple(hw)}; feature maps must halve (rounding up) from level to level"
            )
        return x


class FpnCombine(nnx.Module):
    """Resamples a node's inputs to its level and fuses them. Attributes: ``resample``
    (``nnx.Dict`` keyed by ``str(offset)``), ``edge_weights`` (float32 ``[num_inputs]``,
    initialised to 1; ``None`` for ``sum``)."""

    def __init__(
        self, in_features: list[int], in_levels: list[int], offsets: tuple[int, ...],
        level: int, num_filters: int, *, weight_method: WeightMethod, pooling: Pooling,
        batch_norm_params: BatchNormParams, dtype=None, rngs: nnx.Rngs,
    ):
        self.offsets = tuple(offsets)
        self.weight_method = weight_method
        self.resample = nnx.Dict({
            str(o): ResampleFeatureMap(
                in_features[o], num_filters, in_levels[o], level, pooling=pooling,
                batch_norm_params=batch_norm_params, dtype=dtype, rngs=rngs,
            )
            for o in self.offsets
        })
        self.edge_weights = (
            None if weight_method == "sum"
            else nnx.Param(initializers.filled((len(self.offsets),), 1.0))
        )

    def __call__(self, nodes: list[jax.Array], hw: tuple[int, int]) -> jax.Array:
        inputs = [self.resample[str(o)](nodes[o], hw) for o in self.offsets]
        weights = None if self.edge_weights is None else self.edge_weights[...]
        return fuse(inputs, weights, self.weight_method)


class AfterCombine(nnx.Module):
    """activation -> (separable) 3x3 conv -> BatchNorm. Attribute: ``conv``."""

    def __init__(
        self, num_filters: int, *, separable: bool, activation_name: ActivationName,
        batch_norm_params: BatchNormParams, dtype=None, rngs: nnx.Rngs,
    ):
        unit = SeparableConvBn if separable else ConvBn
        self.conv = unit(num_filters, num_filters, 3, batch_norm_params=batch_norm_params,
                         dtype=dtype, rngs=rngs)
        self.act = activation(activation_name)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(self.act(x))


class Fnode(nnx.Module):
    """One BiFPN node at ``level``. Attributes: ``combine``, ``after_combine``."""

    def __init__(self, combine: FpnCombine, after_combine: AfterCombine, level: int):
        self.combine = combine
        self.after_combine = after_combine
        self.level = level

    def __call__(self, nodes: list[jax.Array], hw: tuple[int, int]) -> jax.Array:
        return self.after_combine(self.combine(nodes, hw))


class BiFpnLayer(nnx.Module):
    """One BiFPN cell: ``list of num_levels maps (levels ascending) -> same``. Attribute:
    ``fnode`` (``nnx.List`` of :class:`Fnode`)."""

    def __init__(
        self, in_features: list[int], min_level: int, max_level: int, num_filters: int, *,
        weight_method: WeightMethod, activation_name: ActivationName, separable: bool,
        pooling: Pooling, batch_norm_params: BatchNormParams, dtype=None, rngs: nnx.Rngs,
    ):
        self.num_levels = max_level - min_level + 1
        nodes = bifpn_nodes(min_level, max_level)
        features = list(in_features) + [num_filters] * len(nodes)
        levels = list(range(min_level, max_level + 1)) + [lvl for lvl, _ in nodes]
        self.fnode = nnx.List([
            Fnode(
                FpnCombine(
                    features, levels, offsets, lvl, num_filters, weight_method=weight_method,
                    pooling=pooling, batch_norm_params=batch_norm_params, dtype=dtype,
                    rngs=rngs,
                ),
                AfterCombine(
                    num_filters, separable=separable, activation_name=activation_name,
                    batch_norm_params=batch_norm_params, dtype=dtype, rngs=rngs,
                ),
                lvl,
            )
            for lvl, offsets in nodes
        ])
        self.min_level = min_level

    def __call__(self, maps: list[jax.Array]) -> list[jax.Array]:
        sizes = {self.min_level + i: tuple(x.shape[1:3]) for i, x in enumerate(maps)}
        nodes = list(maps)
        for fnode in self.fnode:
            nodes.append(fnode(nodes, sizes[fnode.level]))
        return nodes[-self.num_levels:]


class BiFPN(nnx.Module):
    """``__call__(features: {level: [B,H,W,C]}) -> {level: [B,h,w,num_filters]}`` for
    ``min_level..max_level``; levels above the backbone's top have ``ceil`` half the size of
    the level below.

    ``out_channels`` is ``{level: num_filters}``. Attributes (effdet names): ``resample``
    (``nnx.Dict`` keyed by the level's index ``str(level - min_level)``, for levels above the
    backbone), ``cell`` (``nnx.List`` of :class:`BiFpnLayer`). ``pooling="avg"`` averages
    over the valid cells only (TF ``SAME``). Edge weights are float32 parameters; activations
    use ``dtype``.
    """

    def __init__(
        self,
        in_channels: dict[int, int],
        min_level: int,
        max_level: int,
        num_filters: int,
        num_iterations: int,
        *,
        weight_method: WeightMethod = "fastattn",
        activation_name: ActivationName = "swish",
        separable: bool = True,
        pooling: Pooling = "max",
        batch_norm: BatchNormParams,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        if weight_method not in _WEIGHT_METHODS:
            raise ValueError(
                f"unknown weight_method {weight_method!r}; expected one of {_WEIGHT_METHODS}")
        if pooling not in _POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; expected one of {_POOLINGS}")
        if num_iterations < 1:
            raise ValueError(f"BiFPN num_iterations must be >= 1, got {num_iterations}")
        bifpn_nodes(min_level, max_level)  # validates the level range
        if min_level not in in_channels:
            raise ValueError(
                f"BiFPN min_level {min_level} is not a backbone level (have {sorted(in_channels)})"
            )
        top = min(max_level, max(in_channels))
        self.backbone_levels = tuple(range(min_level, top + 1))
        missing = [lvl for lvl in self.backbone_levels if lvl not in in_channels]
        if missing:
            raise ValueError(f"BiFPN needs backbone levels {missing}; have {sorted(in_channels)}")
        self.min_level, self.max_level = min_level, max_level
        self.num_filters, self.dtype = num_filters, dtype
        self.out_channels: dict[int, int] = {
            lvl: num_filters for lvl in range(min_level, max_level + 1)}

        features = [in_channels[lvl] for lvl in self.backbone_levels]
        resample = {}
        for lvl in range(top + 1, max_level + 1):
            resample[str(lvl - min_level)] = ResampleFeatureMap(
                features[-1], num_filters, lvl - 1, lvl, pooling=pooling,
                batch_norm_params=batch_norm, dtype=dtype, rngs=rngs,
            )
            features.append(num_filters)
        self.resample = nnx.Dict(resample)
        self.cell = nnx.List([
            BiFpnLayer(
                features if k == 0 else [num_filters] * len(features), min_level, max_level,
                num_filters, weight_method=weight_method, activation_name=activation_name,
                separable=separable, pooling=pooling, batch_norm_params=batch_norm,
                dtype=dtype, rngs=rngs,
            )
            for k in range(num_iterations)
        ])

    def __call__(self, features: dict[int, jax.Array]) -> dict[int, jax.Array]:
        maps = [features[lvl] for lvl in self.backbone_levels]
        if self.dtype is not None:
            maps = [x.astype(self.dtype) for x in maps]
        for lvl in range(self.backbone_levels[-1] + 1, self.max_level + 1):
            h, w = maps[-1].shape[1:3]
            hw = (-(-h // 2), -(-w // 2))
            maps.append(self.resample[str(lvl - self.min_level)](maps[-1], hw))
        for cell in self.cell:
            maps = cell(maps)
        return {self.min_level + i: x for i, x in enumerate(maps)}
