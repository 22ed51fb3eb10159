"""Whole jobs from a config: train (with periodic eval) and eval of a workdir's checkpoint.

Workdir layout::

    config.yaml            the resolved config of the run
    checkpoints/<step>/    orbax checkpoints (state + metadata: config fingerprint, data position)
    metrics.jsonl          one JSON object per logged step; tensorboard/ holds the same and
                           each evaluation's pictures (eval_side_by_side_<k>)
    eval/step_<N>/         detections.json, metrics.json and samples.png of each evaluation
    eval_watch/            metrics.jsonl + tensorboard/ of ``jaxdet eval --watch`` (eval_watch.py)
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import jax

from jaxdet import tasks
from jaxdet.app.run_fingerprint import (  # noqa: F401  (WorkdirMismatch re-exported)
    WorkdirMismatch,
    check_fingerprint,
    config_fingerprint,
)
from jaxdet.backends import dispatch, process
from jaxdet.config.changes import (
    batch_change_warning,
    check_resume,
    describe,
    keep_previous,
)
from jaxdet.config.loader import dump_config
from jaxdet.config.precision import resolve_precision
from jaxdet.config.schema import Config
from jaxdet.data import build as data_build
from jaxdet.eval.runner import (
    headline_metrics,
    make_predict_fn,
    predict_callable,
)
from jaxdet.interop.formats import detect_format
from jaxdet.interop.tf_checkpoint import TfCheckpoint, training_step
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.sharding import (
    batch_sharding,
    local_copy,
    mesh_predict,
    place,
    place_batch,
    replicated,
    state_sharding,
    with_shardings,
)
from jaxdet.tasks import weights
from jaxdet.tasks.base import Task
from jaxdet.train import build as train_build
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.checkpoint_integrity import damage
from jaxdet.train.loop import LoopResult, PeriodicHook, train_loop
from jaxdet.train.metrics_log import MetricsLogger
from jaxdet.train.preemption import StopSignals
from jaxdet.train.remote_workdir import staged_training
from jaxdet.train.step import abstract_train_state, init_train_state
from jaxdet.train.workdir_lock import WorkdirBusy, hold_workdir  # noqa: F401  (re-exported)

log = logging.getLogger("jaxdet")


def open_checkpoints(config: Config, workdir: Path, *, read_only: bool = False
                     ) -> Checkpointer:
    """The workdir's checkpoints; ``read_only`` for a reader beside a run that may be
    writing (``Checkpointer``)."""
    return Checkpointer(
        workdir / "checkpoints",
        keep=config.train.keep_checkpoints,
        every_steps=config.train.checkpoint_every,
        read_only=read_only,
    )


VARIABLE_NAMES_FILE = "tf_variable_names.json"


def _variable_names(config: Config, task: Task, workdir: Path, *,
                    tf_checkpoint: str | Path | None = None) -> dict[str, list[str]] | None:
    """Other names of the parameters that ``train.freeze_variables`` /
    ``update_trainable_variables`` regexes may match: the TF variable names of the TF
    checkpoint the run started from. Once found they are kept in the workdir
    (``tf_variable_names.json``), so a resumed run rebuilds the same optimizer even when the
    TF checkpoint has moved. ``tf_checkpoint``: the checkpoint of a run that starts now (names
    are read from it only if it is a TF one). None when no regex is set or there are no such
    names."""
    t = config.train
    if not (t.freeze_variables or t.update_trainable_variables):
        return None
    saved = workdir / VARIABLE_NAMES_FILE
    if saved.is_file():
        return json.loads(saved.read_text())
    if tf_checkpoint is None or detect_format(tf_checkpoint) != "tf":
        return None
    restore = t.init_checkpoint.restore if t.init_checkpoint is not None else "full"
    names = weights.tf_variable_names(task.model, config, tf_checkpoint, restore=restore)
    if jax.process_index() == 0:
        workdir.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(names, indent=0, sort_keys=True))
    return names


def _build_source(config: Config, workdir: Path, split: str):
    """The ``data.<split>`` source. With several processes, process 0 builds it first (so
    generated data is written once to a shared workdir) and the others wait for it."""
    pipeline = tasks.family(config).data()

    def build():
        return pipeline.build_source(config, workdir, split)

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        if jax.process_index() == 0:
            build()
        multihost_utils.sync_global_devices(f"jaxdet: data.{split} ready")
    return build()


def _log_dataset(config: Config, source, title: str) -> None:
    """One INFO summary of a dataset (images, boxes, crowd, per class, sizes; or volumes) on
    process 0."""
    if jax.process_index() == 0:
        log.info("%s", tasks.family(config).data().describe(source, title))


def _eval_params(config: Config, state: dict):
    use_ema = config.eval.use_ema and bool(state.get("ema_params"))
    return state["ema_params"] if use_ema else state["params"]


@dataclass
class EvalContext:
    """Everything evaluation needs, built once per run so predict compiles once.

    On one process, prediction runs over the mesh (images split like training batches); with
    several processes, process 0 evaluates alone on its own copy of the (replicated) weights
    and the others go on to the next train step, which waits for it.
    """

    config: Config
    task: object
    predict: object
    source: object
    variables_sharding: object = None
    weights_format: str | None = None  # "tf" for a TF checkpoint's weights: TF's JPEG decode

    @classmethod
    def build(cls, config: Config, task, workdir: Path, mesh=None, *,
              weights_format: str | None = None) -> EvalContext:
        if config.data.eval is None:
            raise ValueError("data.eval is not set: there is nothing to evaluate on")
        source = _build_source(config, workdir, "eval")
        options = train_build.predict_compiler_options(config)
        normalizer = tasks.build_normalizer(config)
        if mesh is None or jax.process_count() > 1 or mesh.size == 1:
            predict = make_predict_fn(task, allow_tf32=config.allow_tf32,
                                      compiler_options=options, normalizer=normalizer)
            return cls(config, task, predict, source, weights_format=weights_format)
        predict = mesh_predict(predict_callable(task, allow_tf32=config.allow_tf32,
                                                normalizer=normalizer), mesh,
                               compiler_options=options)
        return cls(config, task, predict, source, replicated(mesh), weights_format)

    def __call__(self, state: dict, out_dir: Path, *, step: int, progress: bool = True,
                 on_images=None) -> dict:
        """Evaluate ``state`` into ``out_dir``; ``on_images(pictures)`` receives the pictures
        drawn for ``samples.png`` (tag -> uint8 [H, W, 3]) to log, when there are any."""
        variables = (_eval_params(self.config, state), state["batch_stats"])
        if self.variables_sharding is not None:
            variables = jax.device_put(variables, self.variables_sharding)
        elif jax.process_count() > 1:
            variables = local_copy(variables)
        return self.task.evaluate(
            self.predict,
            *variables,
            self.source,
            lambda: data_build.build_eval_loader(self.config, self.source,
                                               weights_format=self.weights_format),
            out_dir,
            batch_size=self.config.eval.batch_size,
            max_images=self.config.eval.max_images,
            extra={"step": step, "config": self.config.name},
            progress=progress,
            num_visualizations=self.config.eval.num_visualizations,
            metrics_set=self.config.eval.metrics_set,
            **({"on_images": on_images} if on_images is not None else {}),
        )


def train(
    config: Config,
    workdir: str | Path,
    *,
    stop_after: int | None = None,
    progress: bool = True,
    evaluate: bool = True,
) -> LoopResult:
    """Train ``config`` in ``workdir``, resuming from its latest checkpoint if there is one.

    Holds the workdir's training lock throughout (process 0 of a multi-process run):
    :class:`WorkdirBusy` if another run holds it, before anything in the workdir changes."""
    data_build.check_data_paths(config, splits=("train", "eval") if evaluate else ("train",))
    weights.check_init_checkpoint(config)
    with staged_training(workdir) as staged:  # a remote workdir: a local copy, kept in step
        local = staged.local if staged is not None else Path(workdir)
        local.mkdir(parents=True, exist_ok=True)
        lock = hold_workdir(local) if jax.process_index() == 0 else contextlib.nullcontext()
        with lock:
            return _train(config, local, stop_after=stop_after, progress=progress,
                          evaluate=evaluate,
                          on_sealed=None if staged is None else lambda: staged.push(owner=True))


def _train(config: Config, workdir: Path, *, stop_after: int | None, progress: bool,
           evaluate: bool, on_sealed=None) -> LoopResult:
    if dispatch.on_cpu():
        process.allocator_hint()
    written, config = config, resolve_precision(config, jax.default_backend(), "train")
    task = tasks.build_task(config)
    checkpointer = open_checkpoints(config, workdir)
    checkpointer.on_sealed = on_sealed
    start = checkpointer.latest_intact_step(set_aside=True)  # damaged ones: kept aside
    init = config.train.init_checkpoint
    variable_names = _variable_names(
        config, task, workdir, tf_checkpoint=init.path if init and start is None else None)
    tx, schedule = train_build.build_optimizer(config.train, variable_names)
    ema = config.train.ema_decay is not None
    evaluating = evaluate and config.data.eval is not None
    mesh = parallel_build.build_mesh(config)
    parallel_build.check_mesh_layout(config, mesh, task,
                               splits=("train", "eval") if evaluating else ("train",))
    loss_scale = train_build.build_loss_scale(config)
    abstract = abstract_train_state(task, tx, ema=ema, loss_scale=loss_scale)
    shardings = state_sharding(mesh, abstract,
                               shard_optimizer_state=config.parallel.shard_optimizer_state)
    layout = data_build.train_batch_layout(config, task)  # raw pixels, normalized in the step
    batch_shardings = batch_sharding(mesh, layout)
    fingerprint = config_fingerprint(config)

    if config.data.train is None:
        raise ValueError("data.train is not set: there is nothing to train on")
    changes: dict = {}
    if start is not None:
        check_fingerprint(checkpointer, start, config, workdir)
        changes = check_resume(workdir, written.model_dump(mode="json"))  # before any data
    complete = start is not None and start >= config.train.num_steps
    final_eval_done = (workdir / "eval" / f"step_{start}" / "metrics.json").is_file()
    if complete:
        log.info("%s is complete: its checkpoint is at step %d of train.num_steps=%d; nothing "
                 "to train%s. To train longer, raise train.num_steps (--set train.num_steps=N); "
                 "to evaluate again: jaxdet eval --workdir %s", workdir, start,
                 config.train.num_steps,
                 "" if final_eval_done or not evaluating else " (evaluating the final step)",
                 workdir)
        evaluating = evaluating and not final_eval_done
    source = _build_source(config, workdir, "train")
    if not complete:
        _log_dataset(config, source, "data.train")
    batches = tasks.family(config).data().build_train_loader(config, source, layout=layout)

    if start is None:
        if init is not None:
            weights.log_report(weights.load_weights(task.model, config, init.path,
                                                    restore=init.restore, format=init.format))
        fresh = init_train_state(task, tx, ema=ema, loss_scale=loss_scale)
        state, start = place(fresh, shardings), 0
    else:
        state, meta = checkpointer.restore(start, with_shardings(abstract, shardings))
        if "data" in meta:  # (an imported checkpoint has no data position: start at 0)
            batches.set_state(meta["data"])
        if not complete:
            log.info("resumed from step %d", start)
    if jax.process_index() == 0:
        if changes:
            kept = keep_previous(workdir)
            log.warning("resuming %s with a changed config: %s (the previous one is kept as "
                        "%s)", workdir, describe(changes), kept.name if kept else "-")
            batch = batch_change_warning(changes, config.train.reference_batch_size)
            if batch:
                log.warning(batch)
        (workdir / "config.yaml").write_text(dump_config(written))

    from jaxdet.app.plots import try_plot_training_curves  # matplotlib loads only when drawing

    logger = MetricsLogger(workdir, enabled=jax.process_index() == 0, resume_step=start or 0)
    hooks = []
    if evaluating:
        eval_ctx = EvalContext.build(config, task, workdir, mesh)
        if not complete:
            _log_dataset(config, eval_ctx.source, "data.eval")

        def run_eval(step: int, st: dict) -> None:
            if jax.process_index() != 0:
                return
            metrics = eval_ctx(st, workdir / "eval" / f"step_{step}", step=step, progress=progress,
                               on_images=lambda pictures: logger.log_images(step, pictures))
            scalars = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
            logger.log(step, scalars, prefix="eval")
            log.info("eval at step %d: %s", step, headline_metrics(metrics))
            if logger.enabled:
                try_plot_training_curves(workdir)  # curves.png; failures only warn

        hooks.append(PeriodicHook(run_eval, every=config.train.eval_every))

    try:
        with StopSignals() as stop:  # SIGTERM / SIGINT: checkpoint this step, then return
            return train_loop(
                step_fn=train_build.build_train_step(config, task, tx, schedule,
                                                  state_sharding=shardings,
                                                  batch_sharding=batch_shardings,
                                                  normalizer=tasks.build_normalizer(config)),
                state=state,
                batches=batches,
                place_batch=lambda batch: place_batch(batch, batch_shardings),
                start_step=start,
                num_steps=config.train.num_steps,
                checkpointer=checkpointer,
                checkpoint_metadata=lambda: {"fingerprint": fingerprint,
                                             "data": batches.get_state()},
                logger=logger,
                log_every=config.train.log_every,
                batch_size=config.train.batch_size,
                hooks=hooks,
                stop_after=stop_after,
                progress=progress,
                stop=stop,
            )
    finally:
        logger.close()
        checkpointer.close()
        if logger.enabled:  # also after a NaN stop or a crash; a plotting error only warns
            try_plot_training_curves(workdir, unless_current=True)  # not again after an eval


def eval_name(step: int | str) -> str:
    """``step_<N>`` for a workdir's checkpoint, the checkpoint's own name (``ckpt-0``) else."""
    return f"step_{step}" if isinstance(step, int) else str(step)


def eval_dir(workdir: str | Path, step: int | str, *, overwrite: bool = False) -> Path:
    """Where ``jaxdet eval`` writes the evaluation of checkpoint ``step``.

    ``WORKDIR/eval/step_<step>/`` (:func:`eval_name`) when that holds no evaluation yet (or
    with ``overwrite``); otherwise (training evaluated that step, or an earlier ``jaxdet
    eval`` did) the first free ``WORKDIR/eval/step_<step>_<k>/``, k = 2, 3, ..., so no
    evaluation is replaced silently.
    """
    base = Path(workdir) / "eval" / eval_name(step)
    if overwrite or not (base / "metrics.json").exists():
        return base
    k = 2
    while (base.parent / f"{base.name}_{k}").exists():
        k += 1
    return base.parent / f"{base.name}_{k}"


def evaluate(
    config: Config,
    workdir: str | Path | None,
    *,
    step: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    overwrite: bool = False,
    checkpoint: str | Path | None = None,
    checkpoint_format: str = "auto",
) -> dict:
    """Evaluate the workdir's checkpoint (latest, or ``step``); writes detections + metrics.

    They go to ``out_dir``, by default :func:`eval_dir` (a training-time evaluation of the
    same step is kept unless ``overwrite``); the returned metrics carry the folder as
    ``"out_dir"`` (a string) and the checkpoint's ``"step"``. On one process the images are
    split over the config's mesh (``parallel``), as during training; ``eval.batch_size`` must
    divide over ``parallel.data``. With ``checkpoint`` (a TF OD API checkpoint or another
    workdir, see :func:`load_for_inference`) the workdir is optional; the results then go to
    ``out_dir``, by default ``eval/<checkpoint name>`` beside the checkpoint's folder."""
    data_build.check_data_paths(config, splits=("eval",))
    config = resolve_precision(config, jax.default_backend(), "eval")
    task, state, step = load_for_inference(config, workdir, step=step, checkpoint=checkpoint,
                                           checkpoint_format=checkpoint_format)
    return evaluate_model(config, task, state, step, results_home(workdir, checkpoint),
                          out_dir=out_dir, overwrite=overwrite, progress=progress,
                          weights_format=weights_format(checkpoint, checkpoint_format))


