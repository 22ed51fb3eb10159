"""Build a 3D U-Net task from a ``model.type: unet3d`` config."""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from jaxdet import builders
from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.tasks.unet3d.model import UNet3D
from jaxdet.tasks.unet3d.task import UNet3DTask


def build_unet3d(config: S.Config, *, seed: int) -> UNet3D:
    """The network of ``config.model`` (compute dtype from ``config.precision``)."""
    m = config.model
    if config.train.remat:
        raise ValueError(f"train.remat={list(config.train.remat)}: the 3D U-Net has no "
                         "recomputable parts yet; leave train.remat empty")
    return UNet3D(m.in_channels, m.num_classes, m.filters, negative_slope=m.negative_slope,
                  epsilon=m.norm_epsilon, dtype=builders.COMPUTE_DTYPES[config.precision],
                  rngs=nnx.Rngs(seed))


def build_unet3d_task(config: S.Config, *, seed: int) -> UNet3DTask:
    """The network (:func:`build_unet3d`) and its task."""
    m = config.model
    return UNet3DTask(
        model=build_unet3d(config, seed=seed), input_size=tuple(m.patch_size),
        num_classes=m.num_classes, in_channels=m.in_channels,
        dice_weight=m.loss.dice_weight, ce_weight=m.loss.ce_weight,
        include_background=m.loss.include_background, overlap=m.sliding_window.overlap,
        sigma_scale=m.sliding_window.sigma_scale,
        window_batch_size=m.sliding_window.batch_size,
        compute_dtype=builders.COMPUTE_DTYPES[config.precision], seed=seed)


def unet3d_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes the checkpoint's tensors: the type, classes, input channels, level widths
    and norm. The patch size is left out: the network is fully convolutional, so a checkpoint
    serves any patch (unlike the detectors, whose anchors follow the input size)."""
    dumped = fingerprint_dump(config.model)
    keep = ("type", "num_classes", "in_channels", "filters", "norm")
    return {"model": {k: dumped[k] for k in keep}}


def unet3d_summary(config: S.Config, **_: Any) -> dict:
    """``jaxdet summary`` for the 3D U-Net: parameters per part, the widths and map sizes of
    every level, and the multiply-adds of one patch (from the jaxpr, ``jaxdet.macs``). The
    model is built abstractly: no weights are computed."""
    from jaxdet.summary import module_macs

    model = nnx.eval_shape(lambda: build_unet3d(config, seed=0))
    m = config.model

    def count(module) -> int:
        return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, nnx.Param)))

    parts = {"input_block": count(model.input_block),
             "downsample": sum(count(x) for x in model.downsample),
             "bottleneck": count(model.bottleneck),
             "upsample": sum(count(x) for x in model.upsample),
             "output": count(model.output)}
    patch = jax.ShapeDtypeStruct((1, *m.patch_size, m.in_channels),
                                 builders.COMPUTE_DTYPES[config.precision])
    levels = [{"level": i, "filters": f, "size": [s // 2**i for s in m.patch_size]}
              for i, f in enumerate(m.filters)]
    return {"name": config.name, "type": "unet3d", "patch_size": list(m.patch_size),
            "in_channels": m.in_channels, "num_classes": m.num_classes,
            "parameters": {**parts, "total": count(model)}, "levels": levels,
            "multiply_adds": {"total": module_macs(model, patch)},
            "sliding_window": m.sliding_window.model_dump()}


def format_unet3d_summary(d: dict) -> str:
    p = d["parameters"]
    parts = ", ".join(f"{name.replace('_', ' ')} {value:,}" for name, value in p.items()
                      if name != "total")
    widths = ", ".join(f"{lv['filters']} @ {'x'.join(map(str, lv['size']))}"
                       for lv in d["levels"])
    sw = d["sliding_window"]
    return "\n".join([
        f"{d['name'] or 'config'}: 3D U-Net, {d['num_classes']} classes (background "
        f"included), {d['in_channels']} input channel(s), patch "
        f"{'x'.join(map(str, d['patch_size']))}",
        f"parameters: {p['total']:,} ({parts})",
        f"levels (channels @ size): {widths}",
        f"multiply-adds per patch: {d['multiply_adds']['total'] / 1e9:.2f} G",
        f"sliding window: overlap {sw['overlap']}, Gaussian sigma {sw['sigma_scale']} x patch, "
        f"{sw['batch_size']} window(s) per batch",
    ])


__all__ = ["build_unet3d", "build_unet3d_task", "format_unet3d_summary",
           "unet3d_fingerprint_fields", "unet3d_summary"]
