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
  for the hourglass extractors (``hourglass_10`` ... ``hourglass_104``) the
  ``keras_models/hourglass_network.py`` network as ``_network``, its variables named by
  attribute (:func:`hourglass_targets`): the stem ``downsample_input`` (``conv_input`` without
  the initial downsampling), per stack ``hourglass_network/<s>`` (the recursive
  encoder-decoder: ``encoder_block1`` the full-resolution branch, ``encoder_block2`` the
  downsampling one, ``inner_block`` the next stage, ``decoder_block``) and
  ``output_conv/<s>``, and between stacks ``intermediate_conv1/<s>`` (on the stack's input),
  ``intermediate_conv2/<s>`` (on its output) and ``intermediate_residual/<s>``. Every conv
  block is ``conv`` + ``norm``; a residual block ``conv_block``, ``conv``, ``norm`` and, when
  it has one, ``skip``. TF's network sees BGR (``bgr_ordering: true``, as every zoo config
  and checkpoint of these extractors has it; jaxdet's config keeps no channel order, so the
  map assumes it): the stem conv takes its input channels reversed;
* ``model/_prediction_head_dict/<head>/<i>``: one Keras ``Sequential`` per head and feature
  output ``i`` (``layer_with_weights-0`` the 3x3 conv, ``-1`` the 1x1 conv); the heads are
  ``object_center``, ``box/scale``, ``box/offset`` and, per keypoint task,
  ``<task_name>/keypoint/heatmap``, ``.../keypoint/offset``, ``.../keypoint/regression``
  (each one local name: ``box.Soffset`` in an object path, ``interop.tf_checkpoint.local_name``).
  jaxdet's task ``i`` (``model.keypoint_tasks[i]``) takes the heads of TF's task of the same
  name;
* DeepMAC (``DeepMACMetaArch``): the ``INSTANCE_EMBEDDING`` and ``PIXEL_EMBEDDING`` heads
  (per feature output, like the others) and ``model/_mask_net``: its hourglass as ``_net``
  (:func:`hourglass_targets`, stem ``conv_input``; it reads embeddings) and the 1x1 conv
  ``project_out``.

Input channels: the ResNet-v1 FPN extractors preprocess with
``tf.keras.applications.resnet.preprocess_input`` (caffe: RGB -> BGR, then the BGR ImageNet
means subtracted, no scaling). jaxdet normalizes RGB images (``data.mean`` [123.68, 116.779,
103.939], ``data.std`` 1), so the first conv's kernel takes its input channels reversed
(transform ``bgr_to_rgb``): the first conv then computes exactly what TF's does.

The ResNet-v2 and MobileNetV2-FPN extractors have no map yet: their models raise
:class:`tfod_names.UnmappedModelError` naming the TF extractor.
"""

from __future__ import annotations

from collections.abc import Sequence

from flax import nnx

from jaxdet.config import schema as S
from jaxdet.interop.tf_checkpoint import local_name
from jaxdet.interop.tfod_names import (
    Path,
    Target,
    UnmappedModelError,
    bn_targets,
    conv_targets,
    keras_numbered_targets,
    resnet_layers,
)
from jaxdet.models.backbones.hourglass import (
    HOURGLASS_SPECS,
    ConvBlock,
    EncoderDecoder,
    Hourglass,
    Residual,
)
from jaxdet.models.backbones.resnet import ResNet
from jaxdet.tasks.center_net.neck_fpn import CenterNetFPN

FEATURE_EXTRACTOR = "model/_feature_extractor"
HEADS = "model/_prediction_head_dict"
# TF head name -> jaxdet module name (box heads) / KeypointHeads attribute (keypoint heads)
BOX_HEADS = {"object_center": "heatmap", "box/scale": "size", "box/offset": "offset"}
KEYPOINT_HEADS = {"keypoint/heatmap": "heatmap", "keypoint/offset": "offset",
                  "keypoint/regression": "regression"}
EMBEDDING_HEADS = {"INSTANCE_EMBEDDING": "instance_embedding",
                   "PIXEL_EMBEDDING": "pixel_embedding"}  # DeepMAC's
MAPPED_EXTRACTORS = ("resnet_v1_50_fpn", "resnet_v1_101_fpn", *HOURGLASS_SPECS)


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


def _conv_block(out: dict, tf_path: str, block: ConvBlock, path: Path) -> None:
    """TF's ``ConvolutionalBlock``: ``conv`` (no bias) + ``norm``."""
    conv_targets(out, f"{tf_path}/conv", (*path, "conv"), block.conv)
    bn_targets(out, f"{tf_path}/norm", (*path, "norm"))


def _residual(out: dict, tf_path: str, block: Residual, path: Path) -> None:
    """TF's ``ResidualBlock``: ``conv_block``, ``conv`` + ``norm``, and ``skip`` (a conv
    block) where jaxdet's block has one."""
    _conv_block(out, f"{tf_path}/conv_block", block.conv_block, (*path, "conv_block"))
    conv_targets(out, f"{tf_path}/conv", (*path, "conv"), block.conv)
    bn_targets(out, f"{tf_path}/norm", (*path, "norm"))
    if block.skip is not None:
        _conv_block(out, f"{tf_path}/skip", block.skip, (*path, "skip"))


