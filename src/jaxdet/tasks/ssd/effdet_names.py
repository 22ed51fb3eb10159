"""One-to-one mapping between an EfficientDet ``state_dict`` of the PyTorch ``effdet``
package (``tf_efficientdet_d0`` ... ``tf_efficientdet_d7x``, ports of the official TF
checkpoints) and jaxdet's ``SSDDetector`` built from an ``efficientdet_d*`` config.

The backbone (timm names) and the BiFPN (effdet names) mirror the PyTorch attributes, so
their keys are the generic ``torch_names`` ones with ``neck`` read as ``fpn``. The box
predictor is jaxdet's ``WeightSharedBoxPredictor``; its names are translated::

    class_net.conv_rep.{i}.conv_dw.weight  <->  head/class_tower/{i}/depthwise/kernel
    class_net.conv_rep.{i}.conv_pw.bias    <->  head/class_tower/{i}/pointwise/bias
    class_net.bn_rep.{i}.{l}.bn.weight     <->  head/class_norms/{i}/{l}/scale
    class_net.predict.conv_pw.weight       <->  head/class_predictor/pointwise/kernel

(``box_net`` / ``box_*`` likewise). Anchors agree too: per location, scale outer and aspect
ratio inner, effdet's (1.4, 0.7) being jaxdet's aspect ratio 2.0; boxes are (ty, tx, th, tw).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
from flax import nnx

from jaxdet.interop import torch_names

_RENAMES = (
    (r"^neck\.", "fpn."),
    (r"^head\.(box|class)_tower\.(\d+)\.depthwise\.", r"\1_net.conv_rep.\2.conv_dw."),
    (r"^head\.(box|class)_tower\.(\d+)\.pointwise\.", r"\1_net.conv_rep.\2.conv_pw."),
    (r"^head\.(box|class)_norms\.(\d+)\.(\d+)\.", r"\1_net.bn_rep.\2.\3.bn."),
    (r"^head\.(box|class)_predictor\.depthwise\.", r"\1_net.predict.conv_dw."),
    (r"^head\.(box|class)_predictor\.pointwise\.", r"\1_net.predict.conv_pw."),
)


def _effdet_key(key: str) -> str:
    for pattern, replacement in _RENAMES:
        key, n = re.subn(pattern, replacement, key)
        if n:
            return key
    return key


def effdet_state_dict_map(detector: nnx.Module) -> dict[str, tuple[tuple, str]]:
    """``{effdet_key: (our_param_path, transform)}`` over every Param and BatchStat of an
    EfficientDet ``SSDDetector`` (see ``torch_names.torch_state_dict_map`` for transforms)."""
    mapping = {}
    for key, target in torch_names.torch_state_dict_map(detector).items():
        mapping[_effdet_key(key)] = target
    return mapping


def load_effdet_state_dict(
    detector: nnx.Module, state_dict: Mapping[str, np.ndarray], *, strict: bool = True
) -> list[str]:
    """Copy an effdet ``state_dict`` (values as numpy arrays) into ``detector`` in place;
    returns the keys that were not used (with ``strict``, any unused or missing key raises).
    The class predictor's width must match: build the config with effdet's ``num_classes``."""
    return torch_names.load_state_dict(
        detector, state_dict, strict=strict, key_map=effdet_state_dict_map(detector)
    )
