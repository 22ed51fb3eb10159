"""One-to-one mapping between PyTorch ``state_dict`` keys (torchvision / timm) and our
parameters.

Our modules mirror the PyTorch attribute names, so a key is the module path joined by dots
plus the PyTorch leaf name::

    layer1.0.downsample.0.weight  <->  ('layer1', 0, 'downsample', 0, 'kernel')   'conv'
    layer1.0.bn1.running_var      <->  ('layer1', 0, 'bn1', 'var')                 'identity'

Transforms (apply with :func:`to_ours`):

* ``conv``: OIHW -> HWIO, ``transpose(2, 3, 1, 0)``.
* ``dwconv``: grouped / depthwise conv; torch ``(C_out, C_in/groups, kh, kw)`` -> ours
  ``(kh, kw, C_in/groups, C_out)``: the same permutation, named apart so an importer can
  tell them apart in logs.
* ``linear``: ``(out, in)`` -> ``(in, out)``.
* ``identity``: biases, norm scales and running statistics, and bare parameters: an
  ``nnx.Param`` attribute ``attr`` of any other module maps to ``<module path>.<attr>``
  (a PyTorch ``nn.Parameter`` attribute, e.g. effdet's BiFPN ``edge_weights``).
* ``box_conv_xywh`` / ``box_bias_xywh``: a box-regression conv's kernel / bias whose output
  channels hold, per anchor, torchvision's ``(dx, dy, dw, dh)``: ``conv`` / ``identity``, then
  each group of 4 output channels reordered to jaxdet's ``(ty, tx, th, tw)``.

``num_batches_tracked`` has no counterpart and is skipped by :func:`load_state_dict`.

A whole detector's state dict holds its classifier backbone's keys under a prefix
(:func:`backbone_prefix`: ``backbone.body.`` in a torchvision detector's, ``backbone.`` in an
effdet EfficientDet's); the family that builds such a detector maps the rest of it
(``TaskFamily.torch_detector_map``, returning a :class:`TorchDetectorMap`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from flax import nnx

Path = tuple[str | int, ...]

TORCHVISION_DETECTOR_BACKBONE = "backbone.body."
EFFDET_BACKBONE = "backbone."
_EFFDET_PARTS = ("fpn.", "class_net.", "box_net.")


def is_torchvision_detector(keys: Iterable[str]) -> bool:
    """Whether a state dict's keys are a torchvision detector's (``backbone.body.*``: the
    ResNet of RetinaNet, Faster R-CNN, ...)."""
    return any(k.startswith(TORCHVISION_DETECTOR_BACKBONE) for k in keys)


def is_effdet_detector(keys: Iterable[str]) -> bool:
    """Whether a state dict's keys are an effdet EfficientDet's (``fpn.*``, ``class_net.*``,
    ``box_net.*``; its timm EfficientNet under ``backbone.``)."""
    return any(k.startswith(_EFFDET_PARTS) for k in keys)


def backbone_prefix(keys: Iterable[str]) -> str:
    """Where the classifier backbone's keys start in a state dict: ``backbone.body.`` in a
    torchvision detector's, ``backbone.`` in an effdet EfficientDet's, ``""`` in a
    classifier's (a torchvision ResNet, a timm MobileNet or EfficientNet)."""
    keys = list(keys)
    if is_torchvision_detector(keys):
        return TORCHVISION_DETECTOR_BACKBONE
    if is_effdet_detector(keys):
        return EFFDET_BACKBONE
    return ""


@dataclass(frozen=True)
class TorchDetectorMap:
    """A whole detector's state dict as a family maps it onto its model: ``state`` (the
    file's arrays, keys renamed as ``mapping`` names them), ``mapping`` ``{key: (jaxdet
    variable path, transform)}`` and ``expected_unused(key)``: whether a key of ``state``
    outside ``mapping`` goes unreported (``num_batches_tracked``)."""

    state: dict[str, np.ndarray]
    mapping: dict[str, tuple[Path, str]]
    expected_unused: Callable[[str], bool]

_PERMUTATIONS: dict[str, tuple[int, ...] | None] = {
    "conv": (2, 3, 1, 0),
    "dwconv": (2, 3, 1, 0),
    "linear": (1, 0),
    "identity": None,
    "box_conv_xywh": (2, 3, 1, 0),
    "box_bias_xywh": None,
}
_XY_SWAPPED = ("box_conv_xywh", "box_bias_xywh")


