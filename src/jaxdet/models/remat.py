"""Gradient checkpointing (rematerialization) of chosen parts of a detector.

A part marked for remat keeps only its inputs from the forward pass and recomputes its
activations during the backward pass (``nnx.remat``, i.e. ``jax.checkpoint``): less activation
memory for about one more forward pass of that part. Granularity:

- ``backbone.levelN``: every block of the backbone stages that end at stride ``2**N``
  (ResNet ``layer1..layer4`` are levels 2..5); each block is its own checkpoint, so only the
  block inputs are kept. ``backbone`` marks all levels. The stem (first conv) is never
  recomputed.
- ``neck``: the whole neck is one checkpoint (its inputs are the backbone's outputs, kept anyway).
- ``head``: one checkpoint per level (the towers and predictors of that level).

Forward-only calls (eval, predict, export) are unaffected. Recomputation is exact: a step with
remat gives the same loss, gradients and batch statistics as one without (up to float
reassociation in XLA's fusions). Note that XLA:CPU expands the optimization barriers that keep
the recomputation in the backward pass, so the memory saving shows on GPU and TPU only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
from flax import nnx

BACKBONE_LEVELS = (2, 3, 4, 5)
REMAT_TARGETS = ("backbone", *(f"backbone.level{lv}" for lv in BACKBONE_LEVELS), "neck", "head")


def _invoke(module: nnx.Module, args: tuple, kwargs: dict):
    # keyword arguments travel as one positional dict: nnx.remat takes positional ones only
    return module(*args, **kwargs)


def maybe_remat(fn: Callable, enabled: bool) -> Callable:
    """``fn``, or ``nnx.remat(fn)`` when ``enabled``. The modules ``fn`` uses must be among its
    arguments (not closed over) so their state updates (BatchNorm statistics, RNG counters)
    come out of the checkpoint."""
    return nnx.remat(fn) if enabled else fn


def call(module: nnx.Module, *args, **kwargs) -> Any:
    """``module(*args, **kwargs)``, checkpointed when the module's ``remat`` flag is set."""
    return maybe_remat(_invoke, getattr(module, "remat", False))(module, args, kwargs)


def call_level(fn: Callable, module: nnx.Module, x: jax.Array, level_index: int) -> Any:
    """``fn(module, x, level_index)`` (one head level), checkpointed when the module's
    ``remat`` flag is set; ``level_index`` stays a Python int (closed over, not traced)."""
    enabled = getattr(module, "remat", False)
    return maybe_remat(lambda m, y: fn(m, y, level_index), enabled)(module, x)


def run_blocks(blocks: Iterable[nnx.Module], x: jax.Array, **kwargs) -> jax.Array:
    """Apply ``blocks`` in order (``x = block(x, **kwargs)``), each through :func:`call`."""
    for block in blocks:
        x = call(block, x, **kwargs)
    return x


def blocks_by_level(
    stages: Sequence[Sequence[nnx.Module]], level_stage: dict[int, int]
) -> dict[int, list[nnx.Module]]:
    """Group the blocks of ``stages`` by the backbone level whose output they lead to.

    ``level_stage[L]`` is the index of the stage whose output is level ``L``. Stages before
    the lowest level's go to that level; stages after the highest go to ``max(level) + 1``
    (e.g. MobileNetV2's stride-32 blocks before its head conv).
    """
    levels = sorted(level_stage)
    grouped: dict[int, list[nnx.Module]] = {}
    for i, stage in enumerate(stages):
        level = next((lv for lv in levels if level_stage[lv] >= i), levels[-1] + 1)
        grouped.setdefault(level, []).extend(stage)
    return grouped


def set_remat(model: nnx.Module, targets: Iterable[str]) -> None:
    """Mark the parts of an ``SSDDetector`` named in ``targets`` (see :data:`REMAT_TARGETS`)
    for recomputation, in place. Call it before the model's graph definition is taken: the
    flags are static structure, like BatchNorm's ``num_groups``.

    Raises ValueError for a name outside :data:`REMAT_TARGETS` or a backbone level the
    backbone does not have.
    """
    targets = tuple(targets)
    unknown = [t for t in targets if t not in REMAT_TARGETS]
    if unknown:
        raise ValueError(f"unknown remat target(s) {unknown}; expected any of {REMAT_TARGETS}")
    by_level = model.backbone.blocks_by_level()
    levels = set(BACKBONE_LEVELS) if "backbone" in targets else set()
    levels |= {int(t.removeprefix("backbone.level")) for t in targets if ".level" in t}
    missing = sorted(levels - set(by_level))
    if missing and "backbone" not in targets:
        raise ValueError(
            f"train.remat names backbone level(s) {missing}, but {type(model.backbone).__name__} "
            f"has blocks at levels {sorted(by_level)}"
        )
    for level in levels & set(by_level):
        for block in by_level[level]:
            block.remat = True
    if "neck" in targets and model.neck is not None:
        model.neck.remat = True
    if "head" in targets:
        model.head.remat = True
