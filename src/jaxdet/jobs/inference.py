"""Weights for evaluation, prediction and export: a workdir's checkpoint (its fingerprint
checked; no optimizer is built), or a TF OD API checkpoint, PyTorch file or another workdir
imported in full; and where such weights come from (``weights_format``: TF's JPEG decode for a
TF checkpoint's model)."""

from __future__ import annotations

import logging
from pathlib import Path

from jaxdet import tasks
from jaxdet.backends import compile_cache
from jaxdet.config.schema import Config
from jaxdet.interop.formats import weights_format
from jaxdet.interop.tf_checkpoint import TfCheckpoint, training_step
from jaxdet.jobs.run_fingerprint import (
    check_fingerprint,
)
from jaxdet.models.task import Task
from jaxdet.tasks import Family, weights
from jaxdet.train.build import build_checkpointer as open_checkpoints
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.checkpoint_integrity import damage

log = logging.getLogger("jaxdet")


def eval_params(config: Config, state: dict):
    use_ema = config.eval.use_ema and bool(state.get("ema_params"))
    return state["ema_params"] if use_ema else state["params"]


def restore_for_inference(
    config: Config | Family, workdir: str | Path, step: int | None = None
) -> tuple[Task, dict, int]:
    """Build the task and restore the weights of a checkpoint of ``workdir`` (latest, or
    ``step``): no optimizer is built and its state is not kept.

    The checkpoint's config fingerprint must match ``config``. Pass the state to
    :func:`inference_variables` for the (params, batch_stats) that eval and predict use.

    Returns:
      (task, state dict with params / batch_stats [/ ema_params], step).
    Raises:
      FileNotFoundError: no checkpoint, or none for ``step``.
      WorkdirMismatch: the checkpoint belongs to another model/input configuration.
    """
    workdir, family = Path(workdir), tasks.resolve(config)
    task = family.build_task()
    checkpointer = open_checkpoints(family.config, workdir, read_only=True)
    try:
        if step is None:
            step = checkpointer.latest_intact_step()
            if step is None:
                raise FileNotFoundError(f"no checkpoint in {workdir / 'checkpoints'}: train first"
                                        if not checkpointer.all_steps() else
                                        f"every checkpoint in {workdir / 'checkpoints'} is "
                                        "damaged (see the warnings above)")
        elif int(step) not in checkpointer.all_steps():
            raise FileNotFoundError(f"no checkpoint for step {step} in {workdir / 'checkpoints'}"
                                    f" (available: {checkpointer.all_steps()})")
        elif (why := damage(checkpointer.step_dir(step))) is not None:
            raise FileNotFoundError(f"the checkpoint of step {step} in {workdir / 'checkpoints'}"
                                    f" is damaged: {why}")
        step = int(step)
        state = restore_inference_state(family, task, checkpointer, step, workdir)
    finally:
        checkpointer.close()
    return task, state, step


def restore_inference_state(family: Family, task: Task, checkpointer: Checkpointer, step: int,
                            workdir: str | Path) -> dict:
    """The params / batch_stats [/ ema_params] of checkpoint ``step`` (its fingerprint
    checked against ``family``'s config: :class:`WorkdirMismatch`), for ``task``'s model."""
    check_fingerprint(checkpointer, step, family, workdir)
    params, batch_stats = task.abstract_variables()
    parts = {"params": params, "batch_stats": batch_stats}
    if family.config.train.ema_decay is not None:
        parts["ema_params"] = params
    return checkpointer.restore_parts(step, parts)


def init_weights_format(config: Config) -> str | None:
    """The format of ``train.init_checkpoint``'s weights, None without one: a run that starts
    from a TF checkpoint sees TF's JPEG decode (``data.build.decode_mode``)."""
    init = config.train.init_checkpoint
    return None if init is None else weights_format(init.path, init.format)


def load_for_inference(
    config: Config | Family, workdir: str | Path | None = None, *, step: int | None = None,
    checkpoint: str | Path | None = None, checkpoint_format: str = "auto",
) -> tuple[Task, dict, int | str]:
    """The task and the state to evaluate or predict with: a workdir's checkpoint
    (:func:`restore_for_inference`), or with ``checkpoint`` a TF OD API checkpoint or another
    workdir imported in full (``weights.load_weights``). Returns (task, state with params /
    batch_stats, the step or the checkpoint's name)."""
    compile_cache.use_compilation_cache()  # predict functions compiled once per machine
    family = tasks.resolve(config)
    if checkpoint is None:
        if workdir is None:
            raise ValueError("give a workdir or a checkpoint to load")
        return restore_for_inference(family, workdir, step=step)
    task = family.build_task()
    report = weights.load_weights(task.model, family, checkpoint, restore="full",
                                  format=checkpoint_format)
    report.log()  # every restored / unused tensor named at DEBUG (-v)
    params, batch_stats = task.initial_variables()
    return task, {"params": params, "batch_stats": batch_stats}, checkpoint_label(
        checkpoint, checkpoint_format)


def checkpoint_label(checkpoint: str | Path, checkpoint_format: str = "auto") -> int | str:
    """How results name imported weights: a TF training checkpoint's own step (``600`` for a
    ``ckpt-2`` saved at step 600), else the checkpoint's name (``ckpt-0``, a file's name)."""
    if weights_format(checkpoint, checkpoint_format) == "tf":
        try:
            step = training_step(TfCheckpoint(checkpoint))
        except (OSError, ValueError):
            step = None
        if step is not None:
            return step
    return Path(str(checkpoint)).name


def inference_variables(config: Config, state: dict) -> tuple[dict, dict]:
    """(params, batch_stats) for inference: the EMA params when ``eval.use_ema`` and present."""
    return eval_params(config, state), state["batch_stats"]
