"""What every task (meta-architecture) gives the rest of jaxdet: the seam.

A task is a model with its loss, predict and evaluation. It is built from a config by its
family's builder (``tasks.resolve(config).build_task()``) and holds constructed objects only;
its methods are pure functions of (params, batch_stats, arrays), safe inside ``jax.jit``. The
training loop, the train step, gradient accumulation, the sharding rules, checkpoints, eval and
predict talk to a task through the :class:`Task` protocol alone, which is why it lives here,
below ``train/``, ``eval/`` and ``parallel/``: they type their task with it and never name a
family. A new family (CenterNet, a two-stage detector, a 3D segmentation model) lives in its
own folder under ``tasks/`` and adds one registry line.

Besides the protocol: :class:`ModelTask` (what every family built on one Flax module shares)
and the functional view of a module (:func:`model_graphdefs`, :func:`model_variables`,
:func:`run_model`, :func:`step_key`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax
from flax import nnx

from jaxdet.data.batch_layout import BatchLayout

PyTree = Any


def model_graphdefs(model: nnx.Module) -> dict[str, Any]:
    """``{"train": graphdef, "eval": graphdef}`` of a module (its train and eval modes: e.g.
    BatchNorm with batch or moving statistics); leaves ``model`` in train mode."""
    model.train()
    train = nnx.graphdef(model)
    model.eval()
    graphdefs = {"train": train, "eval": nnx.graphdef(model)}
    model.train()
    return graphdefs


def model_variables(model: nnx.Module) -> tuple[PyTree, PyTree]:
    """(params, batch_stats) of a module, as pure dicts of arrays."""
    _, params, batch_stats = nnx.split(model, nnx.Param, nnx.BatchStat)
    return nnx.to_pure_dict(params), nnx.to_pure_dict(batch_stats)


def run_model(graphdefs: dict, params: PyTree, batch_stats: PyTree, inputs: jax.Array, *,
              train: bool, rng: jax.Array | None = None,
              then: Callable[[nnx.Module, Any], None] | None = None) -> tuple[Any, PyTree]:
    """Call the module that ``graphdefs`` (:func:`model_graphdefs`) and the variables make on
    ``inputs``: ``(outputs, new batch_stats)`` (in eval mode the statistics are returned as
    given). ``rng`` feeds stochastic layers in training (``nnx.Rngs(dropout=rng)``).
    ``then(model, outputs)``, if given, runs more of the model (e.g. DeepMAC's mask network
    on given boxes) before the statistics are collected; it may add to ``outputs``."""
    model = nnx.merge(graphdefs["train" if train else "eval"], params, batch_stats)
    rngs = nnx.Rngs(dropout=rng) if (train and rng is not None) else None
    outputs = model(inputs, rngs=rngs)
    if then is not None:
        then(model, outputs)
    new_stats = nnx.to_pure_dict(nnx.state(model, nnx.BatchStat)) if train else batch_stats
    return outputs, new_stats


def step_key(seed: int, step: jax.Array) -> jax.Array:
    """The random key of train step ``step``: a pure function of (seed, step), so a resumed
    run draws the same random masks as an uninterrupted one."""
    return jax.random.fold_in(jax.random.key(seed), step)


class ModelTask:
    """The parts of :class:`Task` every family built on one Flax module with a backbone
    shares; a task dataclass inherits them and holds ``model`` and ``seed``."""

    model: nnx.Module
    seed: int

    def initial_variables(self) -> tuple[PyTree, PyTree]:
        """(params, batch_stats) of the freshly built model, as pure dicts of arrays."""
        return model_variables(self.model)

    def abstract_variables(self) -> tuple[PyTree, PyTree]:
        """Shapes/dtypes of (params, batch_stats) without allocating them."""
        return jax.eval_shape(self.initial_variables)

    def step_key(self, step: jax.Array) -> jax.Array:
        """The random key of train step ``step`` (:func:`step_key`)."""
        return step_key(self.seed, step)

    def max_stride(self) -> int:
        """The stride of the backbone's deepest feature map (2 ** its level, e.g. 32 for C5)."""
        return 2 ** max(self.model.backbone.out_channels)


class Task(Protocol):
    """The interface every meta-architecture implements (see the module docstring).

    Attributes:
      model: the network (its graph definitions and initial variables).
      input_size: (H, W) of every input image (or the spatial size of a volume patch).
      seed: base of the per-step random keys of stochastic layers.
      remat_targets: the part names ``train.remat`` may name for this family.
    """

    model: nnx.Module
    input_size: tuple[int, ...]
    seed: int
    remat_targets: tuple[str, ...]

    def batch_layout(self) -> BatchLayout:
        """The fields a train step reads; the loader's batches, the train step and the
        sharding rules all follow it."""

    def initial_variables(self) -> tuple[PyTree, PyTree]:
        """(params, batch_stats) of the freshly built model, as pure dicts of arrays."""

    def abstract_variables(self) -> tuple[PyTree, PyTree]:
        """Shapes and dtypes of :meth:`initial_variables` without computing them."""

    def step_key(self, step: jax.Array) -> jax.Array:
        """The random key of train step ``step`` (a pure function of seed and step)."""

    def prepare(self, batch: dict) -> PyTree:
        """Per-example training targets of a whole batch ([B, ...] leaves), computed once
        before a batch is split into micro-batches."""

    def loss_normalizer(self, prepared: PyTree) -> jax.Array:
        """f32[]: what the whole batch's loss is divided by (every micro-batch of an
        accumulated step is divided by the same one)."""

    def loss(self, params: PyTree, batch_stats: PyTree, batch: dict,
             rng: jax.Array | None = None, *, prepared: PyTree | None = None,
             normalizer: jax.Array | None = None) -> tuple[jax.Array, tuple[dict, PyTree]]:
        """(total loss, (loss parts, new batch_stats)) of a batch."""

    def predict(self, params: PyTree, batch_stats: PyTree, images: jax.Array,
                image_info: jax.Array) -> dict:
        """Static-shape predictions in original-image coordinates."""

    def evaluate(self, predict: Any, params: PyTree, batch_stats: PyTree, source: Any,
                 loader_factory: Any, out_dir: Any, **options: Any) -> dict:
        """Predict over an eval source with ``predict`` (a compiled :meth:`predict`), score
        it with the family's evaluators (``eval.metrics_set``), write the results and
        pictures to ``out_dir``; returns the metrics. An ``on_images`` option, when given,
        receives the pictures (tag -> uint8 [H, W, 3]) for TensorBoard."""

    def max_stride(self) -> int:
        """The largest downsampling of the input inside the model (input sizes split over a
        mesh must stay divisible by it)."""


__all__ = ["ModelTask", "PyTree", "Task", "model_graphdefs", "model_variables", "run_model",
           "step_key"]