def to_ours(transform: str, array) -> np.ndarray:
    """Convert one PyTorch tensor (as a numpy array) to our layout."""
    perm = _PERMUTATIONS[transform]
    array = np.asarray(array)
    out = array if perm is None else np.transpose(array, perm)
    if transform in _XY_SWAPPED:  # output channels last: (x, y, w, h) -> (y, x, h, w)
        shape = out.shape
        out = out.reshape(*shape[:-1], shape[-1] // 4, 4)[..., [1, 0, 3, 2]].reshape(shape)
    return out


def torch_shape_to_ours(transform: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    perm = _PERMUTATIONS[transform]
    return tuple(shape) if perm is None else tuple(shape[i] for i in perm)


def torch_state_dict_map(model: nnx.Module) -> dict[str, tuple[Path, str]]:
    """``{torch_key: (our_param_path, transform)}`` covering every Param and BatchStat of
    ``model`` exactly once. Raises if a variable lives in a module type it cannot name."""
    mapping: dict[str, tuple[Path, str]] = {}

    def add(path: Path, torch_leaf: str, our_leaf: str, transform: str):
        key = ".".join(str(p) for p in (*path, torch_leaf))
        if key in mapping:
            raise ValueError(f"duplicate PyTorch key {key}")
        mapping[key] = ((*path, our_leaf), transform)

    for path, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Conv):
            add(path, "weight", "kernel", "dwconv" if module.feature_group_count > 1 else "conv")
            if module.bias is not None:
                add(path, "bias", "bias", "identity")
        elif isinstance(module, nnx.BatchNorm):
            add(path, "weight", "scale", "identity")
            add(path, "bias", "bias", "identity")
            add(path, "running_mean", "mean", "identity")
            add(path, "running_var", "var", "identity")
        elif isinstance(module, nnx.GroupNorm):
            add(path, "weight", "scale", "identity")
            add(path, "bias", "bias", "identity")
        elif isinstance(module, nnx.Linear):
            add(path, "weight", "kernel", "linear")
            if module.bias is not None:
                add(path, "bias", "bias", "identity")
        else:
            # A bare nn.Parameter of a custom PyTorch module (e.g. BiFPN ``edge_weights``).
            for name, value in vars(module).items():
                if isinstance(value, nnx.Param):
                    add(path, name, name, "identity")

    ours = {path for path, _ in nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat)))}
    mapped = {path for path, _ in mapping.values()}
    if ours != mapped:
        unmapped = sorted(map(str, ours - mapped))[:10]
        unknown = sorted(map(str, mapped - ours))[:10]
        raise ValueError(
            "torch_state_dict_map does not cover the model one-to-one; "
            f"unmapped: {unmapped}, unknown: {unknown}"
        )
    return mapping


def variable_at(model: nnx.Module, path: Path) -> nnx.Variable:
    """The variable of ``model`` at ``path`` (attribute names and list indices)."""
    obj = model
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj


def load_state_dict(
    model: nnx.Module,
    state_dict: Mapping[str, np.ndarray],
    *,
    strict: bool = True,
    ignore_prefixes: tuple[str, ...] = (),
    key_map: Mapping[str, tuple[Path, str]] | None = None,
) -> list[str]:
    """Copy a PyTorch ``state_dict`` (values as numpy arrays) into ``model`` in place.

    Keys ending in ``num_batches_tracked`` or starting with one of ``ignore_prefixes`` (e.g.
    ``("fc.",)`` for a torchvision classifier) are ignored; with ``strict`` every other key must
    map and every parameter must be given. ``key_map`` replaces :func:`torch_state_dict_map`
    (e.g. ``tasks.ssd.effdet_names.effdet_state_dict_map``). Returns the state_dict keys not used.
    """
    mapping = torch_state_dict_map(model) if key_map is None else key_map
    unused = []
    for key, value in state_dict.items():
        if key.endswith("num_batches_tracked") or key.startswith(ignore_prefixes):
            continue
        if key not in mapping:
            unused.append(key)
            continue
        path, transform = mapping[key]
        array = to_ours(transform, value)
        variable = variable_at(model, path)
        if array.shape != variable.shape:
            raise ValueError(
                f"{key}: shape {np.shape(value)} -> {array.shape} does not fit "
                f"{'/'.join(map(str, path))} {variable.shape}"
            )
        variable[...] = jnp.asarray(array, variable.dtype)
    missing = sorted(set(mapping) - set(state_dict))
    if strict and (unused or missing):
        raise ValueError(f"state_dict mismatch: unexpected {unused[:10]}, missing {missing[:10]}")
    return unused
