"""Rules that pick parameters by path: which initializer draws them, how much weight decay
they get (``train.initializers``, ``train.optimizer.weight_decay_rules``).

A parameter's path is the '/'-joined key path of the model's parameter tree, e.g.
``backbone/blocks/3/0/conv_dw/kernel``. A :class:`ParamPattern` matches a parameter when its
regex is found in the path (``re.search``) and, if ``depthwise`` is set, when the parameter is
(``True``) or is not (``False``) a depthwise convolution's kernel. The first rule that matches
decides; a rule that matches nothing is an error (:func:`check_every_rule_matches`).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import jax
import numpy as np
from flax import nnx

from jaxdet.models.initializers import InitSpec, draw


@dataclass(frozen=True)
class ParamPattern:
    """A regex over parameter paths, optionally narrowed to depthwise kernels or to the rest."""

    pattern: str
    depthwise: bool | None = None

    def matches(self, path: str, shape: Sequence[int]) -> bool:
        if self.depthwise is not None and is_depthwise_kernel(path, shape) != self.depthwise:
            return False
        return re.search(self.pattern, path) is not None


def is_depthwise_kernel(path: str, shape: Sequence[int]) -> bool:
    """Whether a parameter is a depthwise 2D convolution's kernel: an HWIO ``kernel`` of shape
    ``(kh, kw, 1, C)`` with a window larger than 1x1 (every jaxdet model takes 3 channels in,
    so no plain convolution has one input channel)."""
    return (path.rsplit("/", 1)[-1] == "kernel" and len(shape) == 4 and shape[2] == 1
            and shape[0] * shape[1] > 1)


def first_match(patterns: Sequence[ParamPattern], path: str, shape: Sequence[int]) -> int | None:
    """The index of the first pattern that matches the parameter, or None."""
    for i, p in enumerate(patterns):
        if p.matches(path, shape):
            return i
    return None


def check_every_rule_matches(patterns: Sequence[ParamPattern],
                             params: Iterable[tuple[str, Sequence[int]]], field: str) -> None:
    """Raise ``ValueError`` naming ``field`` and the first rule that matches no parameter of
    ``params`` ((path, shape) pairs), with example paths."""
    params = list(params)
    for k, p in enumerate(patterns):
        if not any(p.matches(path, shape) for path, shape in params):
            examples = ", ".join(path for path, _ in params[:2] + params[-2:])
            narrowed = "" if p.depthwise is None else f" (depthwise: {p.depthwise})"
            raise ValueError(f"{field}[{k}]: params {p.pattern!r}{narrowed} matches no "
                             f"parameter; paths look like {examples}")


def _model_params(model: nnx.Module) -> list[tuple[str, nnx.Param]]:
    out = []
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Param):
            out.append(("/".join(str(k) for k in path), node))
    return out


def apply_initializer_rules(model: nnx.Module,
                            rules: Sequence[tuple[ParamPattern, InitSpec]],
                            seed: int, *, field: str = "train.initializers") -> dict[int, int]:
    """Redraw, in place, every parameter of ``model`` that a rule matches with that rule's
    initializer (the first matching rule wins). Draws are a function of ``seed`` and the
    parameter's path. Returns ``{rule index: parameters drawn}``.

    Raises:
      ValueError: a rule matches no parameter (the message names ``field`` and the rule).
    """
    if not rules:
        return {}
    params = _model_params(model)
    patterns = [pattern for pattern, _ in rules]
    check_every_rule_matches(patterns, ((path, p.shape) for path, p in params), field)
    counts: dict[int, int] = {}
    for path, param in params:
        k = first_match(patterns, path, param.shape)
        if k is None:
            continue
        rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(path.encode())])
        values = draw(rules[k][1], param.shape, rng,
                      depthwise=is_depthwise_kernel(path, param.shape))
        param[...] = jax.device_put(values.astype(np.dtype(param[...].dtype), copy=False))
        counts[k] = counts.get(k, 0) + 1
    return counts
