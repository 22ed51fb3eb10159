"""Build a 3D U-Net task from a ``model.type: unet3d`` config."""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from jaxdet.backends import dispatch
from jaxdet.config import schema as S
from jaxdet.config.schema_base import fingerprint_dump
from jaxdet.core.precision import compute_dtype
from jaxdet.models.abstract import abstract_build, model_rngs
from jaxdet.models.inspect import module_macs
from jaxdet.tasks.unet3d.memory import GIB, compiled_step_memory
from jaxdet.tasks.unet3d.model import UNet3D
from jaxdet.tasks.unet3d.task import UNet3DTask
from jaxdet.tasks.unet3d.tpu_reference import TPUReferenceUNet3D
from jaxdet.train import build as train_build

# The summary's parameter parts, input to output, of both architectures
SUMMARY_PARTS = ("input_block", "downsample", "bottleneck", "upsample", "encoder", "decoder",
                 "output")


def build_unet3d(config: S.Config, *, seed: int) -> UNet3D | TPUReferenceUNet3D:
    """The network of ``config.model`` by ``model.architecture`` (``mlperf``: :class:`UNet3D`,
    ``tpu_reference``: :class:`TPUReferenceUNet3D`; compute dtype from ``config.precision``)."""
    m = config.model
    if config.train.remat:
        raise ValueError(f"train.remat={list(config.train.remat)}: the 3D U-Net has no "
                         "recomputable parts yet; leave train.remat empty")
    common = {"negative_slope": m.negative_slope, "epsilon": m.norm_epsilon,
              "dtype": compute_dtype(config.precision),
              "conv_lowering": conv_lowering(m.conv_lowering, config.parallel),
              "rngs": model_rngs(seed)}
    if m.architecture == "tpu_reference":
        return TPUReferenceUNet3D(m.in_channels, m.num_classes, m.filters,
                                  momentum=m.norm_momentum, **common)
    return UNet3D(m.in_channels, m.num_classes, m.filters, **common)


def conv_lowering(setting: str, parallel: S.ParallelConfig | None = None) -> str:
    """``model.conv_lowering`` resolved for the backend and mesh: ``auto`` is
    ``depth_stacked`` on the CPU backend (XLA:CPU's 3D convolution is about 10x slower than
    its 2D one) and ``native`` on GPU and TPU, and on any mesh that splits depth together
    with height or width (where XLA mis-partitions the stacked form's gradients;
    ``depth_stacked`` is refused there)."""
    axes = tuple(parallel.spatial_axes or (parallel.spatial,)) if parallel else (1,)
    mixed = axes[0] > 1 and any(a > 1 for a in axes[1:])
    if setting == "depth_stacked" and mixed:
        raise ValueError(f"model.conv_lowering=depth_stacked with parallel.spatial_axes="
                         f"{list(axes)}: split depth alone or height / width alone, or use "
                         "conv_lowering native (XLA mis-partitions the stacked convolution's "
                         "gradients when depth and another side are both split)")
    if setting != "auto":
        return setting
    return "native" if mixed else dispatch.default_conv3d_lowering()


def build_unet3d_task(config: S.Config, *, seed: int) -> UNet3DTask:
    """The network (:func:`build_unet3d`) and its task. ``model.loss.name: adaptive_dice``
    (one Dice per class over the whole batch) refuses ``train.accumulate_steps`` > 1: the
    micro-batches' losses would not add up to the whole batch's."""
    m = config.model
    if m.loss.name == "adaptive_dice" and config.train.accumulate_steps > 1:
        raise ValueError(f"train.accumulate_steps={config.train.accumulate_steps} with "
                         "model.loss.name=adaptive_dice: that loss's Dice sums run over the "
                         "whole batch, so micro-batches cannot add up to it; use "
                         "train.accumulate_steps 1 or model.loss.name dice_ce")
    return UNet3DTask(
        model=build_unet3d(config, seed=seed), input_size=tuple(m.patch_size),
        num_classes=m.num_classes, in_channels=m.in_channels, loss_name=m.loss.name,
        class_names=tuple(m.class_names) or tuple(
            f"class_{k}" for k in range(1, m.num_classes)),
        dice_weight=m.loss.dice_weight, ce_weight=m.loss.ce_weight,
        include_background=m.loss.include_background, overlap=m.sliding_window.overlap,
        sigma_scale=m.sliding_window.sigma_scale,
        window_batch_size=m.sliding_window.batch_size,
        compute_dtype=compute_dtype(config.precision), seed=seed)


def unet3d_fingerprint_fields(config: S.Config) -> dict[str, Any]:
    """What fixes the checkpoint's tensors: the type, classes, input channels, level widths
    and norm, and the architecture when it is not ``mlperf`` (left out there, so checkpoints
    written before it existed keep their fingerprint). The patch size is left out: the
    network is fully convolutional, so a checkpoint serves any patch (unlike the detectors,
    whose anchors follow the input size)."""
    dumped = fingerprint_dump(config.model)
    keep = ("type", "num_classes", "in_channels", "filters", "norm")
    fields = {k: dumped[k] for k in keep}
    if config.model.architecture != "mlperf":
        fields["architecture"] = config.model.architecture
    return {"model": fields}


