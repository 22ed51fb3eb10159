"""What a module costs, read without training it: parameter counts, output shapes, XLA's FLOPs,
and multiply-adds counted from the jaxpr (no compile, any backend).

Multiply-adds:

The count is the convention of papers and of TF's profiler (the EfficientDet paper's "FLOPs"
are multiply-adds counted this way): every convolution costs ``output elements x kernel taps x
input channels per group`` and every matrix product ``output elements x contracted size``,
taps on zero padding included; elementwise work (batch norm, activations, feature fusion) is
not counted. Convolutions are traced without jaxdet's CPU rewrites
(``backends.trace.reference``), so the count is the same on every backend.
XLA's own ``cost_analysis()`` (:func:`compiled_flops`) is the other view: 2 FLOPs per
multiply-add, padding taps skipped, elementwise ops included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
from flax import nnx
from jax.extend import core as jex_core

from jaxdet.backends import trace


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
    with trace.reference():
        return jaxpr_macs(jax.make_jaxpr(fn)(*args))


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def leaf_paths(state: Any) -> list[tuple[tuple[str, ...], int]]:
    """``(path, size)`` of every array leaf of an nnx state (abstract or concrete)."""
    pure = nnx.to_pure_dict(state)
    flat, _ = jax.tree_util.tree_flatten_with_path(pure)
    return [(tuple(_key_name(k) for k in path), math.prod(leaf.shape)) for path, leaf in flat]


def count_parameters(module: nnx.Module | None, kind: type) -> int:
    if module is None:
        return 0
    return sum(size for _, size in leaf_paths(nnx.state(module, kind)))


def flops_of(cost: Any) -> float | None:
    """FLOPs from ``Compiled.cost_analysis()``: a dict, a list of dicts (one per
    computation/device in some jax versions) or ``None``."""
    if cost is None:
        return None
    if isinstance(cost, Mapping):
        cost = [cost]
    values = [float(c["flops"]) for c in cost if c and "flops" in c]
    return sum(values) if values else None


def _split_call(module: nnx.Module) -> tuple[Callable, Any]:
    graphdef, state = nnx.split(module)

    def run(state, *args):
        return nnx.merge(graphdef, state)(*args)

    return run, state


def abstract_call(module: nnx.Module, *args: Any) -> Any:
    """Output shapes of ``module(*args)`` for abstract ``args`` (no compile, no FLOPs)."""
    run, state = _split_call(module)
    return jax.eval_shape(run, state, *args)


def compiled_flops(module: nnx.Module, *args: Any) -> float | None:
    """XLA's FLOP count of ``module(*args)``, lowered and compiled on abstract inputs."""
    run, state = _split_call(module)
    return flops_of(jax.jit(run).lower(state, *args).compile().cost_analysis())


def module_macs(module: nnx.Module, *args: Any) -> int:
    """Multiply-adds of ``module(*args)`` from its jaxpr."""
    run, state = _split_call(module)
    return count_macs(run, state, *args)


__all__ = ["abstract_call", "compiled_flops", "count_macs", "count_parameters", "flops_of",
           "leaf_paths", "module_macs"]
