"""Building blocks shared by backbones, necks and heads.

Conventions used across ``jaxdet.models``:

* Images and feature maps are NHWC.
* Every module takes ``dtype`` (the compute dtype, e.g. ``jnp.bfloat16``); parameters and
  BatchNorm statistics always stay float32.
* Train / eval mode is nnx's own: ``model.train()`` / ``model.eval()`` flip
  ``use_running_average`` on every BatchNorm (and ``deterministic`` on Dropout). Modules are
  built in train mode.
* Convolutions come in two padding flavours:

  - ``"symmetric"``: explicit ``k // 2`` padding on every side, like PyTorch's
    ``padding=k//2``. Backbones whose weights come from torchvision / timm use it, so
    imported weights reproduce the reference outputs exactly (TF "SAME" pads stride-2
    convolutions on even inputs asymmetrically and would shift every feature map).
  - ``"same"``: TensorFlow's ``SAME``. Necks and heads that mirror the TF Object Detection
    API use it (e.g. the SSD extra layers take 300 -> 19, 10, 5, 3, 2, 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn import dtypes as flax_dtypes

from jaxdet.backends import dispatch
from jaxdet.core.portable import reduce_window_2d
from jaxdet.models import initializers
from jaxdet.models.thin_maps import gather_thin_rows

ActivationName = Literal["relu", "relu6", "swish", "none"]
Padding = Literal["symmetric", "same"]

# He-normal on fan-out: torchvision's ResNet / MobileNet initialisation.
kaiming_fan_out = initializers.variance_scaling(2.0, "fan_out", "normal")
zeros = initializers.zeros_init()


@dataclass(frozen=True)
class BatchNormParams:
    """BatchNorm settings shared by every norm layer a builder creates.

    ``momentum`` is the decay of the running statistics (TF's ``decay``; PyTorch's
    ``momentum=0.1`` is ``0.9`` here). ``frozen=True`` always normalizes with the running
    statistics, never updates them and stops gradients to scale and bias (the usual way to
    fine-tune a pretrained backbone with small per-device batches).
    ``num_groups=G > 1`` computes training statistics separately over G equal slices of the
    batch (per-device statistics when G is the mesh's ``data`` size, see :class:`BatchNorm`).
    """

    momentum: float = 0.997
    epsilon: float = 1e-3
    frozen: bool = False
    num_groups: int = 1


class RunningStat(nnx.BatchStat):
    """A BatchNorm running statistic whose whole-array update (``stat[...] = new``) replaces
    the value directly. nnx's ``Variable.__setitem__`` first compares the new value's
    ``.sharding`` with the old one's; asked of a tracer inside ``jit``, that attribute raises
    an error whose message is built by walking the whole trace, once per BatchNorm per step:
    tracing RetinaNet-R50's train step took 6.1 s instead of 1.7 s. The update is the same
    array either way (same shape, the statistic's dtype)."""

    def __setitem__(self, key, value) -> None:
        if key is Ellipsis:
            self.set_value(jnp.asarray(value, self.get_value().dtype))
        else:
            super().__setitem__(key, value)


class BatchNorm(nnx.BatchNorm):
    """``nnx.BatchNorm`` that can be frozen, that folds running statistics into one float32
    affine transform whenever it uses them (eval mode or frozen), and that can take its
    training statistics per group of the batch.

    Training statistics:

    * ``num_groups=1`` (default): mean and variance over the whole batch [B, H, W, C] ->
      [C], exactly ``nnx.BatchNorm``. Inside one jitted step over a device mesh the batch is
      the global batch, so GSPMD makes these cross-device ("sync") statistics for free.
    * ``num_groups=G > 1``: the batch is viewed as [G, B/G, H, W, C] (B must divide by G) and
      each group g, rows ``g*B/G .. (g+1)*B/G - 1``, is normalized with its own mean and
      variance [G, C] (float32 reductions, ``E[x^2] - E[x]^2`` clipped at 0, as flax). When G
      is the mesh's ``data`` size, group g is exactly the rows on data shard g, so these are
      per-device statistics (PyTorch DDP without SyncBatchNorm) and normalizing needs no
      cross-device reduction. The running statistics move towards the mean over groups of the
      group means and of the group variances (the latter is not the whole batch's variance:
      it leaves out the spread of the group means).

    The running variance averages the batches' unbiased variances (n / (n - 1) times the
    variance normalization uses, n the values per feature), as TF's fused batch norm and
    PyTorch's do; it matters where n is small (a 1x1 map of a batch of 8: 8 / 7).

    Eval mode and ``frozen`` normalize with the running statistics whatever ``num_groups``.
    Parameter names are nnx's (``scale``, ``bias``, ``mean``, ``var``), so checkpoints and
    optimizers see an ordinary BatchNorm.
    """

    def __init__(
        self,
        num_features: int,
        *,
        frozen: bool = False,
        momentum: float = 0.997,
        epsilon: float = 1e-3,
        num_groups: int = 1,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        # What nnx.BatchNorm.__init__ sets (with its defaults: features last, scale and bias,
        # no axis name), but with the four vectors made on the host: its jnp.zeros / jnp.ones
        # compile one small XLA program per feature count (17 of EfficientDet-D0's build).
        # The two keys it draws for scale and bias are drawn too, so every later layer's
        # initial values stay as they were.
        rngs.params(), rngs.params()
        self.mean = RunningStat(initializers.filled((num_features,), 0.0))
        self.var = RunningStat(initializers.filled((num_features,), 1.0))
        self.scale = nnx.Param(initializers.filled((num_features,), 1.0))
        self.bias = nnx.Param(initializers.filled((num_features,), 0.0))
        self.num_features = num_features
        self.use_running_average = False
        self.axis = -1
        self.momentum = momentum
        self.epsilon = epsilon
        self.dtype = dtype
        self.param_dtype = jnp.float32
        self.use_bias = True
        self.use_scale = True
        self.axis_name = None
        self.axis_index_groups = None
        self.use_fast_variance = True
        self.promote_dtype = flax_dtypes.promote_dtype
        self.frozen = frozen
        self.num_groups = _check_groups(num_groups)

    def __call__(self, x, use_running_average: bool | None = None, *, mask=None):
        """Normalize ``x`` [B, ..., C] (features last); returns the same shape in ``dtype``
        (or ``x``'s dtype promoted with float32 when ``dtype`` is None)."""
        if use_running_average is None:
            use_running_average = self.use_running_average
        if not (self.frozen or use_running_average):
            if self.num_groups == 1 and self._hand_written_gradient(x, mask):
                return self._batch_normalize(x)
            if self.num_groups == 1:
                old = self.var[...]
                out = super().__call__(x, use_running_average=False, mask=mask)
                # flax moved the running variance by (1 - m) * the batch's biased variance;
                # make that the unbiased one, n / (n - 1) times it, as TF and PyTorch do
                count = _count(x, mask)
                self.var[...] = jax.lax.stop_gradient(
                    self.var[...] + (self.var[...] - self.momentum * old) / (count - 1.0))
                return out
            return self._grouped_batch_norm(x, mask)
        scale, bias = self.scale[...], self.bias[...]
        mean, var = self.mean[...], self.var[...]
        if self.frozen:
            scale, bias = jax.lax.stop_gradient(scale), jax.lax.stop_gradient(bias)
        mean, var = jax.lax.stop_gradient(mean), jax.lax.stop_gradient(var)
        mul = scale * jax.lax.rsqrt(var + self.epsilon)
        shift = bias - mean * mul
        out_dtype = self.dtype or jnp.promote_types(x.dtype, jnp.float32)
        x = x.astype(out_dtype)
        return x * mul.astype(out_dtype) + shift.astype(out_dtype)

    def _hand_written_gradient(self, x: jax.Array, mask: jax.Array | None) -> bool:
        """Whether training-mode normalization of ``x`` takes the backend's form
        (``backends.dispatch.has_batch_norm_form``: float32 on CPU) for features last and
        whole-batch statistics without a mask: the same values as ``nnx.BatchNorm``, fewer
        passes over memory in the backward pass."""
        return (mask is None and self.axis in (-1, x.ndim - 1) and self.axis_name is None
                and self.dtype in (None, x.dtype) and self.scale is not None
                and self.bias is not None and dispatch.has_batch_norm_form(x.dtype))

    def _batch_normalize(self, x: jax.Array) -> jax.Array:
        """``nnx.BatchNorm``'s training mode (statistics over every axis but the last, running
        statistics updated with ``momentum``) with the hand-written gradient."""
        mean, raw_variance = dispatch.batch_statistics(x)
        m = self.momentum
        unbiased = jnp.maximum(0.0, raw_variance) * _bessel(_count(x, None))
        self.mean[...] = jax.lax.stop_gradient(m * self.mean[...] + (1 - m) * mean)
        self.var[...] = jax.lax.stop_gradient(m * self.var[...] + (1 - m) * unbiased)
        return dispatch.normalize_with_batch_statistics(x, mean, raw_variance, self.scale[...],
                                               self.bias[...], self.epsilon)

    def _grouped_batch_norm(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
        """Training-mode normalization with statistics per group of rows (``num_groups``).

        x [B, ..., C] -> [G, B/G, ..., C]; statistics [G, 1, ..., 1, C] over every axis but
        the group and the features; updates the running ``mean`` / ``var`` [C] with the mean
        over groups. Mirrors ``nnx.BatchNorm`` (dtype promotion, float32 statistics, fast
        variance) group by group.
        """
        if self.axis not in (-1, x.ndim - 1):
            raise ValueError(f"grouped BatchNorm needs features last (axis=-1), got {self.axis}")
        groups, batch = self.num_groups, x.shape[0]
        if batch % groups:
            raise ValueError(
                f"BatchNorm with num_groups={groups} (per-device statistics over "
                f"parallel.data={groups} devices) needs a batch that divides by {groups}, got "
                f"{batch}"
            )
        x, _, _, scale, bias = self.promote_dtype(
            (x, self.mean[...], self.var[...], self.scale[...], self.bias[...]), dtype=self.dtype
        )
        shape = x.shape
        xg = x.reshape(groups, batch // groups, *shape[1:])
        stat_dtype = jnp.promote_types(self.dtype or xg.dtype, jnp.float32)
        xf = xg.astype(stat_dtype)
        axes = tuple(range(1, xg.ndim - 1))
        where = None
        if mask is not None:
            where = jnp.broadcast_to(mask, shape).reshape(xg.shape)
        mean = xf.mean(axes, where=where, keepdims=True)
        mean2 = jnp.square(xf).mean(axes, where=where, keepdims=True)
        var = jnp.maximum(0.0, mean2 - jnp.square(mean))

        m = self.momentum
        per_group = (xf.size // xf.shape[0] // xf.shape[-1] if where is None
                     else jnp.sum(where, axes, keepdims=True).astype(stat_dtype))
        unbiased = var * _bessel(per_group)
        self.mean[...] = jax.lax.stop_gradient(
            m * self.mean[...] + (1 - m) * mean.mean(axis=0).reshape(-1)
        )
        self.var[...] = jax.lax.stop_gradient(
            m * self.var[...] + (1 - m) * unbiased.mean(axis=0).reshape(-1)
        )

        y = (xg - mean) * (jax.lax.rsqrt(var + self.epsilon) * scale)
        y = y + bias
        out_dtype = self.dtype or jnp.result_type(x, scale, bias)
        return y.astype(out_dtype).reshape(shape)


def _count(x: jax.Array, mask: jax.Array | None):
    """How many values of each feature a training batch normalizes over: every position of
    ``x`` [B, ..., C] but the features, or those ``mask`` selects."""
    if mask is None:
        return x.size // x.shape[-1]
    full = jnp.broadcast_to(mask, x.shape)
    return jnp.sum(full[..., 0]).astype(jnp.float32)


def _bessel(count):
    """``n / (n - 1)``: the factor from a batch's variance over n values to its unbiased
    estimate, which TF's (fused) and PyTorch's batch norms average into the running variance;
    1 for a single value."""
    if isinstance(count, int):
        return count / (count - 1) if count > 1 else 1.0
    return jnp.where(count > 1, count / jnp.maximum(count - 1.0, 1.0), 1.0)


def _check_groups(num_groups: int) -> int:
    if int(num_groups) != num_groups or num_groups < 1:
        raise ValueError(f"BatchNorm num_groups must be an integer >= 1, got {num_groups!r}")
    return int(num_groups)


def set_batch_norm_groups(module: nnx.Module, num_groups: int) -> None:
    """Set ``num_groups`` on every :class:`BatchNorm` inside ``module`` (in place).

    Call it before the module's graph definition is taken (``nnx.split`` / a task), since
    ``num_groups`` is static structure, not state.
    """
    num_groups = _check_groups(num_groups)
    for _, sub in nnx.iter_modules(module):
        if isinstance(sub, BatchNorm):
            sub.num_groups = num_groups


def batch_norm(
    num_features: int, params: BatchNormParams, dtype=None, rngs: nnx.Rngs | None = None
) -> BatchNorm:
    """A :class:`BatchNorm` configured by ``params``."""
    if rngs is None:
        raise TypeError("batch_norm() needs rngs")
    return BatchNorm(
        num_features,
        frozen=params.frozen,
        momentum=params.momentum,
        epsilon=params.epsilon,
        num_groups=params.num_groups,
        dtype=dtype,
        rngs=rngs,
    )


_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "swish": jax.nn.swish,
    "none": lambda x: x,
}


def activation(name: ActivationName) -> Callable[[jax.Array], jax.Array]:
    """The activation function called ``name`` (one of relu, relu6, swish, none)."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; expected one of {sorted(_ACTIVATIONS)}"
        ) from None


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def conv(
    in_features: int,
    out_features: int,
    kernel_size: int | Sequence[int],
    stride: int = 1,
    *,
    groups: int = 1,
    dilation: int = 1,
    use_bias: bool = False,
    padding: Padding = "symmetric",
    kernel_init=kaiming_fan_out,
    bias_init=zeros,
    dtype=None,
    rngs: nnx.Rngs,
) -> nnx.Conv:
    """``nnx.Conv`` with PyTorch-style explicit symmetric padding (default) or TF ``SAME``.

    The kernel is HWIO: ``(kh, kw, in_features // groups, out_features)``.
    """
    kh, kw = _pair(kernel_size)
    if padding == "symmetric":
        pad = ((dilation * (kh - 1) // 2,) * 2, (dilation * (kw - 1) // 2,) * 2)
    elif padding == "same":
        pad = "SAME"
    else:
        raise ValueError(f"unknown padding {padding!r}; expected 'symmetric' or 'same'")
    layer = nnx.Conv(
        in_features,
        out_features,
        (kh, kw),
        strides=stride,
        padding=pad,
        kernel_dilation=dilation,
        feature_group_count=groups,
        use_bias=use_bias,
        kernel_init=kernel_init,
        bias_init=bias_init,
        dtype=dtype,
        param_dtype=jnp.float32,
        rngs=rngs,
    )
    layer.conv_general_dilated = _conv_general_dilated
    return layer


def _conv_general_dilated(*args, **kwargs) -> jax.Array:
    """What every ``conv`` layer computes with: ``depthwise.conv_general_dilated`` (CPU rewrites
    of depthwise and 1x1 convolutions, ``lax.conv_general_dilated`` for the rest), its output
    kept whole along H when thin on a spatial mesh (see ``models.thin_maps``)."""
    return gather_thin_rows(dispatch.conv_general_dilated(*args, **kwargs))


def depthwise_conv(
    features: int,
    kernel_size: int | Sequence[int],
    stride: int = 1,
    **kwargs,
) -> nnx.Conv:
    """Depthwise convolution (one filter per channel, multiplier 1); see :func:`conv`."""
    return conv(features, features, kernel_size, stride, groups=features, **kwargs)


class SeparableConv(nnx.Module):
    """TF ``separable_conv2d`` with ``depth_multiplier=1``: depthwise kxk then pointwise 1x1,
    with no norm or activation in between (the caller normalizes the result)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int,
        stride: int = 1,
        *,
        use_bias: bool = False,
        padding: Padding = "same",
        kernel_init=kaiming_fan_out,
        bias_init=zeros,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        self.depthwise = depthwise_conv(
            in_features, kernel_size, stride, padding=padding, kernel_init=kernel_init,
            dtype=dtype, rngs=rngs,
        )
        self.pointwise = conv(
            in_features, out_features, 1, use_bias=use_bias, kernel_init=kernel_init,
            bias_init=bias_init, dtype=dtype, rngs=rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.pointwise(self.depthwise(x))


class ConvNormAct(nnx.Module):
    """conv (plain or separable) -> BatchNorm -> activation: the TF OD API ``conv_hyperparams``
    unit used by necks. Attributes: ``conv``, ``norm``. ``batch_norm_params=None``: no norm,
    the conv has a bias instead (``norm`` is None; torchvision's FPN convs)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        kernel_size: int,
        stride: int = 1,
        *,
        batch_norm_params: BatchNormParams | None,
        activation_name: ActivationName = "relu",
        separable: bool = False,
        padding: Padding = "same",
        kernel_init=kaiming_fan_out,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        use_bias = batch_norm_params is None
        if separable:
            self.conv = SeparableConv(
                in_features, out_features, kernel_size, stride, use_bias=use_bias,
                padding=padding, kernel_init=kernel_init, dtype=dtype, rngs=rngs,
            )
        else:
            self.conv = conv(
                in_features, out_features, kernel_size, stride, use_bias=use_bias,
                padding=padding, kernel_init=kernel_init, dtype=dtype, rngs=rngs,
            )
        self.norm = (None if batch_norm_params is None
                     else batch_norm(out_features, batch_norm_params, dtype, rngs))
        self.act = activation(activation_name)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv(x)
        return self.act(x if self.norm is None else self.norm(x))


class DepthwiseNormAct(nnx.Module):
    """Depthwise kxk conv -> BatchNorm -> activation (TF ``separable_conv2d`` with
    ``num_outputs=None`` under a ``conv_hyperparams`` arg scope). Attributes: ``conv``,
    ``norm``."""

    def __init__(
        self,
        features: int,
        kernel_size: int,
        stride: int = 1,
        *,
        batch_norm_params: BatchNormParams,
        activation_name: ActivationName = "relu6",
        padding: Padding = "same",
        kernel_init=kaiming_fan_out,
        dtype=None,
        rngs: nnx.Rngs,
    ):
        self.conv = depthwise_conv(
            features, kernel_size, stride, padding=padding, kernel_init=kernel_init,
            dtype=dtype, rngs=rngs,
        )
        self.norm = batch_norm(features, batch_norm_params, dtype, rngs)
        self.act = activation(activation_name)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(self.norm(self.conv(x)))


def max_pool_symmetric(x: jax.Array, window: int = 3, stride: int = 2) -> jax.Array:
    """Max pooling with PyTorch-style symmetric padding (padded cells never win)."""
    p = window // 2
    init = -jnp.inf  # a Python scalar, so JAX recognizes max-pool and can differentiate it
    return gather_thin_rows(reduce_window_2d(x, init, jax.lax.max, (window, window),
                                             (stride, stride), ((p, p), (p, p))))


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``value`` to a multiple of ``divisor`` (at least ``min_value``) without going
    more than 10% below it: the MobileNet channel rule (TF slim / Keras / timm)."""
    min_value = divisor if min_value is None else min_value
    new = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return int(new)
