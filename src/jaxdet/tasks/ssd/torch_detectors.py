"""Which whole-detector PyTorch state dicts the SSD family reads, and how: torchvision's
RetinaNet (``torchvision_names``) and effdet's EfficientDets (``effdet_names``).

:func:`torch_detector_map` is the family's ``TaskFamily.torch_detector_map``: ``weights``
asks it for a ``restore: full`` or ``detection`` from a torch file, and copies the tensors by
the map it returns. (A backbone alone, from any of these files or a classifier's, is
``weights``' shared path.)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flax import nnx

from jaxdet.interop import torch_names
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.torch_names import TorchDetectorMap
from jaxdet.tasks.ssd import torchvision_names as tv
from jaxdet.tasks.ssd.effdet_names import effdet_state_dict_map


def _batch_counter(key: str) -> bool:
    return key.endswith("num_batches_tracked")


def torch_detector_map(model: nnx.Module, state: Mapping[str, np.ndarray],
                       source: str) -> TorchDetectorMap | None:
    """The map of ``state`` (the file ``source``) onto the whole ``model``: a torchvision
    RetinaNet's (``backbone.body.*``, current or pre-0.13 names) or an effdet EfficientDet's
    (``fpn.*``, ``class_net.*``, ``box_net.*``); None for another file (a classifier's).
    Only ``num_batches_tracked`` keys are expected to be left unused.

    Raises:
      ValueError: a model part torchvision's RetinaNet has no counterpart for, naming the
        config that builds it.
      CheckpointError: a torchvision file with tensors the model has no place for.
    """
    if torch_names.is_torchvision_detector(state):
        state = tv.current_names(state)
        mapping = tv.torchvision_retinanet_state_dict_map(model)
        extra = [k for k in state if k not in mapping and not _batch_counter(k)]
        if extra:
            raise CheckpointError(f"{source} holds {len(extra)} tensors this model has no place "
                                  f"for, e.g. {', '.join(extra[:3])}; {tv.CONFIG_HINT}")
        return TorchDetectorMap(state, mapping, _batch_counter)
    if torch_names.is_effdet_detector(state):
        return TorchDetectorMap(dict(state), effdet_state_dict_map(model), _batch_counter)
    return None


__all__ = ["torch_detector_map"]
