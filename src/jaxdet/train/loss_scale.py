"""Dynamic loss scaling for float16 training (pure functions).

float16 gradients underflow to zero for small values, so the loss is multiplied by a large
``scale`` before differentiation and the (float32) parameter gradients are divided by it again.
When the scaled gradients overflow (a non-finite value anywhere), the update is skipped and the
scale shrinks; after ``growth_interval`` finite steps in a row it grows again, so the scale hovers
just below the overflow limit (Micikevicius et al. 2018, "Mixed Precision Training";
the schedule of ``torch.cuda.amp.GradScaler`` and TF's ``DynamicLossScale``).

The scale state is a small dict that lives in the train state (so it checkpoints and resumes):
``{"scale": float32[], "good_steps": int32[]}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any
LossScaleState = dict


@dataclass(frozen=True)
class LossScaleParams:
    """Static settings (see ``config.schema.LossScaleConfig``).

    Attributes:
      initial_scale: the scale of the first step.
      growth_interval: finite steps in a row after which the scale is multiplied by ``factor``.
      factor: growth / shrink factor (> 1).
      min_scale: the scale never shrinks below this.
    """

    initial_scale: float = 2.0**15
    growth_interval: int = 2000
    factor: float = 2.0
    min_scale: float = 1.0

    def __post_init__(self):
        if not self.factor > 1.0:
            raise ValueError(f"loss scale factor={self.factor} must be > 1")
        if self.growth_interval < 1:
            raise ValueError(f"loss scale growth_interval={self.growth_interval} must be >= 1")
        if not 0.0 < self.min_scale <= self.initial_scale:
            raise ValueError(
                f"loss scale min_scale={self.min_scale} must be in (0, initial_scale="
                f"{self.initial_scale}]"
            )


def init_loss_scale(params: LossScaleParams) -> LossScaleState:
    """The state of the first step: ``{"scale": f32[] initial_scale, "good_steps": i32[] 0}``."""
    return {
        "scale": jnp.asarray(params.initial_scale, jnp.float32),
        "good_steps": jnp.zeros((), jnp.int32),
    }


def all_finite(tree: PyTree) -> jax.Array:
    """bool[]: True when every element of every leaf of ``tree`` is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    if not leaves:
        return jnp.asarray(True)
    return jnp.all(jnp.stack(leaves))


def unscale(grads: PyTree, state: LossScaleState) -> PyTree:
    """Gradients of the scaled loss divided by the scale, in float32 (same tree)."""
    inv = 1.0 / state["scale"]
    return jax.tree.map(lambda g: g.astype(jnp.float32) * inv, grads)


def update_loss_scale(
    state: LossScaleState, finite: jax.Array, params: LossScaleParams
) -> LossScaleState:
    """The scale after a step whose gradients were ``finite`` (bool[]).

    Not finite: ``scale = max(scale / factor, min_scale)``, ``good_steps = 0``. Finite:
    ``good_steps += 1``; when it reaches ``growth_interval``, ``scale *= factor`` and
    ``good_steps = 0`` (unless that would overflow float32: the scale then stays).
    """
    scale, good = state["scale"], state["good_steps"]
    good_next = good + 1
    grow = good_next >= params.growth_interval
    grown = jnp.where(grow, scale * params.factor, scale)
    grown = jnp.where(jnp.isfinite(grown), grown, scale)
    shrunk = jnp.maximum(scale / params.factor, jnp.float32(params.min_scale))
    return {
        "scale": jnp.where(finite, grown, shrunk).astype(jnp.float32),
        "good_steps": jnp.where(finite & ~grow, good_next, 0).astype(jnp.int32),
    }


def select_tree(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leafwise ``jnp.where(pred, on_true, on_false)`` for two trees of one structure."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)
