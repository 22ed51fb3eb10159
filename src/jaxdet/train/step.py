"""The train state and the compiled train step (a pure function of state and batch).

The state is a plain dict pytree, so it checkpoints and shards like any other:
``{"step": int32[], "params": ..., "batch_stats": ..., "opt_state": ..., "ema_params": ...}``
(``ema_params`` is an empty dict when no moving average is kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxdet.train.task import DetectionTask

PyTree = Any
TrainState = dict


def init_train_state(
    task: DetectionTask, tx: optax.GradientTransformation, *, ema: bool
) -> TrainState:
    """A fresh state: the model's initial variables, optimizer state, optional EMA copy."""
    params, batch_stats = task.initial_variables()
    return {
        "step": jnp.zeros((), jnp.int32),
        "params": params,
        "batch_stats": batch_stats,
        "opt_state": tx.init(params),
        "ema_params": jax.tree.map(jnp.copy, params) if ema else {},
    }


def abstract_train_state(
    task: DetectionTask, tx: optax.GradientTransformation, *, ema: bool
) -> TrainState:
    """Shapes and dtypes of the state (for restoring a checkpoint) without computing it."""
    return jax.eval_shape(lambda: init_train_state(task, tx, ema=ema))


def make_train_step(
    task: DetectionTask,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    *,
    ema_decay: float | None = None,
    ema_dynamic_decay: bool = False,
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
    """Return ``step(state, batch) -> (state, metrics)``, jitted with the state donated.

    ``batch`` holds images [B,H,W,3], boxes [B,N,4], classes [B,N], valid [B,N], ignore [B,N]
    (other keys are ignored). Metrics: loss, classification_loss, localization_loss,
    num_positives, grad_norm, learning_rate (the rate used for this update).

    ``ema_dynamic_decay`` warms the moving average up as TF's ``num_updates`` /
    tfa's ``dynamic_decay`` do: update ``t`` (0-based) uses ``min(ema_decay, (1 + t) / (10 + t))``,
    so early averages follow the weights instead of the initialization.
    """

    def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        inputs = {k: batch[k] for k in ("images", "boxes", "classes", "valid", "ignore")}
        grad_fn = jax.value_and_grad(task.loss, has_aux=True)
        (loss, (parts, new_stats)), grads = grad_fn(
            state["params"], state["batch_stats"], inputs, task.step_key(state["step"])
        )
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        new_state = {
            "step": state["step"] + 1,
            "params": params,
            "batch_stats": new_stats,
            "opt_state": opt_state,
            "ema_params": state["ema_params"],
        }
        if ema_decay is not None:
            decay = jnp.float32(ema_decay)
            if ema_dynamic_decay:
                t = state["step"].astype(jnp.float32)
                decay = jnp.minimum(decay, (1.0 + t) / (10.0 + t))
            new_state["ema_params"] = jax.tree.map(
                lambda e, p: decay * e + (1.0 - decay) * p, state["ema_params"], params
            )
        metrics = {
            "loss": loss,
            **parts,
            "grad_norm": optax.tree.norm(grads),
            "learning_rate": schedule(state["step"]),
        }
        return new_state, metrics

    return jax.jit(step, donate_argnums=0)
