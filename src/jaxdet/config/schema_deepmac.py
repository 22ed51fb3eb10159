"""``model.mask_head`` of ``model.type: center_net``: DeepMAC's instance masks (the TF OD API's
``DeepMACMetaArch``, ``center_net.proto`` ``DeepMACMaskEstimation``; re-exported by
``schema.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from jaxdet.config.schema_base import BatchNormConfig, Strict

# stages of each mask network (its input size must divide by 2 ** stages); the networks
# themselves: models.backbones.hourglass.MASK_NETWORKS
MASK_NETWORK_STAGES = {"hourglass10": 1, "hourglass20": 2, "hourglass32": 3, "hourglass52": 5,
                       "hourglass100": 5}
# TF's hourglass BatchNorm (Keras momentum 0.1, epsilon 1e-5), as the mask networks have it
HOURGLASS_BATCH_NORM = BatchNormConfig(decay=0.1, epsilon=1e-5)


class DeepMACMaskHeadConfig(Strict):
    """DeepMAC instance masks on a CenterNet (TF OD API ``deepmac_mask_estimation``; field
    names are TF's).

    Two more heads on every output the box heads read (one set per stack of a stacked
    hourglass, as TF): the instance embedding (``dim`` channels) and the pixel embedding
    (``pixel_embedding_dim``), each a 1x3 conv of ``head_depth`` + ReLU + 1x1 conv (TF builds
    them with 1x3 kernels). Per box: the pixel embeddings cropped at the box and resized to
    ``mask_size`` x ``mask_size`` (bilinear, box corners on the first / last samples), after
    2 channels of normalized (y, x) coordinates from -1 to 1 with ``use_xy``, and before the
    instance embedding at the box center, tiled, with ``use_instance_embedding``; the mask
    network (``network_type``: TF's single-stack hourglass of that depth without its
    downsampling stem, ``num_init_channels`` wide; ``mask_size`` must divide by 2 to the
    power of its stages: 2, 4, 8, 32, 32) and a 1x1 conv give the box's mask logits.
    ``batch_norm``: the mask network's own BatchNorms (by default TF's hourglass numbers,
    decay 0.1 and epsilon 1e-5).

    Training: the ground-truth boxes' masks, against each box's ground-truth mask cropped and
    resized the same way; sigmoid cross-entropy averaged per pixel, summed over the boxes
    whose class is in ``allowed_masked_classes`` (0-based class indices, TF's label-map id -
    1; empty: every class), divided by their number (at least 1), averaged over the stacks,
    times ``task_loss_weight``. Needs ``data.load_masks: true``. Predict: the mask of each of
    the ``max_detections`` detections from the last stack, as per-box probabilities
    ``[mask_size, mask_size]`` (COCO ``segm`` eval, pictures and ``jaxdet predict`` paste them
    into the image). ``predict_full_resolution_masks`` (TF: masks over the whole output map,
    cropped to ``postprocess_crop_size``) is not supported; ``postprocess_crop_size`` has no
    effect without it."""

    dim: int = Field(256, ge=1)
    pixel_embedding_dim: int = Field(16, ge=1)
    mask_size: int = Field(32, ge=2)
    use_xy: bool = True
    use_instance_embedding: bool = True
    network_type: Literal["hourglass10", "hourglass20", "hourglass32", "hourglass52",
                          "hourglass100"] = "hourglass52"
    num_init_channels: int = Field(64, ge=1)
    task_loss_weight: float = Field(1.0, ge=0.0)
    allowed_masked_classes: tuple[int, ...] = ()
    head_depth: int = Field(256, ge=1)
    batch_norm: BatchNormConfig = HOURGLASS_BATCH_NORM
    predict_full_resolution_masks: Literal[False] = False
    postprocess_crop_size: int = Field(256, ge=1)

    @model_validator(mode="after")
    def _mask_size_fits_the_network(self) -> DeepMACMaskHeadConfig:
        divisor = 2 ** MASK_NETWORK_STAGES[self.network_type]
        if self.mask_size % divisor:
            raise ValueError(f"mask_size {self.mask_size}: the {self.network_type} mask "
                             f"network halves its input {MASK_NETWORK_STAGES[self.network_type]}"
                             f" times; use a multiple of {divisor}")
        if any(c < 0 for c in self.allowed_masked_classes):
            raise ValueError(f"allowed_masked_classes {list(self.allowed_masked_classes)}: "
                             "class indices are 0-based")
        return self


__all__ = ["HOURGLASS_BATCH_NORM", "MASK_NETWORK_STAGES", "DeepMACMaskHeadConfig"]
