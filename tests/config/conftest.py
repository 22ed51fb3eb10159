"""Shared helper for tests/config: one train step of a converted zoo config."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdet import builders
from jaxdet.train.step import init_train_state


def train_one_step(config, task, batch: dict) -> dict:
    """One step of ``task`` (built from ``config``) on ``batch`` through the generic train
    step, with ``config``'s optimizer; asserts that more than 90% of the parameters moved and
    the loss is finite and positive. Returns the step's metrics."""
    tx, schedule = builders.build_optimizer(config.train)
    step = builders.build_train_step(config, task, tx, schedule)
    state = init_train_state(task, tx, ema=False)
    before = jax.tree.leaves(state["params"])
    state, metrics = step(state, {k: jnp.asarray(v) for k, v in batch.items()})
    moved = sum(a.size for a, b in zip(before, jax.tree.leaves(state["params"]), strict=True)
                if not np.array_equal(a, b))
    assert moved > 0.9 * sum(a.size for a in before)
    assert np.isfinite(float(metrics["loss"])) and float(metrics["loss"]) > 0
    return metrics
