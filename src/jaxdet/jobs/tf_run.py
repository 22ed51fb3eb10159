"""A TF OD API training run continued by jaxdet: the ``model_dir`` that TF's
``model_main_tf2.py`` writes (``ckpt-N`` and its ``checkpoint`` state file) taken as a
workdir.

    continued = continue_tf_run(config, "model_dir")   # -> jaxdet checkpoint at TF's step
    runs.train(config, "model_dir")                       # goes on from that step

The latest ``ckpt-N`` (the one TF's ``tf.train.latest_checkpoint`` picks) becomes a jaxdet
checkpoint at the training step it was saved at: the model's weights by the family's TF name
map, the optimizer's slots (Keras's ``momentum`` velocity; Adam's ``m`` / ``v``; RMSprop's
``rms``) into jaxdet's optimizer state, TF's moving averages of the weights (the ``average``
slots of ``use_moving_average``) into jaxdet's, and the step, which the learning-rate
schedule and the averages' warm-up follow. The input pipeline starts again at the beginning
of the data (TF's position in its ``tf.data`` pipeline is not saved in the checkpoint).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jax.numpy as jnp

from jaxdet import files, tasks
from jaxdet.config.loader import dump_config
from jaxdet.config.schema import Config
from jaxdet.interop.tf_checkpoint import TfCheckpoint, resolve_prefix, training_step
from jaxdet.interop.tf_import import ImportReport
from jaxdet.jobs.inference import open_checkpoints
from jaxdet.jobs.run_fingerprint import WorkdirMismatch, config_fingerprint
from jaxdet.tasks import weights
from jaxdet.train import build as train_build
from jaxdet.train.optimizer_moments import slots_needed, with_moments
from jaxdet.train.step import init_train_state

log = logging.getLogger("jaxdet")

_TF_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")


def tf_checkpoints(model_dir: str | os.PathLike) -> list[str]:
    """The TF2 training checkpoints in ``model_dir`` (what ``model_main_tf2.py`` writes:
    ``ckpt-N.index`` + data shards), their prefixes ordered by N (TF's save count)."""
    found = []
    for path in files.glob(files.join(os.fspath(model_dir), "ckpt-*.index"), files_only=True):
        match = _TF_CHECKPOINT.match(files.basename(path))
        if match:
            found.append((int(match.group(1)), path[:-len(".index")]))
    return [prefix for _, prefix in sorted(found)]


def holds_tf_run(model_dir: str | os.PathLike) -> bool:
    """Whether ``model_dir`` holds a TF OD API training run's checkpoints (``ckpt-N``)."""
    return files.isdir(os.fspath(model_dir)) and bool(tf_checkpoints(model_dir))


@dataclass
class ContinuedRun:
    """What :func:`continue_tf_run` read: the TF checkpoint, its step, the weights' import
    report and how many slots of each optimizer slot name it found."""

    source: str
    step: int
    report: ImportReport
    slots: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        slots = ", ".join(f"{n} '{name}'" for name, n in self.slots.items()) or "none"
        return (f"continuing the TF OD API run of {self.source} at step {self.step}: "
                f"{len(self.report.restored)} weights, optimizer slots: {slots}; the data "
                "starts from its beginning")


def continue_tf_run(config: Config, model_dir: str | os.PathLike) -> ContinuedRun:
    """Make the TF ``model_dir`` a jaxdet run at the step of its latest ``ckpt-N`` (see the
    module docstring): a jaxdet checkpoint of the whole train state and ``config.yaml``
    beside TF's files, which are left as they are. Returns what was read.

    Raises:
      ValueError: no TF training checkpoint (no step), an optimizer whose state TF's cannot
        give (see :func:`train.optimizer_moments.with_moments`), or a checkpoint of another
        model (as ``weights.load_weights``).
      WorkdirMismatch: ``model_dir`` already holds jaxdet checkpoints.
    """
    workdir = Path(model_dir)
    prefix = resolve_prefix(workdir)  # the `checkpoint` state file's latest, as TF reads it
    step = training_step(TfCheckpoint(prefix))
    if step is None:
        raise ValueError(f"{prefix} holds no training step: not a checkpoint of a "
                         "model_main_tf2 run (a zoo model's checkpoint starts a run as "
                         "train_config.fine_tune_checkpoint)")
    optimizer = config.train.optimizer
    if optimizer.momentum_form != "keras" and (
            optimizer.name == "momentum" or (optimizer.name == "rmsprop" and optimizer.momentum)):
        raise ValueError("TF's momentum slots hold Keras's velocity: continue the run with "
                         "train.optimizer.momentum_form=keras (what a converted "
                         "pipeline.config sets)")
    family = tasks.resolve(config)
    task = family.build_task()
    report = weights.load_weights(task.model, family, prefix, restore="full", format="tf")
    params, batch_stats = task.initial_variables()
    tx, _ = train_build.build_optimizer(config.train)
    state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                             loss_scale=train_build.build_loss_scale(config))
    moments, found = {}, {}
    for slot in slots_needed(state["opt_state"]):
        holder = family.build_task()
        found[slot] = weights.load_tf_optimizer_slot(holder.model, family, prefix, slot)
        if not found[slot]:
            raise ValueError(f"{prefix} holds no '{slot}' optimizer slots: it was not trained "
                             f"with the optimizer of this config ({optimizer.name})")
        moments[slot] = holder.initial_variables()[0]
    state.update(step=jnp.asarray(step, jnp.int32), params=params, batch_stats=batch_stats,
                 opt_state=with_moments(state["opt_state"], step, moments))
    if config.train.ema_decay is not None:
        holder = family.build_task()
        found["average"] = weights.load_tf_optimizer_slot(holder.model, family, prefix,
                                                          "average")
        if found["average"]:  # TF's moving average (use_moving_average): its own slots
            state["ema_params"] = holder.initial_variables()[0]
        else:
            del found["average"]
            log.warning("%s holds no moving averages of the weights (TF trained without "
                        "use_moving_average); the run's averages start from its weights at "
                        "step %d", prefix, step)
            state["ema_params"] = params
    checkpointer = open_checkpoints(config, workdir)
    try:
        if checkpointer.latest_step() is not None:
            raise WorkdirMismatch(f"{workdir} already holds jaxdet checkpoints "
                                  f"({checkpointer.all_steps()}); nothing was overwritten")
        checkpointer.save(step, state, {"fingerprint": config_fingerprint(family),
                                        "imported_from": str(prefix)}, force=True)
        checkpointer.wait()
    finally:
        checkpointer.close()
    (workdir / "config.yaml").write_text(dump_config(config))
    return ContinuedRun(str(prefix), step, report, found)


