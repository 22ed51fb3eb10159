"""Where each tensor of a TF OD API (TF2) CenterNet checkpoint goes in a jaxdet CenterNet.

The map is ``{tf object path: (jaxdet variable path, transform)}`` as for every family
(``interop.tfod_names``, whose helpers it uses); :func:`tf_name_map` is the family's
``TaskFamily.tf_name_map``. TF's ``CenterNetMetaArch`` holds:

* ``model/_feature_extractor``: for the ResNet-v1 FPN extractors (``resnet_v1_50_fpn``,
  ``resnet_v1_101_fpn``) the ``tf.keras.applications`` ResNet as ``_base_model`` (Keras'
  numbered layers, every conv with a bias: :func:`tfod_names.resnet_layers`) and the FPN as
  the numbered layers of ``_feature_extractor_model`` (its layer 0 is the ResNet itself):
  the top 1x1 conv, then per level 4, 3, 2 the lateral 1x1 conv, the 3x3 conv and its batch
  norm;
* ``model/_prediction_head_dict/<head>/<i>``: one Keras ``Sequential`` per head and feature
  output ``i`` (``layer_with_weights-0`` the 3x3 conv, ``-1`` the 1x1 conv); the heads are
  ``object_center``, ``box/scale``, ``box/offset`` and, per keypoint task,
  ``<task_name>/keypoint/heatmap``, ``.../keypoint/offset``, ``.../keypoint/regression``.
  jaxdet's task ``i`` (``model.keypoint_tasks[i]``) takes the heads of TF's task of the same
  name.

Input channels: the ResNet-v1 FPN extractors preprocess with
``tf.keras.applications.resnet.preprocess_input`` (caffe: RGB -> BGR, then the BGR ImageNet
means subtracted, no scaling). jaxdet normalizes RGB images (``data.mean`` [123.68, 116.779,
103.939], ``data.std`` 1), so the first conv's kernel takes its input channels reversed
(transform ``bgr_to_rgb``): the first conv then computes exactly what TF's does.

The hourglass, ResNet-v2 and MobileNetV2-FPN extractors have no map yet: their models raise
:class:`tfod_names.UnmappedModelError` naming the TF extractor.
"""

from __future__ import annotations

from collections.abc import Sequence

from flax import nnx

from jaxdet.config import schema as S
from jaxdet.interop.tfod_names import (
    Path,
    Target,
    UnmappedModelError,
    keras_numbered_targets,
    resnet_layers,
)
from jaxdet.models.backbones.hourglass import HOURGLASS_SPECS
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.tasks.center_net.neck_fpn import CenterNetFPN

FEATURE_EXTRACTOR = "model/_feature_extractor"
HEADS = "model/_prediction_head_dict"
# TF head name -> jaxdet module name (box heads) / KeypointHeads attribute (keypoint heads)
BOX_HEADS = {"object_center": "heatmap", "box/scale": "size", "box/offset": "offset"}
KEYPOINT_HEADS = {"keypoint/heatmap": "heatmap", "keypoint/offset": "offset",
                  "keypoint/regression": "regression"}
MAPPED_EXTRACTORS = ("resnet_v1_50_fpn", "resnet_v1_101_fpn")


def tf_extractor_name(model: nnx.Module) -> str:
    """The TF OD API ``feature_extractor.type`` a jaxdet CenterNet's backbone and neck
    correspond to (``resnet_v1_50_fpn``, ``hourglass_104``, ...), or a description of them."""
    backbone, neck = model.backbone, model.neck
    kind = type(backbone).__name__
    if isinstance(backbone, ResNet) and isinstance(neck, CenterNetFPN):
        return f"resnet_v1_{backbone.depth}_fpn"
    if kind == "ResNetV2":
        return f"resnet_v2_{backbone.depth}"
    if kind == "Hourglass":
        return next((n for n, s in HOURGLASS_SPECS.items() if s == backbone.spec), "hourglass")
    if kind == "MobileNetV2" and isinstance(neck, CenterNetFPN):
        return "mobilenet_v2_fpn"
    return f"{kind} + {type(neck).__name__}"