def results_home(workdir: str | Path | None, checkpoint: str | Path | None) -> Path:
    """The folder an evaluation of these weights writes under by default (its ``eval/``): the
    workdir, else the folder beside the checkpoint's (a zoo model's folder for
    ``.../checkpoint/ckpt-0``, a training run's folder for ``model_dir/ckpt-2``; a weight
    file's own folder)."""
    if workdir is not None:
        return Path(workdir)
    source = Path(str(checkpoint)).absolute()
    if source.suffix == ".index":  # a TF checkpoint named by its index file
        source = source.with_suffix("")
    if source.is_dir() and any(source.glob("ckpt-*.index")):
        folder = source  # a TF checkpoint folder
    elif source.is_file() or source.is_dir():  # a weight file, or a workdir
        return source.parent
    else:  # a TF prefix
        folder = source.parent
    # a zoo model's model/checkpoint/ckpt-0 -> model/; a training run's model_dir/ckpt-2
    # (what model_main_tf2 writes) -> model_dir/
    return folder.parent if folder.name == "checkpoint" else folder


def evaluate_model(config: Config, task: Task, state: dict, step: int | str, home: Path, *,
                   out_dir: str | Path | None = None, overwrite: bool = False,
                   progress: bool = True, weights_format: str | None = None) -> dict:
    """Evaluate loaded weights (``state``: params / batch_stats [/ ema_params]) of checkpoint
    ``step`` on ``config``'s ``data.eval``, as :func:`evaluate` does after loading them.
    ``home``: where generated eval data lives and the results go by default
    (``home/eval/step_N``, :func:`eval_dir`); ``weights_format``: ``"tf"`` for a TF
    checkpoint's weights (TF's JPEG decode). Returns the metrics with ``out_dir`` and
    ``step``."""
    data_build.check_data_paths(config, splits=("eval",))
    ctx = eval_context(config, task, Path(home), weights_format=weights_format)
    out = Path(out_dir) if out_dir else eval_dir(home, step, overwrite=overwrite)
    metrics = ctx(state, out, step=step, progress=progress)
    metrics["out_dir"], metrics["step"] = str(out), step
    return metrics