@dataclass
class WrittenTfRun:
    """What :func:`write_tf_run` wrote: the TF checkpoint's prefix, the step, the model's
    tensors and the optimizer slots."""

    prefix: str
    step: int
    tensors: int
    slots: int = 0

    def line(self) -> str:
        return (f"{self.prefix} (.index, .data-00000-of-00001) and its checkpoint file: step "
                f"{self.step}, {self.tensors} model tensors, {self.slots} optimizer slots, for "
                "TF's model_main_tf2 --model_dir / --checkpoint_dir and exporter_main_v2 "
                "--trained_checkpoint_dir")


def write_tf_run(config: Config, workdir: str | os.PathLike, out_dir: str | os.PathLike, *,
                 step: int | None = None, name: str = "ckpt-1",
                 optimizer: bool = True) -> WrittenTfRun:
    """Write the jaxdet run in ``workdir`` (its checkpoint of ``step``, default the latest)
    as a TF OD API ``model_dir``: ``out_dir/<name>`` (a TF2 object-based checkpoint of
    ``tf.train.Checkpoint(step=..., model=..., optimizer=...)``: the model's tensors by the
    family's TF name map, the trained weights, not their moving average; the optimizer's
    slots, Keras's ``momentum`` velocity, Adam's ``m`` / ``v``, RMSprop's ``rms``, and its
    iteration count; with ``train.ema_decay``, the moving averages as the ``average`` slots of
    TF2's ``ExponentialMovingAverage``, the optimizer's own slots under its
    ``ema_base_optimizer``) and the ``checkpoint`` state file. TF's ``model_main_tf2.py``
    evaluates it, continues training from it, its optimizer taking the slots back, and its
    exporters export it. ``optimizer=False`` writes the model and the step alone (what TF's
    exporters keep in ``output_directory/checkpoint``).

    Raises:
      FileNotFoundError: no checkpoint; UnmappedModelError: a model part without a TF name
        map; ValueError: ``out_dir`` already holds TF checkpoints."""
    import numpy as np

    from jaxdet.interop.tf_checkpoint_writer import write_checkpoint_state, write_tf_checkpoint
    from jaxdet.jobs.inference import restore_for_inference

    out = os.fspath(out_dir)
    if holds_tf_run(out):
        raise ValueError(f"{out} already holds TF checkpoints (ckpt-N): write into a new folder")
    family = tasks.resolve(config)
    task, state, step = restore_for_inference(family, workdir, step=step)
    tensors = _tf_tensors(family, task.model, state["params"], state["batch_stats"])
    variables = {**tensors, "step": np.int64(step), "save_counter": np.int64(1)}
    slots = {}
    if optimizer:
        ema = config.train.ema_decay is not None
        owner = "optimizer/ema_base_optimizer" if ema else "optimizer"
        trees = {(owner, slot): moment for slot, moment in
                 _optimizer_moments(family, task, workdir, step).items()}
        if ema and "ema_params" in state:
            trees["optimizer", "average"] = state["ema_params"]
        trainable = _trainable_tf_paths(family, task.model)
        for (where, slot), tree in trees.items():
            tensors_of_slot = _tf_tensors(family, task.model, tree, state["batch_stats"])
            slots.update({(tf_path, where, slot): value
                          for tf_path, value in tensors_of_slot.items() if tf_path in trainable})
        variables[f"{owner}/iter"] = np.int64(step)
        variables.update({f"{owner}/{k}": np.float32(v)
                          for k, v in _keras_hyperparameters(config).items()})
    prefix = write_tf_checkpoint(files.join(out, name), variables, slots=slots)
    write_checkpoint_state(out, name)
    return WrittenTfRun(prefix, step, len(tensors), len(slots))


