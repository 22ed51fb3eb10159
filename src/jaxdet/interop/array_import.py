"""Named arrays copied into a model: a PyTorch state dict, or the variables of a jaxdet
workdir's checkpoint, by a map ``{key: (jaxdet variable path, transform)}``.

    report = load_torch_weights(model, "resnet50.safetensors", family.torch_detector_map,
                                restore="classification", model_type="ssd")

A whole detector's map is its family's (passed in as ``detector_map``); a backbone alone and a
workdir's variables (by variable path, no transform) are mapped here. Every name and shape is
checked before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.interop import torch_names
from jaxdet.interop.tf_checkpoint import CheckpointError
from jaxdet.interop.tf_import import ImportReport
from jaxdet.interop.tfod_names import variables_of
from jaxdet.interop.torch_files import read_torch_weights
from jaxdet.interop.torch_names import TorchDetectorMap, variable_at

DetectorMap = Callable[..., TorchDetectorMap | None]


def copy_arrays(model: nnx.Module, source: str, arrays: Mapping[str, np.ndarray],
                mapping: dict[str, tuple[tuple, str]], restore: str, *, where: str,
                expected_unused: Callable[[str], bool],
                detection_paths: frozenset[str] | None = None) -> ImportReport:
    """Copy ``arrays[key]``, in jaxdet's layout by the mapping's transform (see
    ``torch_names.to_ours``), into the variable at the path ``mapping[key]`` names, for every
    key of ``mapping``. Every name and shape is checked before anything is written: a key
    missing from ``arrays`` is an error, a shape that differs is re-initialised with ``restore:
    fitting`` and an error otherwise. With ``restore: detection`` only the variables whose
    '/'-joined paths are in ``detection_paths`` (the feature extractors, as TF2 restores
    them) are read; the others keep their values and are reported re-initialised. Keys of
    ``arrays`` outside ``mapping`` are reported unused unless ``expected_unused(key)``.
    ``source`` and ``where`` ("in the file") name where the arrays came from in errors."""
    left: list[str] = []
    if restore == "detection":
        if detection_paths is None:
            raise ValueError("restore: detection needs the paths of the feature extractors")
        kept = {k: v for k, v in mapping.items()
                if "/".join(map(str, v[0])) in detection_paths}
        left = sorted("/".join(map(str, v[0])) for k, v in mapping.items() if k not in kept)
        whole, expected = mapping, expected_unused
        expected_unused = lambda k: k in whole or expected(k)  # noqa: E731
        mapping = kept
    missing = [k for k in mapping if k not in arrays]
    if missing:
        raise CheckpointError(f"{source} does not fit this model: {len(missing)} of the "
                              f"{len(mapping)} tensors it needs are not {where}, e.g. "
                              f"{', '.join(missing[:3])}")
    planned = []  # (key, variable name, variable, value in our layout)
    for key, (target, transform) in mapping.items():
        planned.append((key, "/".join(map(str, target)), variable_at(model, target),
                        torch_names.to_ours(transform, arrays[key])))
    wrong = [p for p in planned if tuple(p[3].shape) != tuple(p[2].shape)]
    if wrong and restore != "fitting":
        key, name, variable, value = wrong[0]
        more = f" ({len(wrong)} tensors do not fit)" if len(wrong) > 1 else ""
        raise CheckpointError(f"{source}: {key} has shape {tuple(arrays[key].shape)} (as "
                              f"jaxdet's {tuple(value.shape)}) but {name} is "
                              f"{tuple(variable.shape)}{more}")
    report = ImportReport(source)
    for _, name, variable, value in planned:
        if tuple(value.shape) != tuple(variable.shape):
            report.reinitialized.append(name)
            continue
        variable[...] = jnp.asarray(value, variable.dtype)
        report.restored.append(name)
    report.reinitialized += left
    report.unused = sorted(k for k in arrays if k not in mapping and not expected_unused(k))
    return report


def load_torch_weights(model: nnx.Module, path: str | os.PathLike, detector_map: DetectorMap,
                       *, restore: str, model_type: str,
                       detection_paths: frozenset[str] | None = None) -> ImportReport:
    """A PyTorch state dict (``.safetensors`` / ``.pth``) into ``model``. ``restore:
    classification``: the backbone alone, from a torchvision ResNet or timm MobileNet /
    EfficientNet classifier (its classifier keys are left unused) or from the backbone of a
    whole detector's file (``backbone.body.*`` of a torchvision detector, ``backbone.*`` of an
    effdet EfficientDet; its other keys are not reported unused). Otherwise a whole detector,
    by ``detector_map(model, state, source=path)`` (the family's, ``model_type`` naming it in
    errors; None: the family reads no such file).

    Raises:
      CheckpointError: a file that is not a detector the family maps (saying whether its
        backbone could be restored alone), a missing tensor or one of another shape."""
    path = os.fspath(path)
    state = read_torch_weights(path)
    prefix = torch_names.backbone_prefix(state)
    if restore != "classification":
        found = detector_map(model, state, source=path)
        if found is not None:
            return copy_arrays(model, path, found.state, found.mapping, restore,
                               where="in the file", expected_unused=found.expected_unused,
                               detection_paths=detection_paths)
        if prefix:
            raise CheckpointError(f"{path} holds a whole detector's state dict that "
                                  f"model.type={model_type!r} has no map for: restore "
                                  "its backbone alone with restore: classification")
        raise CheckpointError(f"{path} holds a backbone (classifier) state dict: restore it "
                              "with restore: classification")
    mapping = {prefix + k: (("backbone", *p), t) for k, (p, t) in
               torch_names.torch_state_dict_map(model.backbone).items()}
    return copy_arrays(
        model, path, state, mapping, restore, where="in the file",
        expected_unused=lambda k: k.endswith("num_batches_tracked") or (
            bool(prefix) and not k.startswith(prefix)))


def load_variables(model: nnx.Module, source: str, arrays: Mapping[str, np.ndarray], *,
                   restore: str, detection_paths: frozenset[str] | None = None
                   ) -> ImportReport:
    """A jaxdet checkpoint's variables (``{'/'-joined variable path: array}``, as
    ``train.workdir_variables.latest_variables`` reads them from ``source``) into ``model``
    by path, no transform; ``restore: classification`` takes the backbone's alone,
    ``detection`` those in ``detection_paths`` (see :func:`copy_arrays`)."""
    mapping = {"/".join(map(str, path)): (path, "identity") for path in variables_of(model)}
    if restore == "classification":
        mapping = {k: v for k, v in mapping.items() if k.startswith("backbone/")}
    return copy_arrays(
        model, source, arrays, mapping, restore, where="in its checkpoint",
        expected_unused=lambda k: restore == "classification" and not k.startswith("backbone/"),
        detection_paths=detection_paths)


__all__ = ["DetectorMap", "copy_arrays", "load_torch_weights", "load_variables"]
