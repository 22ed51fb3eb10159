"""A small hook-based training loop (no per-model trainers).

The loop owns only the order of things: fetch a batch, run the compiled step, log, checkpoint,
call hooks. What a step computes, what a hook does and where data comes from are passed in.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jax
import numpy as np
from tqdm import tqdm

from jaxdet.backends import process
from jaxdet.train import step_memory
from jaxdet.train.checkpoint import Checkpointer
from jaxdet.train.metrics_log import MetricsLogger
from jaxdet.train.preemption import StopSignals

TrainState = dict

log = logging.getLogger("jaxdet.train")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept untouched."""


class Hook(Protocol):
    def after_step(self, step: int, state: TrainState) -> None: ...

    def at_end(self, step: int, state: TrainState) -> None: ...


@dataclass
class PeriodicHook:
    """Calls ``fn(step, state)`` every ``every`` steps (0 = never) and once at the end."""

    fn: Callable[[int, TrainState], Any]
    every: int = 0
    at_end_too: bool = True
    _last: int = field(default=-1, repr=False)

    def after_step(self, step: int, state: TrainState) -> None:
        if self.every and step % self.every == 0:
            self._last = step
            self.fn(step, state)

    def at_end(self, step: int, state: TrainState) -> None:
        if self.at_end_too and self._last != step:
            self._last = step
            self.fn(step, state)


@dataclass
class LoopResult:
    """What a ``train_loop`` call did. ``images_per_second`` is the training rate after the
    compile (evaluation and checkpoint writing not counted; 0 when fewer than two steps ran);
    ``steps_run`` the steps this call trained (0: the run was already complete);
    ``stopped_by`` the signal that stopped it early after a checkpoint of ``step`` (None: it
    ran to its end)."""

    state: TrainState
    step: int
    last_metrics: dict
    images_per_second: float
    compile_seconds: float
    steps_run: int = 0
    stopped_by: str | None = None


# Steps are dispatched asynchronously; the loop waits for step n - 2 before going on after
# step n, so the host runs at most two steps ahead of the device: the progress bar follows
# the device (instead of racing ahead, then stalling when metrics are read) and queued input
# batches do not pile up in device memory, while loading the next batch still overlaps the step.
MAX_STEPS_IN_FLIGHT = 2

# The bar shows jaxdet's own rate and ETA (postfix), measured over training time only.
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