def eval_context(config: Config, task: Task, home: Path, *,
                 weights_format: str | None = None) -> EvalContext:
    """The :class:`EvalContext` of an evaluation outside training: over the config's mesh on
    one process (process 0 alone with several); ``home`` holds generated eval data."""
    mesh = None
    if jax.process_count() == 1:  # several processes: process 0 evaluates alone (EvalContext)
        mesh = parallel_build.build_mesh(config)
        parallel_build.check_mesh_layout(config, mesh, task, splits=("eval",))
    return EvalContext.build(config, task, home, mesh, weights_format=weights_format)


def restore_for_inference(
    config: Config, workdir: str | Path, step: int | None = None
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
    workdir = Path(workdir)
    task = tasks.build_task(config)
    checkpointer = open_checkpoints(config, workdir, read_only=True)
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
        state = restore_inference_state(config, task, checkpointer, step, workdir)
    finally:
        checkpointer.close()
    return task, state, step


def restore_inference_state(config: Config, task: Task, checkpointer: Checkpointer, step: int,
                            workdir: str | Path) -> dict:
    """The params / batch_stats [/ ema_params] of checkpoint ``step`` (its fingerprint
    checked against ``config``: :class:`WorkdirMismatch`), for ``task``'s model."""
    check_fingerprint(checkpointer, step, config, workdir)
    params, batch_stats = task.abstract_variables()
    parts = {"params": params, "batch_stats": batch_stats}
    if config.train.ema_decay is not None:
        parts["ema_params"] = params
    return checkpointer.restore_parts(step, parts)


def import_weights(
    config: Config, workdir: str | Path, checkpoint: str | Path, *, restore: str = "full",
    checkpoint_format: str = "auto",
):
    """Make ``workdir`` a jaxdet run at step 0 holding ``checkpoint``'s weights (a TF OD API
    checkpoint or another workdir; ``restore`` as ``weights.load_weights``): its
    ``config.yaml`` and an orbax checkpoint with fresh optimizer state. Every workdir command
    then works on it: eval, predict, and train (which fine-tunes from it). Returns the
    ``ImportReport``.

    A remote ``workdir`` (``gs://...``) is written in a staging folder and uploaded.

    Raises:
      WorkdirMismatch: ``workdir`` already holds checkpoints (nothing is overwritten).
    """
    with staged_training(workdir) as staged:
        return _import_weights(config, staged.local if staged else Path(workdir), checkpoint,
                               restore, checkpoint_format)


def _import_weights(config: Config, workdir: Path, checkpoint, restore: str,
                    checkpoint_format: str):
    checkpointer = open_checkpoints(config, workdir)
    try:
        if checkpointer.latest_step() is not None:
            raise WorkdirMismatch(f"{workdir} already holds checkpoints "
                                  f"({checkpointer.all_steps()}); import into a new --workdir. "
                                  "Nothing was overwritten.")
        task = tasks.build_task(config)
        report = weights.load_weights(task.model, config, checkpoint, restore=restore,
                                      format=checkpoint_format)
        names = _variable_names(config, task, workdir, tf_checkpoint=checkpoint)
        tx, _ = train_build.build_optimizer(config.train, names)
        state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                                 loss_scale=train_build.build_loss_scale(config))
        checkpointer.save(0, state, {"fingerprint": config_fingerprint(config),
                                     "imported_from": str(checkpoint)}, force=True)
        checkpointer.wait()
    finally:
        checkpointer.close()
    if (config.data.type == "images" and config.data.jpeg_decode == "auto"
            and weights_format(checkpoint, checkpoint_format) == "tf"):
        # the workdir's later commands see the images as the TF checkpoint's model did
        config = config.model_copy(update={"data": config.data.model_copy(
            update={"jpeg_decode": "tf"})})
    (workdir / "config.yaml").write_text(dump_config(config))
    return report


