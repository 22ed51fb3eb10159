"""Multiply-adds of a function, counted from its jaxpr (no compile, any backend).

The count is the convention of papers and of TF's profiler (the EfficientDet paper's "FLOPs"
are multiply-adds counted this way): every convolution costs ``output elements x kernel taps x
input channels per group`` and every matrix product ``output elements x contracted size``,
taps on zero padding included; elementwise work (batch norm, activations, feature fusion) is
not counted. Convolutions are traced without jaxdet's CPU rewrites
(``models.depthwise.reference_convolutions``), so the count is the same on every backend.
XLA's own ``cost_analysis()`` (``summary.compiled_flops``) is the other view: 2 FLOPs per
multiply-add, padding taps skipped, elementwise ops included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.extend import core as jex_core

from jaxdet.models.depthwise import reference_convolutions


def _conv_macs(eqn) -> int:
    out = eqn.outvars[0].aval.shape
    rhs = eqn.invars[1].aval.shape
    out_feature_dim = eqn.params["dimension_numbers"].rhs_spec[0]
    return math.prod(out) * (math.prod(rhs) // rhs[out_feature_dim])


def _dot_macs(eqn) -> int:
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    return math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in lhs_contract)


def _sub_jaxprs(value: Any) -> list:
    if isinstance(value, jex_core.ClosedJaxpr):
        return [value.jaxpr]
    if isinstance(value, jex_core.Jaxpr):
        return [value]
    if isinstance(value, (tuple, list)):
        return [j for v in value for j in _sub_jaxprs(v)]
    return []


def jaxpr_macs(jaxpr) -> int:
    """Multiply-adds of a (closed) jaxpr, recursing into calls; a ``scan`` body counts
    ``length`` times, a ``cond`` its costliest branch, a ``while`` body once."""
    if isinstance(jaxpr, jex_core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "conv_general_dilated":
            total += _conv_macs(eqn)
        elif name == "dot_general":
            total += _dot_macs(eqn)
        elif name == "cond":
            total += max((jaxpr_macs(b) for b in eqn.params["branches"]), default=0)
        else:
            inner = sum(jaxpr_macs(j) for v in eqn.params.values() for j in _sub_jaxprs(v))
            total += inner * (eqn.params.get("length", 1) if name == "scan" else 1)
    return total


def count_macs(fn: Callable, *args: Any) -> int:
    """Multiply-adds of ``fn(*args)``; ``args`` may be ``jax.ShapeDtypeStruct``s."""
    with reference_convolutions():
        return jaxpr_macs(jax.make_jaxpr(fn)(*args))
