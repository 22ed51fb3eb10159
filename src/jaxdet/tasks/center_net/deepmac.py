"""DeepMAC on a CenterNet (the TF OD API's ``DeepMACMetaArch``): the mask network and the
task's mask part (targets, logits, loss, predicted masks), on a whole batch.

The instance and pixel embedding heads live with the other heads
(``model.py``: one set per output); the pure functions in ``deepmac_ops.py``.
Per box (``N`` ground-truth boxes in training, the ``D`` detections at predict time), the
mask network reads a ``mask_size`` x ``mask_size`` input (``deepmac_ops.mask_head_inputs``)
and gives one channel of mask logits over the box (box-relative, the Mask R-CNN convention:
row ``i`` of ``S`` at ``ymin + i / (S - 1) * (ymax - ymin)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.models.backbones.hourglass import Hourglass, mask_network_spec
from jaxdet.models.layers import BatchNormParams, conv
from jaxdet.tasks.center_net import deepmac_ops as dm


class MaskNetwork(nnx.Module):
    """TF's DeepMAC ``MaskHeadNetwork`` with an hourglass ``network_type``: the single-stack
    hourglass without its downsampling stem (``models.backbones.hourglass``, TF
    ``hourglass_N(num_init_channels, initial_downsample=False)``) and a 1x1 conv (bias) to
    one channel. ``__call__(x [M, S, S, in_channels]) -> [M, S, S]`` mask logits."""

    def __init__(self, network_type: str, in_channels: int, num_init_channels: int, *,
                 batch_norm: BatchNormParams, dtype=None, rngs: nnx.Rngs):
        spec = mask_network_spec(network_type, num_init_channels)
        self.net = Hourglass(spec, batch_norm=batch_norm, in_channels=in_channels,
                             initial_downsample=False, dtype=dtype, rngs=rngs)
        self.project_out = conv(spec.channels[0], 1, 1, use_bias=True, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.project_out(self.net.stack_outputs(x)[-1])[..., 0]


@dataclass(frozen=True)
class DeepMACHead:
    """The mask part of a CenterNet task (``model.mask_head`` with its classes resolved).

    Attributes:
      mask_size: S, the side of every box's mask (and of the mask network's input).
      use_xy / use_instance_embedding: the mask network's input channels
        (``tasks.center_net.deepmac_ops.mask_head_inputs``).
      allowed_classes: 0-based classes whose masks train the head (empty: every class).
      task_loss_weight: the mask loss's weight in the total.
      crop_method: ``core.roi_ops`` back-end of the crops (``gather`` or ``matmul``).
    """

    mask_size: int = 32
    use_xy: bool = True
    use_instance_embedding: bool = True
    allowed_classes: tuple[int, ...] = ()
    task_loss_weight: float = 1.0
    crop_method: str = "gather"

    def targets(self, batch: dict) -> dict:
        """``targets`` f32[B, N, S, S]: each ground-truth box's mask (batch ``masks`` u8[B, N,
        Hm, Wm]) cropped at the box; ``weights`` f32[B, N]: 1 for the valid, not ignored boxes
        of an allowed class."""
        valid = (batch["valid"] & ~batch["ignore"]).astype(jnp.float32)
        weights = dm.allowed_class_weights(batch["classes"], valid, self.allowed_classes)
        crops = dm.crop_instance_masks(batch["masks"], batch["boxes"], self.mask_size,
                                       method=self.crop_method)
        return {"targets": crops, "weights": weights}

    @staticmethod
    def normalizer(targets: dict) -> jax.Array:
        """max(1, the batch's number of boxes whose masks count), as TF divides."""
        return jnp.maximum(jnp.sum(targets["weights"]), 1.0)

    def logits(self, mask_net: nnx.Module, outputs: dict, boxes: jax.Array) -> jax.Array:
        """Mask logits [B, N, S, S] of ``boxes`` [B, N, 4] (normalized, gradients stopped)
        from one output's ``pixel_embedding`` / ``instance_embedding`` maps."""
        boxes = jax.lax.stop_gradient(boxes)
        inputs = dm.mask_head_inputs(outputs["pixel_embedding"], outputs["instance_embedding"],
                                     boxes, self.mask_size, use_xy=self.use_xy,
                                     use_instance_embedding=self.use_instance_embedding,
                                     method=self.crop_method)
        b, n = boxes.shape[:2]
        logits = mask_net(inputs.reshape(b * n, *inputs.shape[2:]))
        return logits.reshape(b, n, self.mask_size, self.mask_size)

    def loss(self, logits: jax.Array, targets: dict, normalizer: jax.Array) -> jax.Array:
        """The unweighted mask loss of one output (f32 scalar): per box the mean pixel
        sigmoid cross-entropy, weighted, summed, divided by ``normalizer``."""
        return dm.mask_loss_sum(logits, targets["targets"], targets["weights"]) / normalizer


__all__ = ["DeepMACHead", "MaskNetwork"]
