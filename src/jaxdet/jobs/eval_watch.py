"""Evaluate a training run's checkpoints as they appear: ``jaxdet eval --watch``.

The TF OD API's evaluation side job (``model_main_tf2.py --checkpoint_dir``): training runs
without pausing to evaluate (``jaxdet train --no-eval``, or ``train.eval_every`` larger than
the run), on its own machine or accelerator, while this process evaluates each checkpoint it
writes. Every ``poll`` seconds the workdir's checkpoints are read again; the newest one not
evaluated yet is evaluated (older ones that appeared meanwhile are skipped and named: the
evaluation follows the newest weights, as TF's does), into ``WORKDIR/eval/step_N`` like any
evaluation, and its scalar metrics are logged to ``WORKDIR/eval_watch/metrics.jsonl`` and
TensorBoard (``WORKDIR/eval_watch/tensorboard``, tags ``eval/AP``, ..., and the pictures
of ``samples.png`` as ``eval_side_by_side_<k>``), and the run's
``curves.png`` is redrawn with them (``jobs.plots``). A step that already
has ``eval/step_N/metrics.json`` (training evaluated it, or an earlier watch did) is not
evaluated again.

It ends after evaluating the run's last step (``train.num_steps``), or when no new checkpoint
has appeared for ``timeout`` seconds (TF's ``eval_timeout``: 3600 s). It only reads the
checkpoints (a read-only view: the run's unfinished saves are left alone), and it may start
before the run: it waits, up to ``timeout``, for the workdir's ``config.yaml``.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from jaxdet import files, tasks
from jaxdet.config import placeholders
from jaxdet.config.schema import Config
from jaxdet.eval.runner import headline_metrics
from jaxdet.jobs import runs
from jaxdet.jobs.model_source import model_source
from jaxdet.jobs.plots import try_plot_training_curves
from jaxdet.jobs.tf_run import tf_checkpoints
from jaxdet.train.checkpoint_integrity import damage
from jaxdet.train.metrics_log import MetricsLogger
from jaxdet.train.remote_workdir import StagedWorkdir

log = logging.getLogger("jaxdet")

DEFAULT_TIMEOUT = 3600.0  # seconds without a new checkpoint: the TF OD API's eval_timeout
DEFAULT_POLL = 10.0


def wait_for_run(workdir: str | Path, *, timeout: float = DEFAULT_TIMEOUT,
                 poll: float = DEFAULT_POLL, sleep: Callable[[float], None] = time.sleep
                 ) -> str:
    """``WORKDIR/config.yaml`` once a training run has written it (at its start), waiting up
    to ``timeout`` seconds. Returns its path; raises TimeoutError naming the workdir."""
    config_file = files.join(workdir, "config.yaml")
    deadline = time.monotonic() + timeout
    said = False
    while not files.isfile(config_file):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no training run started in {workdir} within {timeout:g} s "
                               "(no config.yaml)")
        if not said:
            log.info("waiting for a training run in %s ...", workdir)
            said = True
        sleep(poll)
    return config_file


def watch_run(workdir: str | os.PathLike, config: Config | None = None, *,
              overrides: Iterable[str] = (), timeout: float = DEFAULT_TIMEOUT,
              poll: float = DEFAULT_POLL, progress: bool = False,
              on_result: Callable[[dict], None] | None = None,
              out_root: str | os.PathLike | None = None,
              last_step: int | None = None) -> list[dict]:
    """:func:`watch_checkpoints` of the run in ``workdir``, with ``config`` or else the
    run's own (``config.yaml`` with ``overrides``; waited for when the run has not started:
    :func:`wait_for_run`). What ``jaxdet eval --watch`` and ``jaxdet.watch_and_evaluate``
    do. ``out_root``: where the evaluations go (default: the workdir; a local folder);
    ``last_step``: the step that ends the watch (default ``train.num_steps``)."""
    refresh = None
    if files.is_url(workdir):  # a bucket: a local copy, refreshed before each look
        wait_for_run(workdir, timeout=timeout, poll=poll)
        staged = StagedWorkdir(os.fspath(workdir), "watch")
        staged.pull(exact=True)

        def refresh() -> None:
            staged.push(owner=False)  # this watcher's evaluations so far
            staged.pull(exact=False)  # the run's new sealed checkpoints

        workdir = staged.local
    if config is None:
        wait_for_run(workdir, timeout=timeout, poll=poll)
        config = model_source(workdir=workdir, overrides=overrides).config
    try:
        return watch_checkpoints(config, workdir, timeout=timeout, poll=poll,
                                 progress=progress, on_result=on_result, refresh=refresh,
                                 out_root=out_root, last_step=last_step)
    finally:
        if refresh is not None:
            staged.push(owner=False)


def evaluated(workdir: Path, step: int) -> bool:
    """Whether ``WORKDIR/eval/step_N`` already holds an evaluation."""
    return (workdir / "eval" / runs.eval_name(step) / "metrics.json").is_file()


def watch_checkpoints(config: Config, workdir: str | Path, *,
                      timeout: float = DEFAULT_TIMEOUT, poll: float = DEFAULT_POLL,
                      progress: bool = False,
                      on_result: Callable[[dict], None] | None = None,
                      sleep: Callable[[float], None] = time.sleep,
                      refresh: Callable[[], None] | None = None,
                      out_root: str | Path | None = None,
                      last_step: int | None = None) -> list[dict]:
    """Evaluate the checkpoints of the run in ``workdir`` (trained with ``config``) as they
    appear, until its last step is evaluated or none appears for ``timeout`` seconds; see
    the module docstring. ``on_result(metrics)`` is called after each evaluation (the
    command prints it); ``refresh()`` runs before each look at the checkpoints (a remote
    workdir's copy is brought up to date); ``out_root``: where ``eval/step_N`` and
    ``eval_watch/`` are written (default: the workdir); ``last_step``: the step that ends
    the watch (default ``train.num_steps``). Returns the metrics of each evaluation, oldest
    first (each with ``out_dir`` and ``step``).

    Raises:
      WorkdirMismatch: the checkpoints belong to another model configuration.
      ValueError: the config has no ``data.eval``.
    """
    workdir = Path(workdir)
    out_root = workdir if out_root is None else Path(out_root)
    check_eval_data(config)
    last_step = config.train.num_steps if last_step is None else last_step
    family = tasks.resolve(config)  # the one lookup of model.type for this watch
    task = family.build_task()
    context = None  # built at the first checkpoint: the run writes generated data first
    checkpointer = runs.open_checkpoints(config, workdir, read_only=True)
    results: list[dict] = []
    done = -1  # the newest step handled (evaluated, found evaluated, or damaged)
    since = time.monotonic()
    log.info("watching %s for checkpoints (up to step %d; %g s without a new one ends it)",
             workdir / "checkpoints", last_step, timeout)
    try:
        with MetricsLogger(out_root / "eval_watch", tf_root=out_root,
                           tensorboard_tags=config.train.tensorboard_tags) as logger:
            while done < last_step:
                if refresh is not None:  # a remote workdir's local copy brought up to date
                    refresh()
                new = [s for s in checkpointer.reload() if s > done]
                if not new:
                    if time.monotonic() - since >= timeout:
                        log.warning("no new checkpoint in %s for %g s: stopping after step %s "
                                    "of %d", workdir / "checkpoints", timeout,
                                    done if done >= 0 else "none", last_step)
                        break
                    sleep(poll)
                    continue
                step, since = new[-1], time.monotonic()
                if len(new) > 1:
                    log.info("skipping step(s) %s: step %d is newer",
                             ", ".join(map(str, new[:-1])), step)
                done = step
                why = damage(checkpointer.step_dir(step))
                if why is not None:
                    log.warning("checkpoint step %d is damaged (%s): not evaluated", step, why)
                    continue
                if evaluated(out_root, step):
                    log.info("step %d is already evaluated (%s)", step,
                             out_root / "eval" / runs.eval_name(step))
                    continue
                try:
                    state = runs.restore_inference_state(family, task, checkpointer, step,
                                                         workdir)
                except runs.WorkdirMismatch:
                    raise
                except Exception:
                    if checkpointer.step_dir(step).is_dir():
                        raise
                    log.info("step %d was removed by the run (train.keep_checkpoints) before "
                             "it could be read: not evaluated", step)
                    continue
                if context is None:
                    context = runs.eval_context(family, task, workdir)
                results.append(_evaluate_step(context, state, step, out_root, logger,
                                              progress=progress, on_result=on_result))
                if (out_root / "metrics.jsonl").is_file():  # curves.png shows this point too
                    try_plot_training_curves(out_root)
    finally:
        checkpointer.close()
    return results


def check_eval_data(config: Config) -> None:
    """ValueError / ConfigError when the config has no usable ``data.eval``."""
    placeholders.check_data_paths(config, splits=("eval",))
    if config.data.eval is None:
        raise ValueError("data.eval is not set: there is nothing to evaluate on")


def _evaluate_step(context, state: dict, step: int, out_root: Path, logger: MetricsLogger, *,
                   progress: bool, on_result: Callable[[dict], None] | None) -> dict:
    """Evaluate one checkpoint's ``state`` into ``out_root/eval/step_N``, log its scalars
    and pictures to ``logger``; returns the metrics (with ``out_dir`` and ``step``)."""
    out = runs.eval_dir(out_root, step)
    metrics = context(state, out, step=step, progress=progress,
                      on_images=functools.partial(logger.log_images, step))
    metrics["out_dir"], metrics["step"] = str(out), step
    logger.log(step, {k: v for k, v in metrics.items()
                      if isinstance(v, (int, float)) and k != "step"}, prefix="eval")
    logger.flush()
    log.info("eval at step %d: %s", step, headline_metrics(metrics))
    if on_result is not None:
        on_result(metrics)
    return metrics


def watch_tf_model_dir(config: Config, model_dir: str | Path, out_root: str | Path, *,
                       timeout: float = DEFAULT_TIMEOUT, poll: float = DEFAULT_POLL,
                       progress: bool = False,
                       on_result: Callable[[dict], None] | None = None,
                       sleep: Callable[[float], None] = time.sleep,
                       last_step: int | None = None) -> list[dict]:
    """Evaluate the TF OD API checkpoints (``ckpt-N``) of a TF ``model_dir`` as TF's
    ``model_main_tf2.py --checkpoint_dir`` does: each new one (the newest, when several
    appeared meanwhile), read through the TF name map, labelled by the training step it
    holds, into ``out_root/eval/step_N`` and ``out_root/eval_watch/``; until a checkpoint of
    step ``last_step`` (default ``train.num_steps``) is evaluated or none appears for
    ``timeout`` seconds. Returns the metrics of each evaluation, oldest first."""
    check_eval_data(config)
    out_root = Path(out_root)
    last_step = config.train.num_steps if last_step is None else last_step
    family = tasks.resolve(config)
    context = None
    seen: set[str] = set()
    results: list[dict] = []
    since = time.monotonic()
    log.info("watching %s for TF checkpoints (ckpt-N, up to step %d; %g s without a new one "
             "ends it)", model_dir, last_step, timeout)
    with MetricsLogger(out_root / "eval_watch", tf_root=out_root,
                       tensorboard_tags=config.train.tensorboard_tags) as logger:
        while True:
            new = [p for p in tf_checkpoints(model_dir) if p not in seen]
            if not new:
                if time.monotonic() - since >= timeout:
                    log.warning("no new checkpoint in %s for %g s: stopping", model_dir,
                                timeout)
                    break
                sleep(poll)
                continue
            prefix, since = new[-1], time.monotonic()
            if len(new) > 1:
                log.info("skipping %s: %s is newer",
                         ", ".join(files.basename(p) for p in new[:-1]), files.basename(prefix))
            seen.update(new)
            task, state, step = runs.load_for_inference(family, None, checkpoint=prefix,
                                                        checkpoint_format="tf")
            if not isinstance(step, int):
                raise ValueError(f"{prefix} holds no training step (no 'step' or optimizer "
                                 "iteration variable): not a model_main_tf2 checkpoint")
            if evaluated(out_root, step):
                log.info("step %d is already evaluated (%s)", step,
                         out_root / "eval" / runs.eval_name(step))
            else:
                if context is None:
                    context = runs.eval_context(family, task, out_root, weights_format="tf")
                results.append(_evaluate_step(context, state, step, out_root, logger,
                                              progress=progress, on_result=on_result))
            if step >= last_step:
                break
    return results


__all__ = ["DEFAULT_POLL", "DEFAULT_TIMEOUT", "check_eval_data", "evaluated", "wait_for_run",
           "watch_checkpoints", "watch_run", "watch_tf_model_dir"]
