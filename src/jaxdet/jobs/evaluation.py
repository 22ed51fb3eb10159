"""Evaluation of a checkpoint or of loaded weights on ``data.eval``: ``EvalContext`` (built
once per run, so predict compiles once; training evaluates through it too), ``evaluate``
(``jaxdet eval``), and where results go (``eval_dir``, ``results_home``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import jax

from jaxdet import tasks
from jaxdet.config import placeholders
from jaxdet.config.precision import resolve_precision
from jaxdet.config.schema import Config
from jaxdet.data import build as data_build
from jaxdet.eval.runner import (
    make_predict_fn,
    predict_callable,
)
from jaxdet.jobs.inference import eval_params, load_for_inference, weights_format
from jaxdet.models.task import Task
from jaxdet.parallel import build as parallel_build
from jaxdet.parallel.sharding import (
    local_copy,
    mesh_predict,
    replicated,
)
from jaxdet.tasks import Family
from jaxdet.train import build as train_build

log = logging.getLogger("jaxdet")


@dataclass
class EvalContext:
    """Everything evaluation needs, built once per run so predict compiles once.

    On one process, prediction runs over the mesh (images split like training batches); with
    several processes, process 0 evaluates alone on its own copy of the (replicated) weights
    and the others go on to the next train step, which waits for it.
    """

    family: Family
    task: Task
    predict: object
    source: object
    variables_sharding: object = None
    weights_format: str | None = None  # "tf" for a TF checkpoint's weights: TF's JPEG decode

    @property
    def config(self) -> Config:
        return self.family.config

    @classmethod
    def build(cls, family: Family, task: Task, workdir: Path, mesh=None, *,
              weights_format: str | None = None) -> EvalContext:
        config = family.config
        if config.data.eval is None:
            raise ValueError("data.eval is not set: there is nothing to evaluate on")
        source = family.build_source(workdir, "eval")
        options = train_build.predict_compiler_options(config)
        normalizer = family.normalizer()
        if mesh is None or jax.process_count() > 1 or mesh.size == 1:
            predict = make_predict_fn(task, allow_tf32=config.allow_tf32,
                                      compiler_options=options, normalizer=normalizer)
            return cls(family, task, predict, source, weights_format=weights_format)
        one_device = predict_callable(task, allow_tf32=config.allow_tf32, normalizer=normalizer)
        predict = mesh_predict(one_device, mesh, compiler_options=options)
        return cls(family, task, predict, source, replicated(mesh), weights_format)

    def __call__(self, state: dict, out_dir: Path, *, step: int, progress: bool = True,
                 on_images=None) -> dict:
        """Evaluate ``state`` into ``out_dir``; ``on_images(pictures)`` receives the pictures
        drawn for ``samples.png`` (tag -> uint8 [H, W, 3]) to log, when there are any."""
        variables = (eval_params(self.config, state), state["batch_stats"])
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
    placeholders.check_data_paths(config, splits=("eval",))
    family = tasks.resolve(resolve_precision(config, jax.default_backend(), "eval"))
    task, state, step = load_for_inference(family, workdir, step=step, checkpoint=checkpoint,
                                           checkpoint_format=checkpoint_format)
    return evaluate_model(family, task, state, step, results_home(workdir, checkpoint),
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


def evaluate_model(family: Family, task: Task, state: dict, step: int | str, home: Path, *,
                   out_dir: str | Path | None = None, overwrite: bool = False,
                   progress: bool = True, weights_format: str | None = None) -> dict:
    """Evaluate loaded weights (``state``: params / batch_stats [/ ema_params]) of checkpoint
    ``step`` on the ``data.eval`` of ``family``'s config, as :func:`evaluate` does after
    loading them.
    ``home``: where generated eval data lives and the results go by default
    (``home/eval/step_N``, :func:`eval_dir`); ``weights_format``: ``"tf"`` for a TF
    checkpoint's weights (TF's JPEG decode). Returns the metrics with ``out_dir`` and
    ``step``."""
    placeholders.check_data_paths(family.config, splits=("eval",))
    ctx = eval_context(family, task, Path(home), weights_format=weights_format)
    out = Path(out_dir) if out_dir else eval_dir(home, step, overwrite=overwrite)
    metrics = ctx(state, out, step=step, progress=progress)
    metrics["out_dir"], metrics["step"] = str(out), step
    return metrics


def eval_context(family: Family, task: Task, home: Path, *,
                 weights_format: str | None = None) -> EvalContext:
    """The :class:`EvalContext` of an evaluation outside training: over the config's mesh on
    one process (process 0 alone with several); ``home`` holds generated eval data."""
    mesh = None
    if jax.process_count() == 1:  # several processes: process 0 evaluates alone (EvalContext)
        mesh = parallel_build.build_mesh(family.config)
        parallel_build.check_mesh_layout(family.config, mesh, task, splits=("eval",))
    return EvalContext.build(family, task, home, mesh, weights_format=weights_format)
