"""Faster R-CNN's network, C4 variant (TF OD API ``faster_rcnn_resnet*_keras``): one ResNet
split in two. The first stage runs the stem and stages conv2-conv4 (stride 16) to the map the
RPN reads and the second stage crops; the RPN is a 3x3 conv (``depth``, bias) + ReLU6 and two
1x1 convs per anchor: objectness (2 logits: background, object) and box codes (4). The second
stage runs the ResNet's conv5 stage on each (cropped, max-pooled) proposal, averages it over
space and predicts ``num_classes + 1`` class logits and box codes per class (or one shared
box), as TF's ``MaskRCNNBoxPredictor`` (``share_box_across_classes``).

With ``mask_head`` (Mask R-CNN, TF's ``MaskRCNNMaskHead``), the conv5 map of each proposal
(before the spatial mean) also feeds :class:`MaskHead`, one mask of logits per class.

The task (``tasks.faster_rcnn.task``) calls :meth:`FasterRCNN.first_stage` and
:meth:`FasterRCNN.second_stage` with the proposal logic in between; ``__call__`` (first stage
only) exists for summaries.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.core.portable import reduce_window_2d
from jaxdet.core.roi_ops import matmul_crop_and_resize
from jaxdet.models import initializers, remat
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.models.layers import conv, max_pool_symmetric, zeros

xavier_uniform = initializers.variance_scaling(1.0, "fan_avg", "uniform")


class RPNHead(nnx.Module):
    """3x3 conv (``depth``, bias, TF ``SAME``) + ReLU6, then 1x1 objectness (``2 k``) and box
    (``4 k``) convs, all truncated-normal(``stddev``) initialised with zero biases (the zoo
    configs' ``first_stage_box_predictor_conv_hyperparams``)."""

    def __init__(self, in_channels: int, depth: int, anchors_per_location: int, *,
                 kernel_size: int = 3, stddev: float = 0.01, dtype=None, rngs: nnx.Rngs):
        init = initializers.truncated_normal(stddev)
        k = anchors_per_location
        self.conv = conv(in_channels, depth, kernel_size, use_bias=True, padding="same",
                         kernel_init=init, dtype=dtype, rngs=rngs)
        self.objectness = conv(depth, 2 * k, 1, use_bias=True, kernel_init=init, dtype=dtype,
                               rngs=rngs)
        self.box = conv(depth, 4 * k, 1, use_bias=True, kernel_init=init, dtype=dtype,
                        rngs=rngs)

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``x [B, h, w, C]`` -> (objectness ``[B, h*w*k, 2]``, boxes ``[B, h*w*k, 4]``) in the
        anchor order (y, x, anchor)."""
        y = jax.nn.relu6(self.conv(x))
        b = x.shape[0]
        return self.objectness(y).reshape(b, -1, 2), self.box(y).reshape(b, -1, 4)


class BoxPredictor(nnx.Module):
    """TF ``MaskRCNNBoxPredictor`` on pooled features ``[N, C]``: class logits
    ``[N, num_classes + 1]`` and box codes ``[N, C', 4]`` (``C'`` = num_classes, or 1 with
    ``share_box_across_classes``); Glorot-uniform fully connected layers, zero biases."""

    def __init__(self, in_features: int, num_classes: int, *, share_box_across_classes: bool,
                 dtype=None, rngs: nnx.Rngs):
        self.num_boxes = 1 if share_box_across_classes else num_classes
        self.cls = nnx.Linear(in_features, num_classes + 1, kernel_init=xavier_uniform,
                              bias_init=zeros,
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.box = nnx.Linear(in_features, 4 * self.num_boxes, kernel_init=xavier_uniform,
                              bias_init=zeros,
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.cls(x), self.box(x).reshape(x.shape[0], self.num_boxes, 4)


def mask_prediction_conv_depth(num_feature_channels: int, num_classes: int) -> int:
    """TF's automatic mask head depth (``mask_prediction_conv_depth: 0``): 2 to the rounded
    weighted mean of log2(feature channels) (weight 2) and log2(classes) (weight 3)."""
    log = (2.0 * math.log2(num_feature_channels) + 3.0 * math.log2(num_classes)) / 5.0
    return int(2.0 ** round(log))


def resize_bilinear_align_corners(x: jax.Array, size: tuple[int, int]) -> jax.Array:
    """``tf.image.resize_bilinear(x, size, align_corners=True)`` of ``x [N, h, w, C]``: the
    crop-and-resize of the whole map (the same sample grid)."""
    boxes = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0, 1.0], x.dtype), (x.shape[0], 1, 4))
    return matmul_crop_and_resize(x, boxes, size, method="matmul")[:, 0]


class MaskHead(nnx.Module):
    """TF's ``MaskRCNNMaskHead`` on box classifier maps ``[N, h, w, C]`` -> mask logits
    ``[N, num_masks, mask_height, mask_width]`` (``num_masks``: ``num_classes``, or 1 class
    agnostic). Without ``convolve_then_upsample``: bilinear resize (align corners) to the mask
    size, ``num_conv_layers - 1`` 3x3 convs (``depth``, bias) + ReLU, a 3x3 conv to the masks.
    With it: the convs at the map's size, nearest-neighbour upsampling by ``upsample`` (the
    integer factors to the mask size), a 3x3 conv + ReLU, the last conv. Truncated-normal
    (``stddev``) kernels, zero biases, no normalization (the zoo configs'
    ``conv_hyperparams``)."""

    def __init__(self, in_channels: int, num_classes: int, *, mask_height: int,
                 mask_width: int, depth: int, num_conv_layers: int,
                 class_agnostic: bool = False, convolve_then_upsample: bool = False,
                 upsample: tuple[int, int] = (1, 1), stddev: float = 0.01, dtype=None,
                 rngs: nnx.Rngs):
        init = initializers.truncated_normal(stddev)
        self.mask_size = (mask_height, mask_width)
        self.convolve_then_upsample = convolve_then_upsample
        self.upsample = tuple(upsample)
        self.num_masks = 1 if class_agnostic else num_classes

        def conv3(cin, cout):
            return conv(cin, cout, 3, use_bias=True, padding="same", kernel_init=init,
                        dtype=dtype, rngs=rngs)

        convs, c = [], in_channels
        for _ in range(num_conv_layers - 1):
            convs.append(conv3(c, depth))
            c = depth
        self.convs = nnx.List(convs)
        self.upsample_conv = conv3(c, depth) if convolve_then_upsample else None
        self.last = conv3(depth if convolve_then_upsample else c, self.num_masks)

    def __call__(self, x: jax.Array) -> jax.Array:
        if not self.convolve_then_upsample:
            x = resize_bilinear_align_corners(x, self.mask_size)
        for layer in self.convs:
            x = jax.nn.relu(layer(x))
        if self.convolve_then_upsample:
            x = jnp.repeat(jnp.repeat(x, self.upsample[0], axis=1), self.upsample[1], axis=2)
            x = jax.nn.relu(self.upsample_conv(x))
        return jnp.transpose(self.last(x), (0, 3, 1, 2))


def box_classifier(backbone: nnx.Module, x: jax.Array) -> jax.Array:
    """The backbone's second-stage part on max-pooled crops ``[N, h, w, C4]``: ResNet's conv5
    stage, or the ``box_classifier`` of a network split as TF splits it
    (Inception-ResNet-v2)."""
    if hasattr(backbone, "box_classifier"):
        return backbone.box_classifier(x)
    return remat.run_blocks(backbone.blocks_by_level()[5], x)


class FasterRCNN(nnx.Module):
    """``backbone`` (a :class:`ResNet`, whose ``layer4`` is the box classifier, or a network
    with ``first_stage`` / ``box_classifier`` methods: Inception-ResNet-v2), ``rpn``,
    ``box_predictor`` and, for Mask R-CNN, ``mask_head`` (a :class:`MaskHead` or None; see the
    module docstring)."""

    def __init__(self, backbone: ResNet, *, num_classes: int, anchors_per_location: int,
                 rpn_depth: int = 512, rpn_kernel_size: int = 3, rpn_stddev: float = 0.01,
                 share_box_across_classes: bool = False, maxpool_kernel_size: int = 2,
                 maxpool_stride: int = 2, mask_head: MaskHead | None = None, dtype=None,
                 rngs: nnx.Rngs):
        self.backbone = backbone
        self.neck = None  # read by models.remat.set_remat
        self.maxpool_kernel_size = maxpool_kernel_size
        self.maxpool_stride = maxpool_stride
        self.rpn = RPNHead(backbone.out_channels[4], rpn_depth, anchors_per_location,
                           kernel_size=rpn_kernel_size, stddev=rpn_stddev, dtype=dtype,
                           rngs=rngs)
        self.box_predictor = BoxPredictor(backbone.out_channels[5], num_classes,
                                          share_box_across_classes=share_box_across_classes,
                                          dtype=dtype, rngs=rngs)
        self.mask_head = mask_head

    def features(self, images: jax.Array) -> jax.Array:
        """The stride-16 map (end of conv4) ``[B, H/16, W/16, C4]``."""
        b = self.backbone
        if hasattr(b, "first_stage"):  # a network split as TF splits it (Inception-ResNet-v2)
            return b.first_stage(images)
        x = b.act(b.bn1(b.conv1(images)))
        if b.padding == "same":  # as ResNet.__call__: TF's SAME stem pool
            x = reduce_window_2d(x, -float("inf"), jax.lax.max, (3, 3), (2, 2), "SAME")
        else:
            x = max_pool_symmetric(x, 3, 2)
        blocks = b.blocks_by_level()
        for level in (2, 3, 4):
            x = remat.run_blocks(blocks[level], x)
        return x

    def first_stage(self, images: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(features, objectness logits ``[B, A, 2]``, box codes ``[B, A, 4]``)."""
        x = self.features(images)
        objectness, boxes = self.rpn(x)
        return x, objectness, boxes

    def box_classifier_features(self, crops: jax.Array) -> jax.Array:
        """Crops ``[N, S, S, C4]`` (``initial_crop_size``) -> max pool -> conv5: the box
        classifier's map ``[N, h5, w5, C5]``."""
        k, s = self.maxpool_kernel_size, self.maxpool_stride
        x = reduce_window_2d(crops, -float("inf"), jax.lax.max, (k, k), (s, s), "VALID")
        return box_classifier(self.backbone, x)

    def box_head(self, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Box classifier map -> spatial mean -> (class logits ``[N, num_classes + 1]``, box
        codes ``[N, C', 4]``)."""
        return self.box_predictor(jnp.mean(features, axis=(1, 2)))

    def second_stage(self, crops: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Crops ``[N, S, S, C4]`` -> :meth:`box_classifier_features` -> :meth:`box_head`."""
        return self.box_head(self.box_classifier_features(crops))

    def predict_masks(self, features: jax.Array) -> jax.Array:
        """Box classifier maps ``[N, h5, w5, C5]`` -> mask logits ``[N, num_masks, mh, mw]``."""
        if self.mask_head is None:
            raise ValueError("this Faster R-CNN has no mask head "
                             "(model.predict_instance_masks: false)")
        return self.mask_head(features)

    def __call__(self, images: jax.Array, *, rngs: nnx.Rngs | None = None):
        return self.first_stage(images)[1:]


__all__ = ["BoxPredictor", "FasterRCNN", "MaskHead", "RPNHead", "box_classifier",
           "mask_prediction_conv_depth", "resize_bilinear_align_corners"]
