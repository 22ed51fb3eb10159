"""One-to-one mapping between the ``state_dict`` of torchvision's RetinaNet
(``torchvision.models.detection.retinanet_resnet50_fpn``, e.g. its COCO checkpoint
``retinanet_resnet50_fpn_coco-eeacb38b.pth``) and jaxdet's ``SSDDetector`` built from
``configs/retinanet_resnet50_fpn_torchvision.yaml``.

The ResNet mirrors torchvision's attribute names (``torch_names``) under ``backbone.body``;
the FPN and the head are translated::

    backbone.fpn.inner_blocks.{i}.0.weight          <->  neck/lateral/{i}/kernel
    backbone.fpn.layer_blocks.{i}.0.bias            <->  neck/smoothing/{i}/conv/bias
    backbone.fpn.extra_blocks.p6.weight             <->  neck/extra/0/conv/kernel   (p7: 1)
    head.classification_head.conv.{j}.0.weight      <->  head/class_tower/{j}/kernel
    head.classification_head.cls_logits.bias        <->  head/class_predictor/bias
    head.regression_head.conv.{j}.0.weight          <->  head/box_tower/{j}/kernel
    head.regression_head.bbox_reg.weight            <->  head/box_predictor/kernel

Files written before torchvision 0.13 (the COCO checkpoint among them) name the FPN convs
without the inner ``.0`` (``inner_blocks.{i}.weight``) and the head's tower convs by their
place in a Sequential that held the ReLUs too (``conv.{2 j}.weight``);
:func:`current_names` renames them as torchvision's own ``_load_from_state_dict`` does.

Class logits need no reordering (channel ``a * K + k`` is anchor ``a``, class ``k`` in both;
with the ``torchvision_layout`` anchors, ``a`` is the same anchor). The box regression's
channels hold ``(dx, dy, dw, dh)`` per anchor; jaxdet's box coder reads ``(ty, tx, th, tw)``,
so ``bbox_reg`` is mapped with the ``box_*_xywh`` transforms, which swap them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
from flax import nnx

from jaxdet.interop import torch_names
from jaxdet.models.necks.fpn import FPN

Path = torch_names.Path

BACKBONE_PREFIX = torch_names.TORCHVISION_DETECTOR_BACKBONE
CONFIG_HINT = ("torchvision's RetinaNet is built by --config retinanet_resnet50_fpn_torchvision "
               "(FPN norm: none, smooth_top: true; head norm: none)")

_RENAMES = (
    (r"^neck\.lateral\.(\d+)\.", r"backbone.fpn.inner_blocks.\1.0."),
    (r"^neck\.smoothing\.(\d+)\.conv\.", r"backbone.fpn.layer_blocks.\1.0."),
    (r"^head\.class_tower\.(\d+)\.", r"head.classification_head.conv.\1.0."),
    (r"^head\.box_tower\.(\d+)\.", r"head.regression_head.conv.\1.0."),
    (r"^head\.class_predictor\.", "head.classification_head.cls_logits."),
    (r"^head\.box_predictor\.", "head.regression_head.bbox_reg."),
)
# pre-0.13 names (renamed as torchvision's _load_from_state_dict does)
_LEGACY_FPN = re.compile(r"^(backbone\.fpn\.(?:inner|layer)_blocks\.\d+)\.(weight|bias)$")
_LEGACY_HEAD = re.compile(
    r"^(head\.(?:classification|regression)_head\.conv)\.(\d+)\.(weight|bias)$")


def current_names(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``state`` with pre-0.13 FPN and head names renamed to the current ones (see the module
    docstring); current names are kept as they are."""
    out = {}
    for key, value in state.items():
        if match := _LEGACY_FPN.match(key):  # inner_blocks.{i}.weight -> inner_blocks.{i}.0.weight
            key = f"{match.group(1)}.0.{match.group(2)}"
        elif match := _LEGACY_HEAD.match(key):  # conv.{2 j}.weight -> conv.{j}.0.weight
            key = f"{match.group(1)}.{int(match.group(2)) // 2}.0.{match.group(3)}"
        out[key] = value
    return out


def _torchvision_key(key: str, extra_names: dict[str, str]) -> str | None:
    if key.startswith("backbone."):
        return BACKBONE_PREFIX + key[len("backbone."):]
    match = re.match(r"^neck\.extra\.(\d+)\.conv\.(weight|bias)$", key)
    if match:
        return f"backbone.fpn.extra_blocks.{extra_names[match.group(1)]}.{match.group(2)}"
    for pattern, replacement in _RENAMES:
        key, n = re.subn(pattern, replacement, key)
        if n:
            return key
    return None


def torchvision_retinanet_state_dict_map(detector: nnx.Module) -> dict[str, tuple[Path, str]]:
    """``{torchvision key: (jaxdet variable path, transform)}`` over every Param and BatchStat
    of a RetinaNet ``SSDDetector``. Transforms as ``torch_names.to_ours``. (The backbone alone,
    from any torchvision detector's file, is ``weights``' shared backbone path:
    ``torch_names.backbone_prefix``.)

    Raises:
      ValueError: a part or variable torchvision's RetinaNet has no counterpart for (another
        neck, a norm in the FPN or the head...), naming it and the config that fits.
    """
    neck = detector.neck
    if not isinstance(neck, FPN):
        raise ValueError(f"a {type(neck).__name__} neck has no counterpart in torchvision's "
                         f"RetinaNet; {CONFIG_HINT}")
    extra_names = {str(k): f"p{neck.top_level + 1 + k}" for k in range(len(neck.extra))}
    mapping: dict[str, tuple[Path, str]] = {}
    for key, (path, transform) in torch_names.torch_state_dict_map(detector).items():
        name = _torchvision_key(key, extra_names)
        if name is None:
            raise ValueError(f"{'/'.join(map(str, path))} has no counterpart in torchvision's "
                             f"RetinaNet; {CONFIG_HINT}")
        if name.startswith("head.regression_head.bbox_reg."):
            transform = "box_conv_xywh" if transform == "conv" else "box_bias_xywh"
        mapping[name] = (path, transform)
    return mapping