def _residuals(out: dict, tf_path: str, blocks, path: Path) -> None:
    """A Python list of TF ``ResidualBlock`` s (``<tf_path>/<i>``)."""
    for i, block in enumerate(blocks):
        _residual(out, f"{tf_path}/{i}", block, (*path, i))


def _encoder_decoder(out: dict, tf_path: str, stage: EncoderDecoder, path: Path) -> None:
    """TF's ``EncoderDecoderBlock``, recursively (its ``inner_block`` is a one-element list
    holding the next stage, or the innermost residual blocks)."""
    _residuals(out, f"{tf_path}/encoder_block1", stage.skip, (*path, "skip"))
    _residuals(out, f"{tf_path}/encoder_block2", stage.down, (*path, "down"))
    if isinstance(stage.inner, EncoderDecoder):
        _encoder_decoder(out, f"{tf_path}/inner_block/0", stage.inner, (*path, "inner"))
    else:
        _residuals(out, f"{tf_path}/inner_block", stage.inner, (*path, "inner"))
    _residuals(out, f"{tf_path}/decoder_block", stage.decode, (*path, "decode"))


def hourglass_targets(out: dict, tf_path: str, net: Hourglass, path: Path, *,
                      bgr: bool = False) -> None:
    """Add to ``out`` every variable of the hourglass ``net`` at jaxdet ``path``, saved as
    TF's ``HourglassNetwork`` at ``tf_path`` (see the module docstring); ``bgr``: TF's network
    sees BGR where jaxdet's sees RGB (the stem conv's input channels reversed)."""
    stem = "downsample_input" if net.stem.conv.kernel_size[0] == 7 else "conv_input"
    _conv_block(out, f"{tf_path}/{stem}/conv_block", net.stem, (*path, "stem"))
    if bgr:
        first = f"{tf_path}/{stem}/conv_block/conv/kernel"
        out[first] = (out[first][0], "bgr_to_rgb")
    _residual(out, f"{tf_path}/{stem}/residual_block", net.stem_residual,
              (*path, "stem_residual"))
    for s, stage in enumerate(net.hourglasses):
        _encoder_decoder(out, f"{tf_path}/hourglass_network/{s}", stage,
                         (*path, "hourglasses", s))
        _conv_block(out, f"{tf_path}/output_conv/{s}", net.output_convs[s],
                    (*path, "output_convs", s))
    for s in range(len(net.inter_residuals)):
        _conv_block(out, f"{tf_path}/intermediate_conv1/{s}", net.inter_inputs[s],
                    (*path, "inter_inputs", s))
        _conv_block(out, f"{tf_path}/intermediate_conv2/{s}", net.inter_outputs[s],
                    (*path, "inter_outputs", s))
        _residual(out, f"{tf_path}/intermediate_residual/{s}", net.inter_residuals[s],
                  (*path, "inter_residuals", s))


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
            _head(out, f"{HEADS}/{local_name(tf_name)}/{i}", (*at, ours))
        for tf_name, ours in EMBEDDING_HEADS.items():
            if hasattr(model, ours):
                _head(out, f"{HEADS}/{tf_name}/{i}", (*at, ours))
        for t, task in enumerate(keypoint_tasks):
            for tf_name, ours in KEYPOINT_HEADS.items():
                _head(out, f"{HEADS}/{local_name(f'{task}/{tf_name}')}/{i}",
                      (*at, "keypoint_heads", t, ours))


def _mask_net(out: dict, model: nnx.Module) -> None:
    """DeepMAC's ``MaskHeadNetwork`` (``model/_mask_net``): its hourglass ``_net`` (no
    downsampling stem: ``conv_input``) and the 1x1 ``project_out`` conv, where the model has
    one."""
    net = getattr(model, "mask_net", None)
    if net is None:
        return
    if not isinstance(net.net, Hourglass):
        raise UnmappedModelError(f"DeepMAC mask network {type(net.net).__name__}")
    hourglass_targets(out, "model/_mask_net/_net", net.net, ("mask_net", "net"))
    conv_targets(out, "model/_mask_net/project_out", ("mask_net", "project_out"),
                 net.project_out)


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
    if isinstance(backbone, Hourglass):
        out: dict[str, Target] = {}
        hourglass_targets(out, f"{FEATURE_EXTRACTOR}/_network", backbone, ("backbone",),
                          bgr=True)
        _heads(out, model, keypoint_tasks)
        _mask_net(out, model)
        return out
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
    _mask_net(out, model)
    return out


def tf_name_map(model: nnx.Module, config: S.Config) -> dict[str, Target]:
    """CenterNet's ``TaskFamily.tf_name_map``: :func:`center_net_detector_map` of ``model``,
    its keypoint tasks named as ``model.keypoint_tasks`` names them."""
    return center_net_detector_map(
        model, keypoint_tasks=[t.name for t in config.model.keypoint_tasks])


__all__ = ["MAPPED_EXTRACTORS", "center_net_detector_map", "tf_extractor_name", "tf_name_map"]