def _keras_hyperparameters(config: Config) -> dict[str, float]:
    """The hyperparameters TF2's Keras optimizer of ``config`` keeps as variables (its
    learning rate, a schedule, is none): SGD's ``momentum``, Adam's ``beta_1`` / ``beta_2``,
    RMSprop's ``rho`` / ``momentum``, each with ``decay`` (Keras's own rate decay, 0)."""
    opt = config.train.optimizer
    if opt.name in ("adam", "adamw"):
        return {"beta_1": opt.beta1, "beta_2": opt.beta2, "decay": 0.0}
    if opt.name == "rmsprop":
        return {"rho": opt.rmsprop_decay, "momentum": opt.momentum, "decay": 0.0}
    return {"momentum": opt.momentum if opt.name == "momentum" else 0.0, "decay": 0.0}


def _tf_tensors(family, model, params, batch_stats) -> dict:
    """``{TF object path: array}`` of ``model`` (of ``family``) holding ``params`` and
    ``batch_stats`` (``weights.tf_variables``)."""
    from flax import nnx

    _, p, b = nnx.split(model, nnx.Param, nnx.BatchStat)
    nnx.replace_by_pure_dict(p, params)
    nnx.replace_by_pure_dict(b, batch_stats)
    nnx.update(model, p, b)
    return weights.tf_variables(model, family)


def _trainable_tf_paths(family, model) -> set[str]:
    """The TF object paths of ``model``'s trainable variables, those TF's optimizer keeps
    slots for: not batch-norm statistics, not the variables TF never applies."""
    from flax import nnx

    from jaxdet.interop.tfod_names import tf_unapplied

    trainable = {"/".join(map(str, path)) for path, _ in
                 nnx.to_flat_state(nnx.state(model, nnx.Param))}
    unapplied = tf_unapplied(model)
    return {tf_path for tf_path, (path, _) in family.tf_name_map(model).items()
            if not unapplied(tf_path) and "/".join(map(str, path)) in trainable}


def _optimizer_moments(family, task, workdir, step: int) -> dict:
    """The moments of the run's optimizer state at ``step`` by TF slot name
    (``train.optimizer_moments.moments_of``)."""
    from jaxdet.train.optimizer_moments import moments_of
    from jaxdet.train.step import abstract_train_state

    config = family.config
    tx, _ = train_build.build_optimizer(config.train)
    abstract = abstract_train_state(task, tx, ema=config.train.ema_decay is not None,
                                    loss_scale=train_build.build_loss_scale(config))
    checkpointer = open_checkpoints(config, Path(workdir), read_only=True)
    try:
        state, _ = checkpointer.restore(step, abstract)
    finally:
        checkpointer.close()
    return moments_of(state["opt_state"])


__all__ = ["ContinuedRun", "WrittenTfRun", "continue_tf_run", "holds_tf_run", "tf_checkpoints",
           "write_tf_run"]
