"""The train state and the compiled train step (a pure function of state and batch).

The state is a plain dict pytree, so it checkpoints and shards like any other:
``{"step": int32[], "params": ..., "batch_stats": ..., "opt_state": ..., "ema_params": ...}``
(``ema_params`` is an empty dict when no moving average is kept), plus, with fp16 dynamic loss
scaling only, ``"loss_scale": {"scale": float32[], "good_steps": int32[]}``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from jaxdet.data.batch_layout import abstract_batch
from jaxdet.models.task import Task
from jaxdet.models.thin_maps import mesh_scope
from jaxdet.train import loss_scale as ls
from jaxdet.train.accumulate import loss_and_grads
from jaxdet.train.optim import Schedule

PyTree = Any
TrainState = dict


def init_train_state(
    task: Task,
    tx: optax.GradientTransformation,
    *,
    ema: bool,
    loss_scale: ls.LossScaleParams | None = None,
) -> TrainState:
    """A fresh state: the model's initial variables, optimizer state, optional EMA copy, and the
    loss-scale state when ``loss_scale`` is given (fp16). Everything but the model's variables
    is computed by one jitted program: op by op, each parameter shape would compile programs
    of its own (26 to 61 for the zoo's SSD-family configs)."""
    params, batch_stats = task.initial_variables()

    def fresh(params: PyTree, batch_stats: PyTree) -> TrainState:
        state = {
            "step": jnp.zeros((), jnp.int32),
            "params": params,
            "batch_stats": batch_stats,
            "opt_state": tx.init(params),
            "ema_params": jax.tree.map(jnp.copy, params) if ema else {},
        }
        if loss_scale is not None:
            state["loss_scale"] = ls.init_loss_scale(loss_scale)
        return state

    return jax.jit(fresh)(params, batch_stats)


def abstract_train_state(
    task: Task,
    tx: optax.GradientTransformation,
    *,
    ema: bool,
    loss_scale: ls.LossScaleParams | None = None,
) -> TrainState:
    """Shapes and dtypes of the state (for restoring a checkpoint) without computing it."""
    return jax.eval_shape(lambda: init_train_state(task, tx, ema=ema, loss_scale=loss_scale))


def abstract_train_batch(task: Task, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Shapes and dtypes of a train batch of ``batch_size``: the task's batch layout (for the
    SSD family images f32[B, H, W, 3], boxes f32[B, N, 4], classes i32[B, N], valid and
    ignore bool[B, N])."""
    return abstract_batch(task.batch_layout(), batch_size)


def _ema_update(state: TrainState, params: PyTree, decay: float, dynamic: bool,
                offset: int = 0) -> PyTree:
    """``decay * ema + (1 - decay) * params``; ``dynamic`` caps decay at (1+n)/(10+n), n the
    update's 0-based index (the state's step) plus ``offset``."""
    d = jnp.float32(decay)
    if dynamic:
        t = state["step"].astype(jnp.float32) + offset
        d = jnp.minimum(d, (1.0 + t) / (10.0 + t))
    return jax.tree.map(lambda e, p: d * e + (1.0 - d) * p, state["ema_params"], params)


def make_train_step(
    task: Task,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    *,
    ema_decay: float | None = None,
    ema_dynamic_decay: bool = False,
    ema_dynamic_decay_offset: int = 0,
    accumulate_steps: int = 1,
    loss_scale: ls.LossScaleParams | None = None,
    allow_tf32: bool = True,
    state_sharding: PyTree | None = None,
    batch_sharding: PyTree | None = None,
    compiler_options: dict[str, str] | None = None,
    normalizer: Callable[[dict], dict] | None = None,
    regularization: Callable[[PyTree], jax.Array] | None = None,
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
    """Return ``step(state, batch) -> (state, metrics)``, jitted with the state donated. With
    an ``optim.Schedule`` (as ``train.build.build_optimizer`` makes), a :class:`TrainStep`:
    the schedule's numbers are an argument of the program, which the step passes itself.

    ``normalizer`` (e.g. ``PixelNormalizer.normalize_batch`` of ``data.normalize``): turns the
    batch the loader sent (raw pixels) into the task's batch first, inside the step.

    ``state_sharding`` / ``batch_sharding`` (trees of ``jax.sharding.Sharding`` matching the
    state and the batch, see ``jaxdet.parallel.sharding``) pin the layout over a device mesh;
    None lets jit follow its arguments (one device). ``compiler_options`` go to ``jax.jit``
    (XLA debug options, e.g. ``jaxdet.backends.cpu.compile_options.cpu_compiler_options``).

    ``batch`` holds the fields of ``task.batch_layout()`` (other keys are ignored; for the
    SSD family images [B,H,W,3], boxes [B,N,4], classes / valid / ignore [B,N]). Metrics:
    loss, classification_loss, localization_loss, num_positives, grad_norm, param_norm (the
    global L2 norm of the updated parameters), learning_rate
    (the rate used for this update); with ``regularization`` (``loss(params)``, e.g.
    ``optim.l2_regularization``) also ``regularization_loss``, that loss of the parameters the
    step starts from (the weight decay's, not part of ``loss``); with ``loss_scale`` also
    ``loss_scale`` (the scale this
    step used) and ``skipped`` (1 when its gradients were not finite and the update was
    skipped).

    ``ema_dynamic_decay`` warms the moving average up as TF's ``num_updates`` /
    tfa's ``dynamic_decay`` do: update ``t`` (0-based) uses ``min(ema_decay, (1 + n) / (10 +
    n))`` with ``n = t + ema_dynamic_decay_offset`` (1: TF2's ``ExponentialMovingAverage``,
    which counts the update it makes), so early averages follow the weights instead of the
    initialization.

    ``accumulate_steps`` = k: one optimizer update from k micro-batches of B/k images (see
    ``train.accumulate``; equal to the whole-batch step except for BatchNorm statistics, which
    are per micro-batch). ``loss_scale`` (fp16): dynamic loss scaling (see ``train.loss_scale``;
    the state must hold ``"loss_scale"``, see :func:`init_train_state`); a skipped step leaves
    params, batch_stats, opt_state and ema_params unchanged but still advances ``step``.
    ``allow_tf32=False`` traces the step under ``jax.default_matmul_precision("highest")``
    (full float32 convolutions and matmuls on GPUs that would use TensorFloat-32).
    """

    fields = tuple(task.batch_layout())

    def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        if normalizer is not None:
            batch = normalizer(batch)
        inputs = {k: batch[k] for k in fields}
        scale_state = state.get("loss_scale") if loss_scale is not None else None
        if loss_scale is not None and scale_state is None:
            raise ValueError("loss_scale is set but the train state has no 'loss_scale' entry "
                             "(init_train_state(..., loss_scale=...))")
        loss, parts, new_stats, grads = loss_and_grads(
            task, state["params"], state["batch_stats"], inputs, task.step_key(state["step"]),
            accumulate_steps=accumulate_steps,
            scale=None if scale_state is None else scale_state["scale"],
        )
        if scale_state is not None:
            grads = ls.unscale(grads, scale_state)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        new_state = {
            "step": state["step"] + 1,
            "params": params,
            "batch_stats": new_stats,
            "opt_state": opt_state,
            "ema_params": state["ema_params"],
        }
        if "loss_scale" in state:  # carried through (updated below when scaling)
            new_state["loss_scale"] = state["loss_scale"]
        if ema_decay is not None:
            new_state["ema_params"] = _ema_update(state, params, ema_decay, ema_dynamic_decay,
                                                  ema_dynamic_decay_offset)
        metrics = {
            "loss": loss,
            **parts,
            "grad_norm": optax.tree.norm(grads),
            "param_norm": optax.tree.norm(params),
            "learning_rate": schedule(state["step"]),
        }
        if regularization is not None:
            metrics["regularization_loss"] = regularization(state["params"])
        if scale_state is not None:
            finite = ls.all_finite(grads)
            for key in ("params", "batch_stats", "opt_state", "ema_params"):
                new_state[key] = ls.select_tree(finite, new_state[key], state[key])
            new_state["loss_scale"] = ls.update_loss_scale(scale_state, finite, loss_scale)
            metrics["loss_scale"] = scale_state["scale"]
            metrics["skipped"] = (~finite).astype(jnp.int32)
        return new_state, metrics

    mesh = None if batch_sharding is None else jax.tree.leaves(batch_sharding)[0].mesh
    parametric = isinstance(schedule, Schedule)
    replicated = None if mesh is None else NamedSharding(mesh, PartitionSpec())

    def traced_step(state: TrainState, batch: dict, numbers: dict | None = None
                    ) -> tuple[TrainState, dict]:
        precision = (contextlib.nullcontext() if allow_tf32
                     else jax.default_matmul_precision("highest"))
        bound = schedule.bound(numbers) if parametric else contextlib.nullcontext()
        with precision, mesh_scope(mesh), bound:
            return step(state, batch)

    if state_sharding is None and batch_sharding is None:
        jitted = jax.jit(traced_step, donate_argnums=0, compiler_options=compiler_options)
    else:
        in_shardings = (state_sharding, batch_sharding) + ((replicated,) if parametric else ())
        jitted = jax.jit(traced_step, donate_argnums=0, in_shardings=in_shardings,
                         out_shardings=(state_sharding, None), compiler_options=compiler_options)
    if not parametric:
        return jitted
    return TrainStep(jitted, jax.device_put(schedule.arguments(), replicated))


class TrainStep:
    """A jitted train step whose learning-rate schedule's numbers (``optim.Schedule``) are an
    argument of its program, not constants in it: called as ``step(state, batch)``, it passes
    them itself, and so do its ``lower(state, batch)`` and that one's ``compile()`` (every
    other attribute is the wrapped jit function's, lowering's or compiled program's). Steps
    of configs that differ only in those numbers (``train.num_steps``, the base rate, ...)
    share one compiled program, in memory and in the persistent compilation cache."""

    def __init__(self, wrapped: Any, numbers: dict[str, jax.Array]):
        self._wrapped = wrapped
        self._numbers = numbers

    def __call__(self, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        return self._wrapped(state, batch, self._numbers)

    def lower(self, state: TrainState, batch: dict) -> TrainStep:
        return TrainStep(self._wrapped.lower(state, batch, self._numbers), self._numbers)

    def compile(self, *args: Any, **kwargs: Any) -> TrainStep:
        return TrainStep(self._wrapped.compile(*args, **kwargs), self._numbers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)
