"""The ``model`` section of ``model.type: unet3d``: 3D U-Nets for volumetric segmentation, the
MLPerf training reference's (KiTS19 kidney and tumour) and the Cloud TPU reference's 128^3
one (re-exported by ``schema.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import Strict

# The MLPerf training reference's widths (image_segmentation, KiTS19): five levels and the
# bottleneck, which keeps the last width.
MLPERF_FILTERS = (32, 64, 128, 256, 320, 320)
# The Cloud TPU reference's (tensorflow/tpu models/official/unet3d, depth 4, 32 base filters):
# the first convolution of each level; the second doubles it.
TPU_REFERENCE_FILTERS = (32, 64, 128, 256)
# What each architecture allows, its default first, and the defaults it gives the other fields
NORMS = {"mlperf": ("instance_norm",), "tpu_reference": ("batch_norm",)}
ARCHITECTURE_DEFAULTS: dict[str, dict[str, Any]] = {
    "mlperf": {},
    "tpu_reference": {"filters": TPU_REFERENCE_FILTERS, "norm": "batch_norm",
                      "norm_epsilon": 1e-3, "negative_slope": 0.0},
}


class UNet3DLossConfig(Strict):
    """The training loss of ``model.type: unet3d``, by ``name``:

    * ``dice_ce`` (default): ``dice_weight`` x softmax Dice loss + ``ce_weight`` x
      cross-entropy. The Dice loss is 1 - Dice per example and class (sums over the patch's
      voxels, 1e-6 added to numerator and denominator), averaged over the classes (without the
      background class unless ``include_background``) and the batch; the cross-entropy is the
      mean over voxels and batch. MLPerf's loss is ``(dice + ce) / 2``: weights 0.5 and 0.5
      give exactly its numbers.

    * ``adaptive_dice``: the Cloud TPU reference's ``adaptive_dice32``
      (``tasks.unet3d.segmentation.adaptive_dice_loss``): a Dice per class over the whole batch,
      every class (background included) weighted by ``exp(-dice)``. One number per batch, not a sum
      over examples: ``train.accumulate_steps`` must stay 1 with it (the builder refuses
      more). ``dice_weight``, ``ce_weight`` and ``include_background`` are not used."""

    name: Literal["dice_ce", "adaptive_dice"] = "dice_ce"
    dice_weight: float = Field(1.0, ge=0.0)
    ce_weight: float = Field(1.0, ge=0.0)
    include_background: bool = False


class SlidingWindowConfig(Strict):
    """Inference over a whole volume: patches of ``model.patch_size`` whose starts are evenly
    spaced from the first to the last voxel with at least ``overlap`` of a patch shared by
    neighbours (nnU-Net's positions); each patch's softmax probabilities are weighted by a
    Gaussian of standard deviation ``sigma_scale`` x the patch size (nnU-Net's 1/8) and the
    weighted sums divided by the summed weights. ``batch_size`` patches go through the network
    at once. A volume smaller than the patch is padded with zeros and cropped back."""

    overlap: float = Field(0.5, ge=0.0, lt=1.0)
    sigma_scale: float = Field(0.125, gt=0.0)
    batch_size: int = Field(1, ge=1)


class UNet3DModelConfig(Strict):
    """3D U-Net (``model.type: unet3d``); ``architecture`` picks the network:

    * ``mlperf`` (default), as the MLPerf training reference builds it for KiTS19
      (``tasks.unet3d.model``): one level per entry of ``filters`` (the last one is the
      bottleneck), each two conv-norm-activation blocks of 3x3x3 convolutions without bias,
      instance norm with a learned scale and offset (``norm_epsilon``), leaky ReLU
      (``negative_slope``). Every level below the first begins with a stride-2 3x3x3
      convolution; each decoder level begins with a stride-2 2x2x2 transposed convolution
      (with bias) and concatenates the encoder's map of its level before its two blocks; a
      1x1x1 convolution gives ``num_classes`` logits per voxel.

    * ``tpu_reference``, the Cloud TPU reference's 128^3 network (tensorflow/tpu
      ``models/official/unet3d``, ``tasks.unet3d.tpu_reference``): level l is a 3x3x3
      convolution (with bias) of ``filters[l]`` channels and one of ``2 filters[l]``, each
      followed by BatchNorm and ReLU; 2x2x2 max pooling between levels; each decoder level a
      2x2x2 stride-2 transposed convolution keeping its input's width, concatenation with the
      encoder's map and two conv-BatchNorm-ReLU blocks of the skip's width (``2
      filters[l]``); a 1x1x1 convolution to the logits. Its defaults differ: ``filters``
      [32, 64, 128, 256] (the reference's depth 4 from 32 base filters), ``norm``
      ``batch_norm`` (the only one allowed), ``norm_epsilon`` 1e-3 (Keras'),
      ``negative_slope`` 0 (ReLU). ``norm_momentum`` (0.99, Keras') is the running
      statistics' decay.

    ``norm``: ``instance_norm`` (mlperf) or ``batch_norm`` (tpu_reference); each architecture
    allows its own only. Both have ``len(filters)`` levels and halve the resolution
    ``len(filters) - 1`` times. ``num_classes`` counts the background class (e.g. 3 for
    KiTS19: background, kidney, tumour). Inputs are NDHWC with ``in_channels`` channels;
    training patches are ``patch_size`` (D, H, W) voxels, each divisible by 2 to the power
    (number of levels - 1). ``class_names``: names of classes 1 .. num_classes - 1 for metrics
    and pictures (default ``class_1``, ...; KiTS19: kidney, tumor). ``conv_lowering``: how 3D
    convolutions are computed, with the same parameters and numbers: ``native`` (XLA's 3D
    convolution: cuDNN on GPUs, the TPU's convolution units), ``depth_stacked`` (a 2D
    convolution over depth taps stacked as channels: about 10x faster on XLA:CPU), ``auto``
    (depth_stacked on the CPU backend, native elsewhere)."""

    type: Literal["unet3d"]
    architecture: Literal["mlperf", "tpu_reference"] = "mlperf"
    num_classes: int = Field(ge=2)
    class_names: tuple[str, ...] = ()
    in_channels: int = Field(1, ge=1)
    filters: tuple[int, ...] = Field(MLPERF_FILTERS, min_length=2)
    norm: Literal["instance_norm", "batch_norm"] = "instance_norm"
    norm_epsilon: float = Field(1e-5, gt=0.0)
    norm_momentum: float = Field(0.99, gt=0.0, lt=1.0)
    negative_slope: float = Field(0.01, ge=0.0)
    patch_size: tuple[int, int, int] = (128, 128, 128)
    conv_lowering: Literal["auto", "native", "depth_stacked"] = "auto"
    loss: UNet3DLossConfig = UNet3DLossConfig()
    sliding_window: SlidingWindowConfig = SlidingWindowConfig()

    @model_validator(mode="before")
    @classmethod
    def _architecture_defaults(cls, data: Any) -> Any:
        """The fields an architecture gives other defaults (``ARCHITECTURE_DEFAULTS``), where
        the config leaves them out."""
        if isinstance(data, dict):
            defaults = ARCHITECTURE_DEFAULTS.get(data.get("architecture", "mlperf"), {})
            data = {**defaults, **data}
        return data

    @model_validator(mode="after")
    def _patch_divides(self) -> UNet3DModelConfig:
        allowed = NORMS[self.architecture]
        if self.norm not in allowed:
            raise ValueError(f"model.norm={self.norm} with model.architecture="
                             f"{self.architecture}: allowed {', '.join(allowed)}")
        if self.class_names and len(self.class_names) != self.num_classes - 1:
            raise ValueError(f"class_names has {len(self.class_names)} names but num_classes "
                             f"{self.num_classes} needs {self.num_classes - 1} (background "
                             "is class 0 and has no name)")
        if min(self.filters) < 1:
            raise ValueError(f"filters {list(self.filters)}: every level needs >= 1 channel")
        stride = 2 ** (len(self.filters) - 1)
        bad = [p for p in self.patch_size if p < 1 or p % stride]
        if bad:
            raise ValueError(f"patch_size {list(self.patch_size)}: with {len(self.filters)} "
                             f"levels every side must be a positive multiple of {stride}")
        return self


__all__ = ["ARCHITECTURE_DEFAULTS", "MLPERF_FILTERS", "NORMS", "SlidingWindowConfig",
           "TPU_REFERENCE_FILTERS", "UNet3DLossConfig", "UNet3DModelConfig"]
