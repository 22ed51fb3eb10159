"""The jobs on a workdir: train (with periodic evaluation) and import weights, here; evaluate
(``jobs.evaluation``) and load for inference (``jobs.inference``), whose names this module
lists too, so that ``runs.<job>`` names every workdir job.

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
import logging
from pathlib import Path

import jax

from jaxdet import tasks
from jaxdet.backends import compile_cache, dispatch, process
from jaxdet.config import placeholders
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
)
from jaxdet.jobs import evaluation, tf_run
from jaxdet.jobs.evaluation import (
    EvalContext,
    eval_context,
    eval_dir,
    eval_name,
    evaluate_model,
    results_home,
)
from jaxdet.jobs.inference import (
    checkpoint_label,
    inference_variables,
    init_weights_format,
    load_for_inference,
    open_checkpoints,
    restore_for_inference,
    restore_inference_state,
    weights_format,
)
from jaxdet.jobs.run_fingerprint import (
    WorkdirMismatch,
    config_fingerprint,
)
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.sharding import (
    batch_sharding,
    place,
    place_batch,
    state_sharding,
    with_shardings,
)
from jaxdet.tasks import weights
from jaxdet.train import build as train_build
from jaxdet.train.bucket_lock import hold_bucket_workdir
from jaxdet.train.build import VARIABLE_NAMES_FILE
from jaxdet.train.loop import LoopResult, PeriodicHook, train_loop
from jaxdet.train.metrics_log import MetricsLogger
from jaxdet.train.preemption import StopSignals
from jaxdet.train.remote_workdir import staged_training
from jaxdet.train.step import abstract_train_state, init_train_state
from jaxdet.train.workdir_lock import WorkdirBusy, hold_workdir

log = logging.getLogger("jaxdet")
evaluate = evaluation.evaluate  # named here with the other workdir jobs


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
    :class:`WorkdirBusy` if another run holds it, before anything in the workdir changes.
    The config runs in this platform's precision; the workdir keeps it as written."""
    placeholders.check_training_placeholders(
        config, splits=("train", "eval") if evaluate else ("train",))
    written, config = config, resolve_precision(config, jax.default_backend(), "train")
    with staged_training(workdir) as staged:  # a remote workdir: its files kept in step
        local = staged.local if staged is not None else Path(workdir)
        local.mkdir(parents=True, exist_ok=True)
        if jax.process_index() != 0:
            lock = contextlib.nullcontext()
        elif staged is not None and staged.native:  # machines sharing no disk agree on it
            lock = hold_bucket_workdir(staged.url)
        else:
            lock = hold_workdir(local)
        with lock:
            return _train(config, written, local, stop_after=stop_after, progress=progress,
                          evaluate=evaluate,
                          on_sealed=None if staged is None else lambda: staged.push(owner=True))


