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
              on_result: Callable[[dict], None] | None = None) -> list[dict]:
    """:func:`watch_checkpoints` of the run in ``workdir``, with ``config`` or else the
    run's own (``config.yaml`` with ``overrides``; waited for when the run has not started:
    :func:`wait_for_run`). What ``jaxdet eval --watch`` and ``jaxdet.watch_and_evaluate``
    do."""
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
                                 progress=progress, on_result=on_result, refresh=refresh)
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
                      refresh: Callable[[], None] | None = None) -> list[dict]:
    """Evaluate the checkpoints of the run in ``workdir`` (trained with ``config``) as they
    appear, until its last step is evaluated or none appears for ``timeout`` seconds; see
    the module docstring. ``on_result(metrics)`` is called after each evaluation (the
    command prints it); ``refresh()`` runs before each look at the checkpoints (a remote
    workdir's copy is brought up to date). Returns the metrics of each evaluation, oldest
    first (each with ``out_dir`` and ``step``).

    Raises:
      WorkdirMismatch: the checkpoints belong to another model configuration.
      ValueError: the config has no ``data.eval``.
    """
    workdir = Path(workdir)
    placeholders.check_data_paths(config, splits=("eval",))
    if config.data.eval is None:
        raise ValueError("data.eval is not set: there is nothing to evaluate on")
    last_step = config.train.num_steps
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
        with MetricsLogger(workdir / "eval_watch") as logger:
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
                if evaluated(workdir, step):
                    log.info("step %d is already evaluated (%s)", step,
                             workdir / "eval" / runs.eval_name(step))
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
                out = runs.eval_dir(workdir, step)
                metrics = context(state, out, step=step, progress=progress,
                                  on_images=functools.partial(logger.log_images, step))
                metrics["out_dir"], metrics["step"] = str(out), step
                logger.log(step, {k: v for k, v in metrics.items()
                                  if isinstance(v, (int, float)) and k != "step"}, prefix="eval")
                logger.flush()
                log.info("eval at step %d: %s", step, headline_metrics(metrics))
                if (workdir / "metrics.jsonl").is_file():  # curves.png shows this point too
                    try_plot_training_curves(workdir)
                results.append(metrics)
                if on_result is not None:
                    on_result(metrics)
    finally:
        checkpointer.close()
    return results


__all__ = ["DEFAULT_POLL", "DEFAULT_TIMEOUT", "evaluated", "wait_for_run", "watch_checkpoints",
           "watch_run"]