def _eta(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


def _hook_due(hook: Hook, step: int) -> bool:
    every = getattr(hook, "every", 0)
    return bool(every) and step % every == 0


def _check_finite(step: int, metrics: dict, last_saved: int | None) -> None:
    loss = float(metrics["loss"])
    if not math.isfinite(loss):
        kept = f"the last good checkpoint (step {last_saved}) is kept" if last_saved else (
            "no checkpoint had been written yet"
        )
        raise TrainingDiverged(
            f"loss is {loss} at step {step}; training stopped and {kept}. Try a lower "
            "learning rate, gradient clipping (train.optimizer.clip_gradient_norm) or fp32."
        )


def train_loop(
    *,
    step_fn: Callable[[TrainState, dict], tuple[TrainState, dict]],
    state: TrainState,
    batches: Iterator[dict],
    start_step: int,
    num_steps: int,
    checkpointer: Checkpointer,
    checkpoint_metadata: Callable[[], dict],
    logger: MetricsLogger,
    log_every: int,
    batch_size: int,
    hooks: Sequence[Hook] = (),
    stop_after: int | None = None,
    progress: bool = True,
    place_batch: Callable[[dict], dict] | None = None,
    stop: StopSignals | None = None,
) -> LoopResult:
    """Run steps ``start_step+1 .. num_steps`` (1-based, ``state['step']`` counts them).

    ``place_batch`` turns a host batch into the step's input (e.g. global arrays on a device
    mesh, ``parallel.sharding.place_batch``); None passes it as it is.
    When the step reports ``skipped`` (fp16 loss scaling), every log line also carries
    ``skipped_steps``: the steps of this call whose update was skipped so far.
    ``stop_after`` ends the loop early after that step without the end-of-run actions — it
    stands for a run killed mid-way (tests use it to prove resumption is exact).
    ``progress``: a progress bar when stderr is a terminal; otherwise (a log file, or
    ``progress=False``) a plain INFO line every ``log_every`` steps instead.
    ``stop`` (an active :class:`StopSignals`): after each step, if a stop was asked for, the
    step is checkpointed and the loop returns with ``stopped_by`` set, skipping the hooks and
    the end-of-run actions. If the batch cannot be read once a stop was asked for (the signal
    also ended the loader's worker processes), the last step is checkpointed instead.
    """
    step = start_step
    last_saved = checkpointer.latest_step()
    # Throughput: images over training time since the first (compiling) step, with the time
    # spent in hooks (evaluation) and checkpoint writes left out.
    window_start, window_images, paused = time.perf_counter(), 0, 0.0
    compile_seconds, rate = 0.0, 0.0
    metrics: dict = {}
    skipped = None  # fp16: steps whose update was skipped (non-finite gradients), on device
    in_flight: collections.deque = collections.deque()  # losses of the steps not yet awaited
    show_bar = progress and process.draws_progress_bars()
    bar = tqdm(total=num_steps, initial=start_step, desc="train", unit="step",
               disable=not show_bar, dynamic_ncols=True, bar_format=BAR_FORMAT)
    stopped_by = None
    try:  # the bar ends its line whatever happens: an error gets a line of its own
        while step < num_steps:
            try:
                batch = next(batches)
            except Exception:
                if stop is None or stop.requested is None:
                    raise
                stopped_by = stop.requested  # checkpointed below, at the last finished step
                break
            if place_batch is not None:
                batch = place_batch(batch)
            t0 = time.perf_counter()
            if step == start_step:
                log.info("compiling the train step (the first step includes it) ...")
                memory = step_memory.measure(step_fn, state, batch)  # the call below reuses it
                if memory is not None:
                    step_memory.check(memory)
                    log.info("%s", memory.line())
            state, metrics = step_fn(state, batch)
            step += 1
            in_flight.append(metrics["loss"])
            if len(in_flight) > MAX_STEPS_IN_FLIGHT:
                jax.block_until_ready(in_flight.popleft())
            if "skipped" in metrics:  # summed on device: no host sync per step
                skipped = metrics["skipped"] if skipped is None else skipped + metrics["skipped"]
            if step == start_step + 1:  # the first call compiles; time it apart from throughput
                jax.block_until_ready(metrics["loss"])
                compile_seconds = time.perf_counter() - t0
                log.info("step %d done in %.1f s, compile included", step, compile_seconds)
                window_start, window_images, paused = time.perf_counter(), 0, 0.0
            else:
                window_images += batch_size
            if step % log_every == 0 or step == num_steps:
                metrics = jax.device_get(metrics)
                _check_finite(step, metrics, last_saved)
                elapsed = time.perf_counter() - window_start - paused
                rate = window_images / elapsed if window_images and elapsed > 0 else rate
                scalars = {k: float(np.asarray(v)) for k, v in metrics.items()}
                scalars["images_per_second"] = rate
                postfix = {"loss": f"{scalars['loss']:.4f}",
                           "lr": f"{scalars['learning_rate']:.2e}"}
                if rate > 0:
                    postfix["img/s"] = f"{rate:.1f}"
                    postfix["eta"] = _eta((num_steps - step) * batch_size / rate)
                if skipped is not None:
                    scalars["skipped_steps"] = float(jax.device_get(skipped))
                    if scalars["skipped_steps"]:
                        postfix["skipped"] = int(scalars["skipped_steps"])
                logger.log(step, scalars, prefix="train")
                bar.set_postfix(postfix)
                if not show_bar:
                    log.info("step %d/%d  %s", step, num_steps,
                             "  ".join(f"{k} {v}" for k, v in postfix.items()))
            bar.update(1)
            stopping = stop is not None and stop.stop_now(step)
            checkpoint_due = stopping or step % checkpointer.every_steps == 0 or step == num_steps
            if checkpoint_due or any(_hook_due(hook, step) for hook in hooks):
                jax.block_until_ready(metrics["loss"])  # the step's own time is training time
            t_pause = time.perf_counter()
            if checkpoint_due:
                _check_finite(step, jax.device_get(metrics), last_saved)
                if checkpointer.save(step, state, checkpoint_metadata(),
                                     force=stopping or step == num_steps):
                    last_saved = step
            if stopping:
                stopped_by = stop.requested
                break
            for hook in hooks:
                hook.after_step(step, state)
            paused += time.perf_counter() - t_pause
            if stop_after is not None and step >= stop_after:
                break
    finally:
        bar.close()
    if stopped_by is not None and last_saved != step and step > start_step:
        if checkpointer.save(step, state, checkpoint_metadata(), force=True):
            last_saved = step
    checkpointer.wait()
    if stopped_by is None and (stop_after is None or step >= num_steps):
        for hook in hooks:
            hook.at_end(step, state)
    return LoopResult(state, step, jax.device_get(metrics), rate, compile_seconds,
                      steps_run=step - start_step, stopped_by=stopped_by)