def _center_net_fpn(out: dict, neck: CenterNetFPN, prefix: str) -> None:
    """The ResNet-v1 FPN's Keras layers, numbered after the ResNet (layer 0): the top 1x1,
    then per level the lateral 1x1, the 3x3 conv and its batch norm."""
    if not all(isinstance(m, nnx.Conv) for m in neck.smooth):
        raise UnmappedModelError("CenterNet FPN with separable convs (mobilenet_v2_fpn)")
    layers: list[tuple[Path, nnx.Module]] = [(("neck", "top"), neck.top)]
    for i in range(len(neck.levels)):
        layers += [(("neck", "lateral", i), neck.lateral[i]),
                   (("neck", "smooth", i), neck.smooth[i]),
                   (("neck", "norms", i), neck.norms[i])]
    keras_numbered_targets(out, prefix, layers, start=1)


def _head(out: dict, tf_path: str, path: Path) -> None:
    """One prediction head: a Keras Sequential of the 3x3 conv and the 1x1 conv."""
    for n, layer in enumerate(("hidden", "out")):
        out[f"{tf_path}/layer_with_weights-{n}/kernel"] = ((*path, layer, "kernel"), "identity")
        out[f"{tf_path}/layer_with_weights-{n}/bias"] = ((*path, layer, "bias"), "identity")


def _heads(out: dict, model: nnx.Module, keypoint_tasks: Sequence[str]) -> None:
    """Every head set: TF's feature output ``i`` is jaxdet's ``intermediate_heads[i]``, the
    last one the model's own heads."""
    sets: list[Path] = [("intermediate_heads", i)
                        for i in range(len(getattr(model, "intermediate_heads", ())))]
    sets.append(())
    num_tasks = len(getattr(model, "keypoint_heads", ()))
    if len(keypoint_tasks) != num_tasks:
        raise ValueError(f"{len(keypoint_tasks)} keypoint task names for a model with "
                         f"{num_tasks} keypoint tasks")
    for i, at in enumerate(sets):
        for tf_name, ours in BOX_HEADS.items():
            _head(out, f"{HEADS}/{tf_name}/{i}", (*at, ours))
        for t, task in enumerate(keypoint_tasks):
            for tf_name, ours in KEYPOINT_HEADS.items():
                _head(out, f"{HEADS}/{task}/{tf_name}/{i}", (*at, "keypoint_heads", t, ours))


def center_net_detector_map(model: nnx.Module, *, keypoint_tasks: Sequence[str] = ()
                            ) -> dict[str, Target]:
    """``{tf object path: (jaxdet path, transform)}`` for a jaxdet CenterNet
    (``tasks.center_net.model.CenterNet``) built like a TF OD API CenterNet.

    Args:
      keypoint_tasks: the names of the model's keypoint tasks in order (TF's ``task_name``
        of each ``keypoint_estimation_task``: jaxdet's ``model.keypoint_tasks[i].name``).
    Raises:
      UnmappedModelError: a feature extractor without a map (named as TF names it).
    """
    extractor = tf_extractor_name(model)
    backbone, neck = model.backbone, model.neck
    if not (isinstance(backbone, ResNet) and isinstance(neck, CenterNetFPN)):
        raise UnmappedModelError(
            f"no TF checkpoint map yet for the CenterNet feature extractor {extractor!r} "
            f"(mapped: {', '.join(MAPPED_EXTRACTORS)})")
    first_block = backbone.layer2[0].conv1
    if backbone.conv1.bias is None or first_block.strides not in (2, (2, 2)):
        raise UnmappedModelError(
            f"the TF OD API's {extractor} is tf.keras' ResNet: build it with "
            "model.backbone.stride_in_1x1: true and conv_bias: true")
    out: dict[str, Target] = {}
    base = f"{FEATURE_EXTRACTOR}/_base_model"
    keras_numbered_targets(out, base, resnet_layers(backbone, ("backbone",)))
    first = f"{base}/layer_with_weights-0/kernel"
    out[first] = (out[first][0], "bgr_to_rgb")  # caffe preprocessing: TF's input is BGR
    _center_net_fpn(out, neck, f"{FEATURE_EXTRACTOR}/_feature_extractor_model")
    _heads(out, model, keypoint_tasks)
    return out


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """CenterNet's ``TaskFamily.tf_name_map``: :func:`center_net_detector_map` of ``model``,
    its keypoint tasks named as ``model.keypoint_tasks`` names them."""
    return center_net_detector_map(
        model, keypoint_tasks=[t.name for t in config.model.keypoint_tasks])


__all__ = ["MAPPED_EXTRACTORS", "center_net_detector_map", "tf_extractor_name", "tf_name_map"]
