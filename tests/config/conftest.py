"""Shared helpers for tests/config: one train step of a converted zoo config; a
CenterNet's BatchNorm statistics count."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxdet.models.abstract import abstract_build
from jaxdet.tasks.center_net import build as center_net_build
from jaxdet.train import build as train_build
from jaxdet.train.step import init_train_state


def train_one_step(config, task, batch: dict) -> dict:
    """One step of ``task`` (built from ``config``) on ``batch`` through the generic train
    step, with ``config``'s optimizer; asserts that more than 90% of the parameters moved and
    the loss is finite and positive. Returns the step's metrics."""
    tx, schedule = train_build.build_optimizer(config.train)
    step = train_build.build_train_step(config, task, tx, schedule)
    state = init_train_state(task, tx, ema=False)
    before = jax.tree.leaves(state["params"])
    state, metrics = step(state, {k: jnp.asarray(v) for k, v in batch.items()})
    moved = sum(a.size for a, b in zip(before, jax.tree.leaves(state["params"]), strict=True)
                if not np.array_equal(a, b))
    assert moved > 0.9 * sum(a.size for a in before)
    assert np.isfinite(float(metrics["loss"])) and float(metrics["loss"]) > 0
    return metrics


def center_net_batch_stats(config) -> int:
    """How many BatchNorm statistics the CenterNet of ``config`` holds (an abstract build)."""
    model = abstract_build(lambda: center_net_build.build_center_net(config, seed=0))
    return sum(int(v.size) for _, v in nnx.to_flat_state(nnx.state(model, nnx.BatchStat)))
