"""Faster R-CNN's network, FPN variant (TF OD API ``faster_rcnn_resnet*_fpn_keras``).

First stage: a ResNet's levels ``min_level`` .. 5 through an FPN (``models.necks.fpn``; levels
above 5 by stride-2 convs), all ``depth`` channels. The RPN runs on every level: one 3x3 conv
(``rpn_depth``, bias) + ReLU6 shared by the levels (TF's ``first_stage_box_predictor_first_conv``
is one Keras layer called per level), then per level its own 1x1 objectness (``2 k``) and box
(``4 k``) convs (TF's Keras ``ConvolutionalBoxPredictor`` builds one head per feature map).

Second stage (TF's ``get_box_classifier_feature_extractor_model``): each proposal's crop from
its level, max-pooled by the task, flattened, a fully connected layer of ``fc_depth`` units +
ReLU, BatchNorm, another ``fc_depth`` + ReLU; then the box predictor (``model.BoxPredictor``).

Same methods as ``model.FasterRCNN`` (the task calls them), except that :meth:`first_stage`
returns the list of FPN maps, finest first, where the C4 network returns one map.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxdet.core.portable import reduce_window_2d
from jaxdet.models import initializers
from jaxdet.models.layers import BatchNormParams, batch_norm, conv
from jaxdet.tasks.faster_rcnn.model import BoxPredictor


class MultiLevelRPNHead(nnx.Module):
    """The shared 3x3 conv + ReLU6 and one pair of 1x1 convs (objectness ``2 k``, boxes
    ``4 k``) per level; truncated-normal(``stddev``) kernels, zero biases."""

    def __init__(self, in_channels: int, depth: int, anchors_per_location: int,
                 num_levels: int, *, kernel_size: int = 3, stddev: float = 0.01, dtype=None,
                 rngs: nnx.Rngs):
        init = initializers.truncated_normal(stddev)
        k = anchors_per_location

        def conv1x1(channels):
            return conv(depth, channels, 1, use_bias=True, kernel_init=init, dtype=dtype,
                        rngs=rngs)

        self.conv = conv(in_channels, depth, kernel_size, use_bias=True, padding="same",
                         kernel_init=init, dtype=dtype, rngs=rngs)
        self.objectness = nnx.List([conv1x1(2 * k) for _ in range(num_levels)])
        self.box = nnx.List([conv1x1(4 * k) for _ in range(num_levels)])

    def __call__(self, maps: list[jax.Array]) -> tuple[jax.Array, jax.Array]:
        """FPN maps ``[B, h_l, w_l, C]`` -> (objectness ``[B, A, 2]``, boxes ``[B, A, 4]``),
        anchors in (level, y, x, anchor) order."""
        objectness, boxes = [], []
        for x, obj_conv, box_conv in zip(maps, self.objectness, self.box, strict=True):
            y = jax.nn.relu6(self.conv(x))
            objectness.append(obj_conv(y).reshape(x.shape[0], -1, 2))
            boxes.append(box_conv(y).reshape(x.shape[0], -1, 4))
        return jnp.concatenate(objectness, axis=1), jnp.concatenate(boxes, axis=1)


class FCBoxClassifier(nnx.Module):
    """Flatten -> Dense(``depth``) + ReLU -> BatchNorm -> Dense(``depth``) + ReLU (Keras'
    default initializers: Glorot-uniform kernels, zero biases)."""

    def __init__(self, in_features: int, depth: int, *, batch_norm_params: BatchNormParams,
                 dtype=None, rngs: nnx.Rngs):
        glorot = initializers.glorot_uniform()
        zeros = initializers.zeros_init()
        self.fc1 = nnx.Linear(in_features, depth, kernel_init=glorot, bias_init=zeros,
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        self.bn = batch_norm(depth, batch_norm_params, dtype=dtype, rngs=rngs)
        self.fc2 = nnx.Linear(depth, depth, kernel_init=glorot, bias_init=zeros,
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """``[N, h, w, C]`` pooled crops -> ``[N, 1, 1, depth]`` (TF's Reshape)."""
        y = jax.nn.relu(self.fc1(x.reshape(x.shape[0], -1)))
        y = jax.nn.relu(self.fc2(self.bn(y)))
        return y[:, None, None, :]


class FasterRCNNFPN(nnx.Module):
    """``backbone`` (a ResNet), ``neck`` (an FPN), ``rpn`` (:class:`MultiLevelRPNHead`),
    ``box_classifier`` (:class:`FCBoxClassifier`) and ``box_predictor``."""

    mask_head = None

    def __init__(self, backbone: nnx.Module, neck: nnx.Module, *, num_classes: int,
                 anchors_per_location: int, crop_size: int, rpn_depth: int = 512,
                 rpn_kernel_size: int = 3, rpn_stddev: float = 0.01, fc_depth: int = 1024,
                 batch_norm_params: BatchNormParams, share_box_across_classes: bool = False,
                 maxpool_kernel_size: int = 2, maxpool_stride: int = 2, dtype=None,
                 rngs: nnx.Rngs):
        self.backbone = backbone
        self.neck = neck
        self.levels = tuple(sorted(neck.out_channels))
        self.maxpool_kernel_size = maxpool_kernel_size
        self.maxpool_stride = maxpool_stride
        depth = neck.out_channels[self.levels[0]]
        self.rpn = MultiLevelRPNHead(depth, rpn_depth, anchors_per_location, len(self.levels),
                                     kernel_size=rpn_kernel_size, stddev=rpn_stddev,
                                     dtype=dtype, rngs=rngs)
        pooled = (crop_size - maxpool_kernel_size) // maxpool_stride + 1
        self.box_classifier = FCBoxClassifier(pooled * pooled * depth, fc_depth,
                                              batch_norm_params=batch_norm_params, dtype=dtype,
                                              rngs=rngs)
        self.box_predictor = BoxPredictor(fc_depth, num_classes,
                                          share_box_across_classes=share_box_across_classes,
                                          dtype=dtype, rngs=rngs)

    def features(self, images: jax.Array) -> list[jax.Array]:
        """The FPN maps ``[B, H / 2**l, W / 2**l, depth]``, finest level first."""
        maps = self.neck(self.backbone(images))
        return [maps[level] for level in self.levels]

    def first_stage(self, images: jax.Array) -> tuple[list[jax.Array], jax.Array, jax.Array]:
        """(FPN maps, objectness logits ``[B, A, 2]``, box codes ``[B, A, 4]``)."""
        maps = self.features(images)
        objectness, boxes = self.rpn(maps)
        return maps, objectness, boxes

    def box_classifier_features(self, crops: jax.Array) -> jax.Array:
        """Crops ``[N, S, S, depth]`` -> max pool -> :class:`FCBoxClassifier` ->
        ``[N, 1, 1, fc_depth]``."""
        k, s = self.maxpool_kernel_size, self.maxpool_stride
        x = reduce_window_2d(crops, -float("inf"), jax.lax.max, (k, k), (s, s), "VALID")
        return self.box_classifier(x)

    def box_head(self, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``[N, 1, 1, fc_depth]`` -> (class logits ``[N, num_classes + 1]``, box codes
        ``[N, C', 4]``)."""
        return self.box_predictor(jnp.mean(features, axis=(1, 2)))

    def predict_masks(self, features: jax.Array) -> jax.Array:
        raise ValueError("the FPN faster_rcnn has no mask head")

    def __call__(self, images: jax.Array, *, rngs: nnx.Rngs | None = None):
        return self.first_stage(images)[1:]


__all__ = ["FCBoxClassifier", "FasterRCNNFPN", "MultiLevelRPNHead"]
