"""Loss and gradients of a batch, optionally accumulated over micro-batches (pure functions).

Gradient accumulation (``train.accumulate_steps = k``) splits a batch of B images into k
micro-batches of B/k and runs the forward/backward pass over them one after another in a
``lax.scan`` (one compiled body), so a step needs the activation memory of B/k images only. The
gradients are summed so that the result equals the step on the whole batch:

* the loss is divided by the normalizer of the WHOLE batch (``task.loss_normalizer``; for
  detection its number of positives): the task prepares its targets for the whole batch first
  (``task.prepare``), and every micro-batch loss is divided by that one normalizer, so the
  micro-batch losses (and their gradients) add up to the whole-batch ones;
* micro-batch ``m`` takes the rows ``m, m+k, m+2k, ...`` (``[B] -> [B/k, k]``, scan over the k
  axis), so each micro-batch keeps the batch dimension sharded over the mesh's ``data`` axis;
* stochastic layers draw from ``fold_in(step_key, m)``.

BatchNorm is the one exception to the equivalence, as in every framework: batch statistics are
those of each micro-batch (normalization uses the B/k images of the micro-batch, and the moving
averages are updated k times, carried through the scan). With frozen BatchNorm (or none), an
accumulated step equals the large-batch step up to float summation order.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxdet.models.task import Task

PyTree = Any


def split_micro_batches(x: jax.Array, k: int) -> jax.Array:
    """[B, ...] -> [k, B/k, ...] with micro-batch ``m`` = rows ``m, m+k, m+2k, ...``."""
    if x.shape[0] % k:
        raise ValueError(f"batch of {x.shape[0]} does not split into {k} micro-batches")
    return jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1)


def _value_and_grad(task: Task, scale: jax.Array | None):
    """value_and_grad of ``loss * scale`` w.r.t. params; the aux carries the unscaled loss."""

    def scaled_loss(params, batch_stats, batch, rng, prepared, normalizer):
        total, (parts, new_stats) = task.loss(
            params, batch_stats, batch, rng, prepared=prepared, normalizer=normalizer
        )
        scaled = total if scale is None else total * scale
        return scaled, (total, parts, new_stats)

    return jax.value_and_grad(scaled_loss, has_aux=True)


def loss_and_grads(
    task: Task,
    params: PyTree,
    batch_stats: PyTree,
    batch: dict,
    rng: jax.Array,
    *,
    accumulate_steps: int = 1,
    scale: jax.Array | None = None,
) -> tuple[jax.Array, dict, PyTree, PyTree]:
    """Loss, loss parts, new batch_stats and parameter gradients of one batch.

    Args:
      batch: the fields of ``task.batch_layout()``, [B, ...] each.
      rng: the step's key (micro-batch ``m`` uses ``fold_in(rng, m)`` when accumulating).
      accumulate_steps: k micro-batches of B/k (k must divide B); 1: one pass over the batch.
      scale: f32[] loss scale (fp16): gradients are those of ``loss * scale``, NOT unscaled
        here (see ``train.loss_scale.unscale``); the returned loss and parts are unscaled.
    Returns:
      (loss f32[], parts {name: f32[]} whole-batch values, new batch_stats, grads like params).
    """
    grad_fn = _value_and_grad(task, scale)
    if accumulate_steps == 1:
        (_, (loss, parts, new_stats)), grads = grad_fn(
            params, batch_stats, batch, rng, None, None
        )
        return loss, parts, new_stats, grads

    k = accumulate_steps
    prepared = task.prepare(batch)  # [B, ...] leaves, the whole batch at once
    normalizer = task.loss_normalizer(prepared)
    micro_batches = jax.tree.map(lambda x: split_micro_batches(x, k), (batch, prepared))

    def body(carry, xs):
        stats, grads_sum = carry
        m, (micro_batch, micro_prepared) = xs
        (_, (loss, parts, stats)), grads = grad_fn(
            params, stats, micro_batch, jax.random.fold_in(rng, m), micro_prepared, normalizer
        )
        grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
        return (stats, grads_sum), (loss, parts)

    zeros = jax.tree.map(jnp.zeros_like, params)
    (new_stats, grads), (losses, parts) = jax.lax.scan(
        body, (batch_stats, zeros), (jnp.arange(k), micro_batches)
    )
    # Every micro-batch part is already divided by the whole-batch normalizer: sums are exact.
    return jnp.sum(losses), jax.tree.map(lambda v: jnp.sum(v, axis=0), parts), new_stats, grads