def weights_format(checkpoint: str | Path | None, checkpoint_format: str = "auto") -> str | None:
    """The format of the weights ``--checkpoint`` names (``"tf"``, ``"jaxdet"``, ``"torch"``),
    None without one: a TF checkpoint's model sees TF's JPEG decode (``data.build.decode_mode``)."""
    if checkpoint is None:
        return None
    if checkpoint_format != "auto":
        return checkpoint_format
    try:
        return detect_format(checkpoint)
    except FileNotFoundError:
        return None


def load_for_inference(
    config: Config, workdir: str | Path | None = None, *, step: int | None = None,
    checkpoint: str | Path | None = None, checkpoint_format: str = "auto",
) -> tuple[Task, dict, int | str]:
    """The task and the state to evaluate or predict with: a workdir's checkpoint
    (:func:`restore_for_inference`), or with ``checkpoint`` a TF OD API checkpoint or another
    workdir imported in full (``weights.load_weights``). Returns (task, state with params /
    batch_stats, the step or the checkpoint's name)."""
    if checkpoint is None:
        if workdir is None:
            raise ValueError("give a workdir or a checkpoint to load")
        return restore_for_inference(config, workdir, step=step)
    task = tasks.build_task(config)
    report = weights.load_weights(task.model, config, checkpoint, restore="full",
                                  format=checkpoint_format)
    weights.log_report(report)  # every restored / unused tensor named at DEBUG (-v)
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
    return _eval_params(config, state), state["batch_stats"]