def _train(config: Config, written: Config, workdir: Path, *, stop_after: int | None,
           progress: bool, evaluate: bool, on_sealed=None) -> LoopResult:
    """The run itself, in the workdir's local folder. The steps go down the layers: the
    family (model, starting weights), then what trains it (optimizer, mesh, state), then its
    data, then the loop."""
    if dispatch.on_cpu():
        process.allocator_hint()
    compile_cache.use_compilation_cache()  # a restarted run loads its step, not compiles it
    if config.data.train is None:
        raise ValueError("data.train is not set: there is nothing to train on")
    checkpointer = train_build.build_checkpointer(config, workdir)
    if tf_run.holds_tf_run(workdir) and not checkpointer.all_steps():
        checkpointer.close()  # TF's model_dir: its checkpoint becomes the first of this run
        log.info("%s", tf_run.continue_tf_run(config, workdir).line())
        checkpointer = train_build.build_checkpointer(config, workdir)
    family = tasks.resolve(config)  # the one lookup of model.type in this job
    task = family.build_task()
    fingerprint = family.checkpoint_fingerprint()
    former_fingerprints = family.former_fingerprints()
    checkpointer.on_sealed = on_sealed
    start = checkpointer.latest_intact_step(set_aside=True)  # damaged ones: kept aside
    init = config.train.init_checkpoint
    imported = None
    if start is None and init is not None:  # a new run starts from these weights
        imported = weights.load_weights(task.model, family, init.path, restore=init.restore,
                                        format=init.format)
        imported.log()
    # "tf": the images decode as the TF checkpoint's model saw them
    init_format = None if init is None else weights_format(init.path, init.format)
    evaluating = evaluate and config.data.eval is not None
    changes: dict = {}
    if start is not None:  # another run's checkpoints, or another config's: refused here
        checkpointer.check_fingerprint(start, fingerprint, former=former_fingerprints,
                                       workdir=workdir)
        changes = check_resume(workdir, written.model_dump(mode="json"))  # before any data
    variable_names = train_build.regex_variable_names(
        config.train, workdir, imported.variable_names if imported else None)
    tx, schedule = train_build.build_optimizer(config.train, variable_names)
    ema = config.train.ema_decay is not None
    mesh = parallel_build.build_mesh(config)
    parallel_build.check_mesh_layout(config, mesh, task,
                                     splits=("train", "eval") if evaluating else ("train",))
    loss_scale = train_build.build_loss_scale(config)
    abstract = abstract_train_state(task, tx, ema=ema, loss_scale=loss_scale)
    shardings = state_sharding(mesh, abstract,
                               shard_optimizer_state=config.parallel.shard_optimizer_state)
    complete = start is not None and start >= config.train.num_steps
    meta: dict = {}
    if start is None:
        state, start = place(init_train_state(task, tx, ema=ema, loss_scale=loss_scale),
                             shardings), 0
    else:
        state, meta = checkpointer.restore(start, with_shardings(abstract, shardings))
        if not complete:
            log.info("resumed from step %d", start)
    if complete:
        final_eval_done = (workdir / "eval" / f"step_{start}" / "metrics.json").is_file()
        log.info("%s is complete: its checkpoint is at step %d of train.num_steps=%d; nothing "
                 "to train%s. To train longer, raise train.num_steps (--set train.num_steps=N); "
                 "to evaluate again: jaxdet eval --workdir %s", workdir, start,
                 config.train.num_steps,
                 "" if final_eval_done or not evaluating else " (evaluating the final step)",
                 workdir)
        evaluating = evaluating and not final_eval_done

    eval_ctx = (EvalContext.build(family, task, workdir, mesh, weights_format=init_format)
                if evaluating else None)

    layout = data_build.train_batch_layout(config, task)  # raw pixels, normalized in the step
    source = family.build_source(workdir, "train")
    if not complete:
        family.log_dataset(source, "train")
    batches = family.data.build_train_loader(config, source, layout=layout,
                                             weights_format=init_format)
    if "data" in meta:  # (an imported checkpoint has no data position: start at 0)
        batches.set_state(meta["data"])
    batch_shardings = batch_sharding(mesh, layout)
    if jax.process_index() == 0:
        if changes:
            kept = keep_previous(workdir)
            log.warning("resuming %s with a changed config: %s (the previous one is kept as "
                        "%s)", workdir, describe(changes), kept.name if kept else "-")
            batch = batch_change_warning(changes, config.train.reference_batch_size)
            if batch:
                log.warning(batch)
        (workdir / "config.yaml").write_text(dump_config(written))

    from jaxdet.jobs.plots import try_plot_training_curves  # matplotlib loads only when drawing

    logger = MetricsLogger(workdir, enabled=jax.process_index() == 0, resume_step=start or 0,
                           tensorboard_tags=config.train.tensorboard_tags,
                           batch_size=config.train.batch_size)
    hooks = []
    if eval_ctx is not None:
        if not complete:
            family.log_dataset(eval_ctx.source, "eval")

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
                                                  normalizer=family.normalizer()),
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
        family = tasks.resolve(config)
        task = family.build_task()
        report = weights.load_weights(task.model, family, checkpoint, restore=restore,
                                      format=checkpoint_format)
        names = train_build.regex_variable_names(config.train, workdir, report.variable_names)
        tx, _ = train_build.build_optimizer(config.train, names)
        state = init_train_state(task, tx, ema=config.train.ema_decay is not None,
                                 loss_scale=train_build.build_loss_scale(config))
        checkpointer.save(0, state, {"fingerprint": config_fingerprint(family),
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


__all__ = ["EvalContext", "VARIABLE_NAMES_FILE", "WorkdirBusy", "WorkdirMismatch",
           "checkpoint_label", "eval_context", "eval_dir", "eval_name", "evaluate",
           "evaluate_model", "import_weights", "inference_variables", "init_weights_format",
           "load_for_inference", "open_checkpoints", "restore_for_inference",
           "restore_inference_state", "results_home", "train", "weights_format"]