def train_step_memory(config: S.Config) -> dict:
    """Memory of one train step of ``config`` at its patch size and ``train.batch_size`` on
    one device of the default backend, from XLA's compiled program (nothing runs;
    ``tasks.unet3d.memory.compiled_step_memory``): ``{"batch_size", "backend", "total_gib",
    "temp_gib", "argument_gib", "compile_seconds"}``."""

    task = build_unet3d_task(config, seed=0)
    tx, schedule = train_build.build_optimizer(config.train)
    found = compiled_step_memory(task, tx, schedule, batch_size=config.train.batch_size,
                                 mesh=None, ema_decay=config.train.ema_decay,
                                 loss_scale=train_build.build_loss_scale(config))
    return {"batch_size": config.train.batch_size, "backend": jax.default_backend(),
            "total_gib": found["total_bytes"] / GIB, "temp_gib": found["temp_bytes"] / GIB,
            "argument_gib": found["argument_bytes"] / GIB,
            "compile_seconds": found["compile_seconds"]}


def unet3d_summary(config: S.Config, *, flops: bool = True, **_: Any) -> dict:
    """``jaxdet summary`` for the 3D U-Net: parameters per part, the widths and map sizes of
    every level, the multiply-adds of one patch (``models.inspect``) and, unless
    ``flops`` is False, the train step's memory at the configured patch size and batch
    (:func:`train_step_memory`: a compile, no run). The model is built abstractly: no
    weights are computed for the counts."""

    model = abstract_build(lambda: build_unet3d(config, seed=0))
    m = config.model

    def count(module) -> int:
        return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(module, nnx.Param)))

    # one part per top-level attribute holding parameters, input to output (mlperf:
    # input_block, downsample, bottleneck, upsample, output; tpu_reference: encoder, decoder,
    # output; any other after them)
    found = {name: count(value) for name, value in vars(model).items()
             if isinstance(value, nnx.Module) and count(value)}
    order = {name: i for i, name in enumerate(SUMMARY_PARTS)}
    parts = {name: found[name]
             for name in sorted(found, key=lambda n: (order.get(n, len(order)), n))}
    patch = jax.ShapeDtypeStruct((1, *m.patch_size, m.in_channels),
                                 compute_dtype(config.precision))
    # a level's output width: f (mlperf), 2 f (tpu_reference: the second conv doubles it)
    widen = 2 if m.architecture == "tpu_reference" else 1
    levels = [{"level": i, "filters": widen * f, "size": [s // 2**i for s in m.patch_size]}
              for i, f in enumerate(m.filters)]
    summary = {"name": config.name, "type": "unet3d", "architecture": m.architecture,
               "patch_size": list(m.patch_size),
               "in_channels": m.in_channels, "num_classes": m.num_classes,
               "parameters": {**parts, "total": count(model)}, "levels": levels,
               "multiply_adds": {"total": module_macs(model, patch)},
               "sliding_window": m.sliding_window.model_dump()}
    if flops:
        summary["train_step_memory"] = train_step_memory(config)
    return summary


def format_unet3d_summary(d: dict) -> str:
    p = d["parameters"]
    parts = ", ".join(f"{name.replace('_', ' ')} {value:,}" for name, value in p.items()
                      if name != "total")
    widths = ", ".join(f"{lv['filters']} @ {'x'.join(map(str, lv['size']))}"
                       for lv in d["levels"])
    sw = d["sliding_window"]
    return "\n".join([
        f"{d['name'] or 'config'}: 3D U-Net ({d.get('architecture', 'mlperf')}), "
        f"{d['num_classes']} classes (background "
        f"included), {d['in_channels']} input channel(s), patch "
        f"{'x'.join(map(str, d['patch_size']))}",
        f"parameters: {p['total']:,} ({parts})",
        f"levels (channels @ size): {widths}",
        f"multiply-adds per patch: {d['multiply_adds']['total'] / 1e9:.2f} G",
        f"sliding window: overlap {sw['overlap']}, Gaussian sigma {sw['sigma_scale']} x patch, "
        f"{sw['batch_size']} window(s) per batch",
    ] + ([] if "train_step_memory" not in d else [
        "train step memory at batch {batch_size} on one {backend} device: {total_gib:.2f} GiB "
        "({temp_gib:.2f} GiB activations and scratch; XLA's compiled analysis, "
        "parallel.spatial splits it)".format(**d["train_step_memory"])]))


__all__ = ["SUMMARY_PARTS", "build_unet3d", "build_unet3d_task", "format_unet3d_summary",
           "train_step_memory", "unet3d_fingerprint_fields", "unet3d_summary"]
