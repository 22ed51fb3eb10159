"""The TF OD API's CenterNet ResNet-v2 upsampling stack (``CenterNetResnetFeatureExtractor``):
one map from the top backbone level, upsampled ``len(filters)`` times by 2.

For each width ``f`` in ``filters`` (default 256, 128, 64): ``3x3 conv (bias, SAME) -> BN ->
ReLU -> 3x3 stride-2 transposed conv (bias, SAME) -> BN -> ReLU``. From C5 (stride 32) the
default gives 64 channels at level 2 (stride 4). TF uses plain convs where the paper has
deformable ones, and Keras' default initializers (not bilinear upsampling kernels).

The transposed conv is TF's ``Conv2DTranspose(padding="same")``: kernel [3, 3, out, in]
(``transpose_kernel``), output ``2 * H``, input pixel ``i`` feeding outputs ``2i .. 2i + 2``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models.layers import BatchNormParams, conv, kaiming_fan_out, zeros
from jaxdet.models.layers import batch_norm as make_batch_norm


def conv_transpose2x(in_ch: int, out_ch: int, *, dtype, rngs: nnx.Rngs) -> nnx.ConvTranspose:
    """3x3 stride-2 transposed conv with a bias, TF ``Conv2DTranspose(padding="same")``."""
    return nnx.ConvTranspose(in_ch, out_ch, (3, 3), strides=(2, 2), padding="SAME",
                             transpose_kernel=True, use_bias=True, kernel_init=kaiming_fan_out,
                             bias_init=zeros,
                             dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


class CenterNetDeconv(nnx.Module):
    """``__call__({level: map}) -> {out_level: map}``: reads the top backbone level ``L`` and
    returns level ``out_level = L - len(filters)`` with ``filters[-1]`` channels
    (``out_channels``)."""

    def __init__(self, in_channels: dict[int, int], filters: tuple[int, ...] = (256, 128, 64),
                 *, batch_norm: BatchNormParams, dtype=None, rngs: nnx.Rngs):
        self.in_level = max(in_channels)
        self.out_level = self.in_level - len(filters)
        widths = [in_channels[self.in_level], *filters]
        self.convs = nnx.List([conv(i, o, 3, use_bias=True, padding="same", dtype=dtype,
                                    rngs=rngs) for i, o in zip(widths, filters, strict=False)])
        self.conv_norms = nnx.List([make_batch_norm(f, batch_norm, dtype, rngs)
                                    for f in filters])
        self.deconvs = nnx.List([conv_transpose2x(f, f, dtype=dtype, rngs=rngs)
                                 for f in filters])
        self.deconv_norms = nnx.List([make_batch_norm(f, batch_norm, dtype, rngs)
                                      for f in filters])
        self.out_channels = {self.out_level: filters[-1]}

    def __call__(self, features: dict[int, jax.Array]) -> dict[int, jax.Array]:
        x = features[self.in_level]
        for c, cn, d, dn in zip(self.convs, self.conv_norms, self.deconvs, self.deconv_norms,
                                strict=True):
            x = jax.nn.relu(cn(c(x)))
            x = jax.nn.relu(dn(d(x)))
        return {self.out_level: x}
